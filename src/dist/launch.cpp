// The self-spawn launcher and its rendezvous folder (see launch.h).
#include "dist/launch.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <thread>

#include "core/error.h"

extern char** environ;

namespace ft {

namespace {

std::string errno_text(int e = errno) { return std::strerror(e); }
constexpr const char* kRendezvousPrefix = "fittrain-rdzv-";  // remove_rendezvous_dir removes only these

// "SIGSEGV": the name users search for (strsignal would say "Segmentation fault").
std::string signal_name(int sig) {
#define FT_SIG(s) {s, #s}
  static constexpr std::pair<int, const char*> kNames[] = {
      FT_SIG(SIGHUP),  FT_SIG(SIGINT),  FT_SIG(SIGQUIT), FT_SIG(SIGILL),  FT_SIG(SIGTRAP), FT_SIG(SIGABRT),
      FT_SIG(SIGBUS),  FT_SIG(SIGFPE),  FT_SIG(SIGKILL), FT_SIG(SIGUSR1), FT_SIG(SIGSEGV), FT_SIG(SIGUSR2),
      FT_SIG(SIGPIPE), FT_SIG(SIGALRM), FT_SIG(SIGTERM), FT_SIG(SIGXCPU), FT_SIG(SIGXFSZ), FT_SIG(SIGSYS)};
#undef FT_SIG
  for (const auto& [n, name] : kNames)
    if (n == sig) return name;
  return "signal " + std::to_string(sig);
}

// ---- signal state of run_workers -----------------------------------------------------------
// A handler may run in any thread, so it only counts and wakes the waiting loop through a
// self-pipe; the loop does the forwarding (and sees no race between its checks and its poll).
std::atomic<int> g_signal_count{0};  // SIGINT/SIGTERM/SIGHUP received during run_workers
std::atomic<int> g_first_signal{0};  // the first of them: forwarded (SIGHUP as SIGTERM)
std::atomic<int> g_wake_fd{-1};      // write end of the self-pipe
std::atomic<bool> g_running{false};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs lock-free atomics");

void on_signal(int sig) {
  const int saved = errno;
  if (sig != SIGCHLD) {
    int none = 0;
    g_first_signal.compare_exchange_strong(none, sig);
    g_signal_count.fetch_add(1);
  }
  const char b = 0;
  // Non-blocking: when the pipe is full the loop is already due to wake up.
  if (::write(g_wake_fd.load(), &b, 1) < 0) {
  }
  errno = saved;
}

// SIGHUP (the terminal or ssh session went) stops the workers as SIGTERM does, with their
// checkpoint: the launcher would die of it, and its workers with it (PR_SET_PDEATHSIG).
constexpr int kHandled[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};
constexpr int kHandledCount = static_cast<int>(std::size(kHandled));

// Installs the handlers and the self-pipe; the destructor restores what was there.
struct SignalScope {
  int pipe_fds[2] = {-1, -1};
  struct sigaction old[kHandledCount] = {};
  int installed = 0;

