#include "train/stop_signal.h"

#include <atomic>
#include <csignal>

namespace ft {
namespace {

std::atomic<int> g_stop_signal{0};

void on_signal(int sig) {
  g_stop_signal = sig;
  std::signal(sig, SIG_DFL);  // a second signal stops at once
}

void on_signal_in_worker(int sig) { g_stop_signal = sig; }

}  // namespace

void install_stop_handlers(bool ranked) {
  g_stop_signal = 0;
  std::signal(SIGINT, ranked ? on_signal_in_worker : on_signal);
  std::signal(SIGTERM, ranked ? on_signal_in_worker : on_signal);
}

int stop_signal() { return g_stop_signal.load(); }

}  // namespace ft
