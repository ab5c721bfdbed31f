// Edit distance and "did you mean" suggestions for unknown config keys and enum values.
#pragma once
#include <string>
#include <vector>

namespace loom {

// Optimal-string-alignment distance (Levenshtein plus adjacent transpositions), case-insensitive.
int edit_distance(const std::string& a, const std::string& b);

// The candidate closest to `word` when it is close enough to be a likely typo, else "".
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

// "a, b, c"
std::string join(const std::vector<std::string>& items, const std::string& sep = ", ");

}  // namespace loom
