// Seeded random test inputs: uniform floats and uniform integer ids, from std::mt19937.
#pragma once
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace loom::test {

// n floats uniform in [lo, hi).
inline std::vector<float> randu(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// n integers uniform in [0, hi): token ids, targets.
inline std::vector<int32_t> randi(size_t n, int hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> d(0, hi - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

}  // namespace loom::test
