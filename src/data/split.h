// Megatron's train/valid/test split of a dataset's documents ("969,30,1").
#pragma once
#include <array>
#include <cstdint>
#include <string>

namespace loom {

// Parses "a,b,c" (or "a/b/c"; missing parts are 0) into weights normalized to sum 1. Throws
// UserError naming `key` (e.g. "data.split") for a non-number, a negative part, more than three
// parts or an all-zero split.
std::array<double, 3> parse_split(const std::string& text, const std::string& key);

// Megatron's _get_split_indices: bounds b[0..3] with b[0] = 0, b[3] = n and part p holding the
// documents [b[p], b[p+1]). Each b[p+1] = b[p] + round(w_p * n) (round half to even, as Python),
// then every bound after the first is shifted by the total's excess over n.
std::array<int64_t, 4> split_bounds(const std::array<double, 3>& weights, int64_t n);

}  // namespace loom
