// Readings of this process that are not loom's own counters, and the sleep of a test hook.
#pragma once
#include <cstdint>

namespace loom {

// Peak resident set size of this process in bytes (getrusage).
uint64_t peak_rss_bytes();

// A test hook that slows a loop: the milliseconds the environment variable env_var gives (read
// once, at construction; unset or not positive: none), slept at each call. Tests use it to
// stop, signal or hang up on a run that is surely still going, on a machine of any speed.
class TestDelay {
 public:
  explicit TestDelay(const char* env_var);
  void operator()() const;

 private:
  int ms_ = 0;
};

}  // namespace loom
