// The watchdog thread: polls the blocked-since timestamp of the main thread's current call.
#include "parallel/watchdog.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/check.h"
#include "core/log.h"

namespace loom {

namespace {
using Clock = std::chrono::steady_clock;
std::atomic<const std::string*> g_what{nullptr};
std::atomic<int64_t> g_since_ms{0};
std::atomic<bool> g_started{false};

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
      .count();
}

void watch(double timeout_s) {
  const int64_t limit = int64_t(timeout_s * 1000);
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(200, limit / 4 + 1)));
    const std::string* what = g_what.load();
    if (what == nullptr) continue;
    int64_t waited = now_ms() - g_since_ms.load();
    if (waited < limit || g_what.load() != what) continue;
    std::string line = str(log_prefix(), "error: communication watchdog: ", *what, " has waited ",
                           waited / 1000.0, " s (parallel.comm_timeout = ", timeout_s,
                           " s); a peer rank is stuck or dead. Aborting the job.\n");
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
    std::_Exit(3);  // no MPI call from this thread: mpirun/srun see the exit and end the job
  }
}
}  // namespace

void start_comm_watchdog(double timeout_s) {
  if (timeout_s <= 0 || g_started.exchange(true)) return;
  std::thread(watch, timeout_s).detach();  // ends with the process
}

void watchdog_enter(const std::string* what) {
  g_since_ms.store(now_ms());
  g_what.store(what);
}

void watchdog_leave() { g_what.store(nullptr); }

}  // namespace loom
