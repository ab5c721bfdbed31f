// Peak resident set size from getrusage; the sleep of a test hook.
#include "core/process.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

namespace loom {

uint64_t peak_rss_bytes() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return uint64_t(ru.ru_maxrss) * 1024;
}

TestDelay::TestDelay(const char* env_var) {
  if (const char* v = std::getenv(env_var)) ms_ = std::max(0, std::atoi(v));
}

void TestDelay::operator()() const {
  if (ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
}

}  // namespace loom
