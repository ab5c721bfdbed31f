// Async-signal-safe stop flag for SIGTERM / SIGUSR1.
#include "train/signals.h"

#include <csignal>

namespace loom {

namespace {
volatile std::sig_atomic_t g_signal = 0;
extern "C" void on_stop_signal(int sig) { g_signal = sig; }
}  // namespace

void install_stop_signals() {
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGUSR1, on_stop_signal);
}

int stop_signal() { return int(g_signal); }

}  // namespace loom
