// Counter-based random numbers (Philox4x32-10): value i of stream `key` is a pure function of
// (key, i), so initialization does not depend on how a tensor is sharded over ranks.
#pragma once
#include <array>
#include <cstdint>
#include <string>

namespace loom {

std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter_hi, uint64_t counter_lo);

// 64-bit FNV-1a of a string mixed with a seed: the key of a named stream (e.g. a parameter).
uint64_t stream_key(uint64_t seed, const std::string& name);

// Uniform in (0, 1) and standard normal for element `index` of stream `key`.
float uniform01(uint64_t key, uint64_t index);
float normal01(uint64_t key, uint64_t index);

// A small sequential generator (splitmix64) for shuffles: the same sequence on every platform.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : s_(seed) {}
  uint64_t next();
  uint64_t below(uint64_t n);  // uniform in [0, n), n > 0
  uint64_t state() const { return s_; }

 private:
  uint64_t s_;
};

}  // namespace loom