  SignalScope() {
    FT_CHECK(!g_running.exchange(true), "run_workers is already running in this process");
    if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
      g_running = false;
      throw InternalError(detail::concat("run_workers: pipe2 failed: ", errno_text()));
    }
    g_signal_count = 0;
    g_first_signal = 0;
    g_wake_fd = pipe_fds[1];
    struct sigaction sa = {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    // SA_RESTART: other threads' blocking calls are not interrupted by our SIGCHLD; our own
    // poll() returns EINTR regardless. SA_NOCLDSTOP: a stopped worker is not an exit.
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    for (; installed < kHandledCount; ++installed) {
      struct sigaction now = sa, current = {};
      // An ignored SIGHUP (nohup) stays ignored: the run was started to outlive its terminal.
      if (kHandled[installed] == SIGHUP && ::sigaction(SIGHUP, nullptr, &current) == 0 && current.sa_handler == SIG_IGN)
        now = current;
      if (::sigaction(kHandled[installed], &now, &old[installed]) != 0) {
        const std::string msg = detail::concat("run_workers: sigaction(", signal_name(kHandled[installed]),
                                               ") failed: ", errno_text());
        restore();
        throw InternalError(msg);
      }
    }
  }
  ~SignalScope() { restore(); }
  void restore() {
    while (installed > 0) {
      --installed;
      ::sigaction(kHandled[installed], &old[installed], nullptr);  // restoring a valid action cannot fail
    }
    g_wake_fd = -1;
    for (int& fd : pipe_fds) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
    g_running = false;
  }
};

// ---- the child between fork and execv: async-signal-safe calls only ------------------------
void put(const char* s) {
  if (::write(STDERR_FILENO, s, std::strlen(s)) < 0) return;  // nowhere left to report it
}

[[noreturn]] void child_fail(const char* prefix, const char* what, int e) {
  put(prefix);
  put(what);
  put(": ");
  switch (e) {  // strerror is not async-signal-safe
    case ENOENT: put("no such file or directory"); break;
    case EACCES: put("permission denied"); break;
    case ENOEXEC: put("not an executable format"); break;
    default: {
      char num[16], *p = num + sizeof num - 1;
      *p = 0;
      unsigned v = static_cast<unsigned>(e);
      do *--p = static_cast<char>('0' + v % 10); while (v /= 10);
      put("errno ");
      put(p);
    }
  }
  put("\n");
  ::_exit(127);
}

// Everything the child needs, built before fork (no allocation after it).
struct Prepared {
  std::vector<std::string> env_strings;
  std::vector<char*> argv, envp;
  std::string fail_prefix;  // "fittrain: cannot start <label>: "
};

Prepared prepare(const WorkerSpec& w) {
  FT_CHECK(!w.argv.empty() && !w.argv[0].empty(), "run_workers: ", w.label, " has no program");
  Prepared p;
  for (char** e = environ; e && *e; ++e) p.env_strings.emplace_back(*e);
  for (const auto& [name, value] : w.env) {
    FT_CHECK(!name.empty() && name.find('=') == std::string::npos, "run_workers: bad variable name '", name, "'");
    const std::string prefix = name + "=";
    std::erase_if(p.env_strings, [&](const std::string& s) { return s.compare(0, prefix.size(), prefix) == 0; });
    p.env_strings.push_back(prefix + value);
  }
  for (const auto& a : w.argv) p.argv.push_back(const_cast<char*>(a.c_str()));
  p.argv.push_back(nullptr);
  for (auto& s : p.env_strings) p.envp.push_back(s.data());
  p.envp.push_back(nullptr);
  p.fail_prefix = "fittrain: cannot start " + w.label + ": ";
  return p;
}

[[noreturn]] void run_child(const Prepared& p, pid_t launcher, const struct sigaction* old_actions) {
  // Own process group first: from here a terminal's Ctrl-C reaches only the launcher.
  if (::setpgid(0, 0) != 0) child_fail(p.fail_prefix.c_str(), "setpgid", errno);
  // The handlers were the launcher's; the worker gets what the launcher itself had.
  for (int i = 0; i < 3; ++i)
    if (::sigaction(kHandled[i], &old_actions[i], nullptr) != 0) child_fail(p.fail_prefix.c_str(), "sigaction", errno);
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) child_fail(p.fail_prefix.c_str(), "prctl(PR_SET_PDEATHSIG)", errno);
  // The launcher may have died before prctl: its death signal would then never come, and
  // nobody is left to run with.
  if (::getppid() != launcher) ::_exit(127);
  ::execve(p.argv[0], p.argv.data(), p.envp.data());
  child_fail(p.fail_prefix.c_str(), p.argv[0], errno);
}

// The started workers. The destructor SIGKILLs and reaps whatever still runs, so an exception
// (a failed fork of a later worker, a lost child) never leaves workers behind.
struct Group {
  std::vector<pid_t> pids;  // -1 once reaped

