// Comparisons shared by the tests: bitwise equality of float arrays.
#pragma once
#include <cstring>
#include <vector>

namespace loom::test {

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace loom::test
