// Wall-clock timers: Stopwatch for one interval, Timers for named accumulated intervals.
#pragma once
#include <chrono>
#include <map>
#include <string>

namespace loom {

class Stopwatch {
 public:
  Stopwatch() : t0_(std::chrono::steady_clock::now()) {}
  void reset() { t0_ = std::chrono::steady_clock::now(); }
  double ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  std::chrono::steady_clock::time_point t0_;
};

// Named totals in milliseconds; a disabled Timers does nothing at all.
class Timers {
 public:
  explicit Timers(bool enabled = true) : enabled_(enabled) {}
  bool enabled() const { return enabled_; }
  void add(const std::string& name, double ms) {
    if (enabled_) totals_[name] += ms;
  }
  const std::map<std::string, double>& totals() const { return totals_; }
  void clear() { totals_.clear(); }

 private:
  bool enabled_;
  std::map<std::string, double> totals_;
};

}  // namespace loom
