#include "train/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace ft {

namespace {

bool choose_tty(std::FILE* out) {
  if (const char* v = std::getenv("FITTRAIN_PROGRESS")) {
    if (std::strcmp(v, "tty") == 0) return true;
    if (std::strcmp(v, "plain") == 0) return false;
  }
  // mpirun and srun give their ranks a pseudo-terminal even when their own output goes to a
  // file: under them the lines stay plain.
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID"})
    if (std::getenv(v)) return false;
  return isatty(fileno(out)) != 0;
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// "512k" / "1.23M" tokens per second.
std::string short_rate(double v) {
  char b[32];
  if (v >= 1e6) std::snprintf(b, sizeof b, "%.2fM", v / 1e6);
  else if (v >= 1e3) std::snprintf(b, sizeof b, "%.0fk", v / 1e3);
  else std::snprintf(b, sizeof b, "%.0f", v);
  return b;
}

}  // namespace

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "-";
  const long long t = std::llround(s);
  char b[32];
  if (t >= 3600) std::snprintf(b, sizeof b, "%lld:%02lld:%02lld", t / 3600, (t / 60) % 60, t % 60);
  else std::snprintf(b, sizeof b, "%lld:%02lld", t / 60, t % 60);
  return b;
}

std::string timestamp_prefix() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char b[32];
  std::strftime(b, sizeof b, "[%m-%d %H:%M:%S] ", &tm);
  return b;
}

Progress::Progress(int64_t first_step, int64_t total_steps, std::FILE* out)
    : out_(out),
      tty_(choose_tty(out)),
      first_step_(first_step),
      total_steps_(total_steps),
      start_(std::chrono::steady_clock::now()),
      last_step_(first_step) {}

Progress::~Progress() { finish(); }

void Progress::finish() {
  end_activity();
  std::lock_guard<std::mutex> lock(mu_);
  if (live_shown_) {
    std::fputc('\n', out_);
    std::fflush(out_);
    live_shown_ = false;
  }
  last_.step = 0;  // no more redraws
  tty_done_ = true;
}

double Progress::elapsed_seconds() const { return since(start_); }

double Progress::training_seconds() const { return since(start_) - excluded_s_; }

double Progress::seconds_per_step() const {
  const int64_t done = last_step_ - first_step_;
  return done > 0 ? (since(start_) - excluded_s_) / static_cast<double>(done) : NAN;
}

double Progress::eta_seconds(int64_t step) const {
  return seconds_per_step() * static_cast<double>(total_steps_ - step);
}

std::string Progress::live_text(const StepStatus& s) const {
  const double frac = total_steps_ > 0 ? static_cast<double>(s.step) / static_cast<double>(total_steps_) : 0.0;
  constexpr int kBar = 20;
  const int filled = static_cast<int>(std::lround(frac * kBar));
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kBar - filled), '.');
  char b[256];
  std::snprintf(b, sizeof b, "step %lld/%lld [%s] %3.0f%% | epoch %.2f | loss %.4f | %s %s/s | %s < %s",
                static_cast<long long>(s.step), static_cast<long long>(s.total_steps), bar.c_str(), 100 * frac,
                s.epoch, s.loss, short_rate(s.tokens_per_s).c_str(), s.unit, format_duration(elapsed_seconds()).c_str(),
                format_duration(eta_seconds(s.step)).c_str());
  return b;
}

void Progress::draw_locked(const std::string& text) {
  // \r, the text, then erase to the end of the line (the previous text may be longer).
  std::fprintf(out_, "\r%s\x1b[K", text.c_str());
  std::fflush(out_);
  live_shown_ = true;
}

void Progress::clear_locked() {
  if (!live_shown_) return;
  std::fputs("\r\x1b[K", out_);
  live_shown_ = false;
}

void Progress::step_done(const StepStatus& s) {
  std::lock_guard<std::mutex> lock(mu_);
  last_step_ = s.step;
  last_ = s;
  if (!tty_ || tty_done_) return;
  const auto now = std::chrono::steady_clock::now();
  if (s.step != s.total_steps && std::chrono::duration<double>(now - last_draw_).count() < 0.1) return;
  last_draw_ = now;
  draw_locked(live_text(s));
}

void Progress::line(const std::string& text) {
  std::lock_guard<std::mutex> lock(mu_);
  if (tty_) {
    clear_locked();
    std::fprintf(out_, "%s\n", text.c_str());
    if (last_.step > 0 && !ticking_) draw_locked(live_text(last_));
    std::fflush(out_);
    return;
  }
  std::fprintf(out_, "%s%s\n", timestamp_prefix().c_str(), text.c_str());
  std::fflush(out_);
}

void Progress::begin_activity(const std::string& what, bool announce) {
  end_activity();
  std::lock_guard<std::mutex> lock(mu_);
  activity_start_ = std::chrono::steady_clock::now();
  activity_ = what;
  if (!tty_ || tty_done_) {
    if (announce && !tty_) {
      std::fprintf(out_, "%s%s ...\n", timestamp_prefix().c_str(), what.c_str());
      std::fflush(out_);
    }
    return;
  }
  ticking_ = true;
  ticker_ = std::thread([this] {
    static const char kSpin[] = "|/-\\";
    for (int i = 0; ticking_; ++i) {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (!ticking_) break;
        char b[160];
        std::snprintf(b, sizeof b, "%c %s %.1f s", kSpin[i % 4], activity_.c_str(), since(activity_start_));
        draw_locked(b);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
}

void Progress::end_activity() {
  if (ticker_.joinable()) {
    ticking_ = false;
    ticker_.join();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (activity_.empty()) return;
  excluded_s_ += since(activity_start_);
  activity_.clear();
  if (tty_) {
    clear_locked();
    if (last_.step > 0) draw_locked(live_text(last_));
  }
}

}  // namespace ft