  // Signals a worker's whole group (what a terminal would have signalled), the worker itself
  // when the group is gone (it left it).
  void signal(size_t i, int sig) const {
    if (::kill(-pids[i], sig) != 0 && errno == ESRCH) ::kill(pids[i], sig);
  }
  void signal_live(int sig) const {
    for (size_t i = 0; i < pids.size(); ++i)
      if (pids[i] > 0) signal(i, sig);
  }
  size_t live_count() const {
    return static_cast<size_t>(std::count_if(pids.begin(), pids.end(), [](pid_t p) { return p > 0; }));
  }
  ~Group() {
    signal_live(SIGKILL);
    for (size_t i = 0; i < pids.size(); ++i)
      if (pids[i] > 0) {
        int st = 0;
        while (::waitpid(pids[i], &st, 0) < 0 && errno == EINTR) continue;
      }
  }
};

}  // namespace

int run_workers(const std::vector<WorkerSpec>& workers, const char* rendezvous_env) {
  if (workers.empty()) return 0;
  // The group is declared after the handlers, so on the way out the workers are reaped first,
  // while our SIGCHLD handler (not a possibly inherited SIG_IGN, which would auto-reap them) is
  // still in place; the rendezvous folder goes after them, before the handlers.
  SignalScope signals;
  struct RendezvousScope {
    std::string dir;
    ~RendezvousScope() {
      if (!dir.empty()) remove_rendezvous_dir(dir);
    }
  } rendezvous;
  std::vector<WorkerSpec> specs = workers;  // outlive `prepared`, which points into their argv
  if (rendezvous_env) {
    rendezvous.dir = make_rendezvous_dir();
    for (WorkerSpec& w : specs) w.env.emplace_back(rendezvous_env, rendezvous.dir);
  }
  std::vector<Prepared> prepared;
  for (const WorkerSpec& w : specs) prepared.push_back(prepare(w));
  Group group;
  const pid_t launcher = ::getpid();
  for (size_t i = 0; i < workers.size(); ++i) {
    const pid_t pid = ::fork();
    if (pid < 0)
      throw InternalError(detail::concat("run_workers: fork for ", workers[i].label, " failed: ", errno_text()));
    if (pid == 0) run_child(prepared[i], launcher, signals.old);
    group.pids.push_back(pid);
    // Also here, so the group exists before we might signal it. EACCES: the child has already
    // exec'd, which it does only after its own setpgid.
    if (::setpgid(pid, pid) != 0 && errno != EACCES && errno != ESRCH)
      throw InternalError(detail::concat("run_workers: setpgid for ", workers[i].label, " failed: ", errno_text()));
  }

  int result = 0;
  bool failed = false, forwarded = false, killed = false, ended = false;
  std::chrono::steady_clock::time_point end_at;  // after a failure: when the others are killed
  while (group.live_count() > 0) {
    struct pollfd pfd = {signals.pipe_fds[0], POLLIN, 0};
    // The timeout is a backstop only: SIGCHLD and SIGINT/SIGTERM wake the poll through the pipe.
    if (::poll(&pfd, 1, 200) < 0 && errno != EINTR)
      throw InternalError(detail::concat("run_workers: poll failed: ", errno_text()));
    char drain[64];
    while (::read(signals.pipe_fds[0], drain, sizeof drain) > 0) continue;

    const int count = g_signal_count.load();
    if (count >= 1 && !forwarded) {
      forwarded = true;
      const int sig = g_first_signal.load();
      const std::string name = signal_name(sig);
      std::fprintf(stderr, "fittrain: %s: asking the %zu running workers to stop after their current step "
                   "(%s again kills them)\n", name.c_str(), group.live_count(), name.c_str());
      group.signal_live(sig == SIGHUP ? SIGTERM : sig);  // the workers' stop handlers take INT and TERM
    }
    if (count >= 2 && !killed) {
      killed = true;
      std::fprintf(stderr, "fittrain: second interrupt: killing the %zu running workers\n", group.live_count());
      group.signal_live(SIGKILL);
    }

    for (size_t i = 0; i < group.pids.size(); ++i) {
      const pid_t pid = group.pids[i];
      if (pid <= 0) continue;
      int st = 0;
      pid_t r;
      while ((r = ::waitpid(pid, &st, WNOHANG)) < 0 && errno == EINTR) continue;
      if (r == 0) continue;
      if (r < 0)  // ECHILD: something else in this process reaped our worker
        throw InternalError(detail::concat("run_workers: waitpid for ", workers[i].label, " (pid ", pid,
                                           ") failed: ", errno_text()));
      group.pids[i] = -1;
      // After the first failure the others are ours to end: only that one is reported.
      if ((WIFEXITED(st) && WEXITSTATUS(st) == 0) || failed) continue;
      if (WIFEXITED(st) && WEXITSTATUS(st) == kExitStopped) {
        result = kExitStopped;  // stopped cleanly: so do the others, after the same step
        continue;
      }
      failed = true;
      result = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      std::string msg = detail::concat("fittrain: ", workers[i].label, " (pid ", pid, ") ",
                                       WIFEXITED(st) ? detail::concat("exited with code ", result)
                                                     : "killed by signal " + signal_name(WTERMSIG(st)));
      if (const size_t others = group.live_count())
        msg += detail::concat("; ending the ", others, " other running worker", others > 1 ? "s" : "",
                              " (killed unless they exit within ", kFailureGraceSeconds, " s)");
      std::fprintf(stderr, "%s\n", msg.c_str());
      end_at = std::chrono::steady_clock::now() +
               std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                   std::chrono::duration<double>(kFailureGraceSeconds));
    }
    if (failed && !ended && std::chrono::steady_clock::now() >= end_at) {
      ended = true;
      group.signal_live(SIGKILL);
    }
  }
  return result;
}

