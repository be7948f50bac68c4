#include "train/stop_signal.h"

#include <atomic>
#include <csignal>
#include <initializer_list>

namespace ft {
namespace {

std::atomic<int> g_stop_signal{0};

// The first signal is the one reported; later ones do not overwrite it.
void record(int sig) {
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, sig);
}

void on_signal(int sig) {
  record(sig);
  // A second signal of either kind stops at once (Ctrl-C, then kill): signal() is
  // async-signal-safe.
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGHUP, SIG_DFL);
}

void on_signal_in_worker(int sig) { record(sig); }

}  // namespace

void install_stop_handlers(bool ranked) {
  g_stop_signal = 0;
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    // An ignored SIGHUP (nohup) stays ignored: the run was started to outlive its terminal.
    if (sig == SIGHUP) {
      struct sigaction current {};
      if (::sigaction(SIGHUP, nullptr, &current) == 0 && current.sa_handler == SIG_IGN) continue;
    }
    std::signal(sig, ranked ? on_signal_in_worker : on_signal);
  }
}

int stop_signal() { return g_stop_signal.load(); }

}  // namespace ft
