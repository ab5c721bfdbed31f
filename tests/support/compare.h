// Comparisons shared by the tests: bitwise equality of float arrays, the worst of many differences.
#pragma once
#include <cmath>
#include <cstring>
#include <vector>

namespace loom::test {

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Whether difference d replaces worst, the largest seen so far: when it is larger or NaN, and
// never once worst is NaN (a NaN anywhere is the result, whatever follows it).
inline bool worse(double d, double worst) { return !std::isnan(worst) && !(d <= worst); }

}  // namespace loom::test