// ---- worker side ---------------------------------------------------------------------------

namespace {

// A set variable as a non-negative decimal int (no sign, no blanks), UserError otherwise.
int env_count(const char* name) {
  const char* v = std::getenv(name);
  FT_USER_CHECK(v, name, " is not set, but other FITTRAIN_ launch variables are (a worker started by fittrain has "
                "all of them)");
  const std::string s = v;
  FT_USER_CHECK(!s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string::npos, name, "='", s,
                "' is not a non-negative integer");
  return std::atoi(v);
}

}  // namespace

std::optional<LaunchedRank> launched_rank_from_env() {
  const char* all[] = {kEnvRank, kEnvWorldSize, kEnvLocalRank, kEnvDevice, kEnvRendezvous};
  if (std::none_of(std::begin(all), std::end(all), [](const char* n) { return std::getenv(n) != nullptr; }))
    return std::nullopt;
  LaunchedRank r;
  r.world = env_count(kEnvWorldSize);
  FT_USER_CHECK(r.world >= 1, kEnvWorldSize, "=", r.world, " must be at least 1");
  r.rank = env_count(kEnvRank);
  FT_USER_CHECK(r.rank < r.world, kEnvRank, "=", r.rank, " must be below ", kEnvWorldSize, "=", r.world);
  r.local_rank = env_count(kEnvLocalRank);
  FT_USER_CHECK(r.local_rank < r.world, kEnvLocalRank, "=", r.local_rank, " must be below ", kEnvWorldSize, "=",
                r.world);
  r.device = env_count(kEnvDevice);
  const char* rdzv = std::getenv(kEnvRendezvous);
  r.rendezvous = rdzv ? rdzv : "";
  FT_USER_CHECK(r.world == 1 || !r.rendezvous.empty(), kEnvRendezvous, " must name the rendezvous folder when ",
                kEnvWorldSize, "=", r.world);
  return r;
}

// ---- rendezvous folder ---------------------------------------------------------------------

std::string make_rendezvous_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = (tmp && *tmp ? std::string(tmp) : std::string("/tmp")) + "/" + kRendezvousPrefix + "XXXXXX";
  // mkdtemp creates it with mode 0700: only this user's processes can publish into it.
  FT_USER_CHECK(::mkdtemp(templ.data()) != nullptr, "cannot create the rendezvous folder ", templ, ": ", errno_text(),
                " (set TMPDIR to a writable folder)");
  return templ;
}

