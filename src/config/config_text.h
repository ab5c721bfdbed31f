// Scalar text of configs: strict integer and number parsing (shared by the YAML reader and
// writer) and to_yaml's string quoting.
#pragma once
#include <string>

namespace loom {

// The whole of s is a decimal integer that fits in a long long.
bool parse_integer(const std::string& s, long long& out);
// The whole of s is a finite number (no leading space).
bool parse_number(const std::string& s, double& out);

}  // namespace loom
