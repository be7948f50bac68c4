// What the training loop shows people while it runs (rank 0 only: other ranks' stdout is
// /dev/null).
//
// Two modes, chosen once from where stdout goes:
//  - a terminal (isatty): one live line at the bottom, redrawn at most 10 times a second with
//    step, epoch, loss, tokens/s, elapsed and ETA; every --log-every steps a permanent log line
//    is printed above it; during an evaluation or a checkpoint write the live line shows a
//    spinner and the seconds so far (a ticker thread), so a long evaluation is visibly alive.
//  - anything else (a file, a pipe, CI): plain lines only, each prefixed with the local time,
//    written and flushed in order; an evaluation announces its start.
// Under mpirun or srun (their ranks' stdout is a pseudo-terminal whatever the job's output is)
// the lines are plain. FITTRAIN_PROGRESS=plain or =tty overrides the choice (tests; terminals
// that mis-handle \r).
//
// The ETA counts training time only: evaluations and checkpoint writes are excluded from the
// time per step, and the remaining steps are costed at the mean of this process's steps so
// far (a resumed run starts a fresh estimate).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

namespace ft {

// "1:02:03" or "2:03" (minutes:seconds under an hour); "-" when negative or not finite.
std::string format_duration(double seconds);
// "[11-26 17:59:01] " in local time.
std::string timestamp_prefix();

struct StepStatus {
  int64_t step = 0, total_steps = 0;
  double epoch = 0;  // epochs done, fractional: 1.25 is a quarter into the second epoch
  double loss = 0, tokens_per_s = 0;  // loss units per second (tokens, positions, images)
  const char* unit = "tok";           // their abbreviation in "512k tok/s"
};

class Progress {
 public:
  // total_steps and first_step (the step this process starts from, > 0 after a resume) set
  // the ETA's scale. `out` is where lines go (stdout in the trainer, a file in tests).
  Progress(int64_t first_step, int64_t total_steps, std::FILE* out = stdout);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  bool tty() const { return tty_; }

  // After every step: the live line (terminal only; throttled).
  void step_done(const StepStatus& s);
  // A permanent line (the --log-every line, an evaluation's result, a warning): timestamped
  // when plain; on a terminal printed above the live line, which is then redrawn.
  void line(const std::string& text);

  // Seconds of training per step so far and the ETA of the remaining steps.
  double seconds_per_step() const;
  double eta_seconds(int64_t step) const;
  double elapsed_seconds() const;
  double training_seconds() const;  // elapsed less evaluations and checkpoint writes

  // Marks an evaluation or a checkpoint write: its time is not training time; on a terminal
  // the live line shows `what` with a spinner until end_activity().
  // announce: also say when it starts in plain mode (an evaluation: it may take a while; a
  // checkpoint's line comes when it is written).
  void begin_activity(const std::string& what, bool announce = true);
  void end_activity();
  // The run is over: the live line stays on the screen as the final state (a newline after
  // it) and nothing is drawn any more.
  void finish();

 private:
  std::string live_text(const StepStatus& s) const;
  void draw_locked(const std::string& text);
  void clear_locked();

  std::FILE* out_;
  bool tty_;
  int64_t first_step_, total_steps_;
  std::chrono::steady_clock::time_point start_, last_draw_{}, activity_start_{};
  double excluded_s_ = 0;  // evaluation and checkpoint time
  int64_t last_step_ = 0;
  StepStatus last_{};
  bool live_shown_ = false;
  bool tty_done_ = false;  // finish() was called
  std::mutex mu_;
  // the ticker of an activity (terminal only)
  std::thread ticker_;
  std::atomic<bool> ticking_{false};
  std::string activity_;
};

// RAII for begin_activity/end_activity.
class ProgressActivity {
 public:
  ProgressActivity(Progress* p, const std::string& what, bool announce = true) : p_(p) {
    if (p_) p_->begin_activity(what, announce);
  }
  ~ProgressActivity() {
    if (p_) p_->end_activity();
  }
  ProgressActivity(const ProgressActivity&) = delete;
  ProgressActivity& operator=(const ProgressActivity&) = delete;

 private:
  Progress* p_;
};

}  // namespace ft
