// Split string parsing and Megatron's document split bounds (see split.h).
#include "data/split.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "core/check.h"

namespace loom {

std::array<double, 3> parse_split(const std::string& text, const std::string& key) {
  const std::string fix = " (expected up to three non-negative numbers such as \"969,30,1\")";
  std::vector<double> parts;
  size_t start = 0;
  while (true) {
    size_t end = text.find_first_of(",/", start);
    std::string piece = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    size_t a = piece.find_first_not_of(" \t"), b = piece.find_last_not_of(" \t");
    piece = a == std::string::npos ? "" : piece.substr(a, b - a + 1);
    char* stop = nullptr;
    double v = std::strtod(piece.c_str(), &stop);
    LOOM_USER_CHECK(!piece.empty() && stop && *stop == '\0' && std::isfinite(v), key, ": \"", text,
                    "\": \"", piece, "\" is not a number", fix);
    LOOM_USER_CHECK(v >= 0, key, ": \"", text, "\": part ", v, " is negative", fix);
    parts.push_back(v);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  LOOM_USER_CHECK(parts.size() <= 3, key, ": \"", text, "\" has ", parts.size(), " parts", fix);
  double sum = 0;
  for (double v : parts) sum += v;
  LOOM_USER_CHECK(sum > 0, key, ": \"", text, "\" sums to 0", fix);
  std::array<double, 3> w{0, 0, 0};
  for (size_t i = 0; i < parts.size(); ++i) w[i] = parts[i] / sum;
  return w;
}

std::array<int64_t, 4> split_bounds(const std::array<double, 3>& weights, int64_t n) {
  std::array<int64_t, 4> b{0, 0, 0, 0};
  for (int p = 0; p < 3; ++p) b[p + 1] = b[p] + int64_t(std::nearbyint(weights[p] * double(n)));
  const int64_t excess = b[3] - n;
  for (int p = 1; p < 4; ++p) b[p] -= excess;
  // Megatron stops here; a zero-weight first part with two halves rounding up (n = 3, "0,1,1")
  // would give b[1] = -1, so keep the bounds ordered and inside [0, n].
  for (int p = 1; p < 4; ++p) b[p] = std::min(std::max(b[p], b[p - 1]), n);
  return b;
}

}  // namespace loom