void remove_rendezvous_dir(const std::string& dir) {
  try {
    // remove_all on a wrong path would be destructive: only a folder make_rendezvous_dir made.
    const std::string base = std::filesystem::path(dir).filename().string();
    if (base.rfind(kRendezvousPrefix, 0) != 0) {
      std::fprintf(stderr, "fittrain: not removing '%s': not a rendezvous folder\n", dir.c_str());
      return;
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (ec) std::fprintf(stderr, "fittrain: cannot remove %s: %s\n", dir.c_str(), ec.message().c_str());
  } catch (...) {
    // No throw: this runs on the launcher's way out, often while another error propagates.
  }
}

void publish(const std::string& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  // A leading '.' is kept for the temp files, so a waiter never matches one.
  FT_CHECK(!name.empty() && name[0] != '.' && name.find('/') == std::string::npos, "publish: bad name '", name, "'");
  const std::string path = dir + "/" + name, tmp = dir + "/." + name + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  FT_USER_CHECK(fd >= 0, "cannot create ", tmp, " (rendezvous): ", errno_text());
  std::string err;
  for (size_t done = 0; done < bytes.size() && err.empty();) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w > 0) done += static_cast<size_t>(w);
    else if (w < 0 && errno != EINTR) err = "write: " + errno_text();
  }
  if (err.empty() && ::fsync(fd) != 0) err = "fsync: " + errno_text();
  if (::close(fd) != 0 && err.empty()) err = "close: " + errno_text();
  // rename is atomic: a reader sees no file or the whole file.
  if (err.empty() && ::rename(tmp.c_str(), path.c_str()) != 0) err = "rename to " + path + ": " + errno_text();
  if (!err.empty()) {
    ::unlink(tmp.c_str());
    throw UserError(detail::concat("cannot publish ", path, " (rendezvous): ", err));
  }
}

std::vector<uint8_t> wait_for(const std::string& dir, const std::string& name, double timeout_s,
                              size_t bytes_expected) {
  const std::string path = dir + "/" + name;
  const pid_t launcher = ::getppid();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      std::vector<uint8_t> out;
      uint8_t buf[4096];
      ssize_t n;
      while ((n = ::read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
        out.insert(out.end(), buf, buf + std::max<ssize_t>(n, 0));
      const int e = errno;
      ::close(fd);  // read-only: nothing a failed close could lose
      FT_USER_CHECK(n == 0, "cannot read ", path, " (rendezvous): ", errno_text(e));
      FT_USER_CHECK(out.size() == bytes_expected, path, " (rendezvous) has ", out.size(), " bytes, expected ",
                    bytes_expected);
      return out;
    }
    FT_USER_CHECK(errno == ENOENT, "cannot open ", path, " (rendezvous): ", errno_text());
    // The launcher gone means rank 0 is gone too (it dies with the launcher): stop waiting.
    FT_USER_CHECK(::getppid() == launcher, "the launcher (pid ", launcher, ") exited while this worker waited for ",
                  path);
    FT_USER_CHECK(std::chrono::steady_clock::now() < deadline, "timed out after ", timeout_s, " s waiting for ", path,
                  " (rank 0 publishes it when it starts; did it fail?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::vector<uint8_t> share_from_rank0(const std::string& dir, int rank, int generation, double timeout_s,
                                      size_t bytes, const std::function<std::vector<uint8_t>()>& make) {
  const std::string name = generation == 0 ? "nccl_id" : "nccl_id." + std::to_string(generation);
  if (rank != 0) return wait_for(dir, name, timeout_s, bytes);
  std::vector<uint8_t> token = make();
  FT_CHECK(token.size() == bytes, "a rendezvous token of ", token.size(), " bytes, expected ", bytes);
  publish(dir, name, token);
  return token;
}

}  // namespace ft
