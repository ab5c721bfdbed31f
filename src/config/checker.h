// The line collector of validate() and the wording helpers its checks share.
#pragma once
#include <string>
#include <vector>

#include "config/config.h"
#include "config/did_you_mean.h"
#include "config/fields.h"
#include "core/check.h"

namespace loom::validation {

inline std::string quoted(const std::string& s) { return "'" + s + "'"; }

inline std::string list_text(const std::vector<int>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

// "8 or 12" (or just "12" when the lower multiple is 0): the multiples of `unit` around `v`.
inline std::string nearest_multiples(long long v, long long unit) {
  const long long lo = v / unit * unit, hi = lo + unit;
  return lo > 0 ? str(lo, " or ", hi) : str(hi);
}

class Checker {
 public:
  std::vector<std::string> out;

  void add(const std::string& msg) { out.push_back(msg); }

  // key: v must be >= lo; fix
  void at_least(const std::string& key, long long v, long long lo, const std::string& fix) {
    if (v < lo) add(str(key, ": ", v, " must be >= ", lo, "; ", fix));
  }

  void positive(const std::string& key, double v, const std::string& fix) {
    if (!(v > 0)) add(str(key, ": ", format_double(v), " must be > 0; ", fix));
  }

  void non_negative(const std::string& key, double v, const std::string& fix) {
    if (!(v >= 0)) add(str(key, ": ", format_double(v), " must be >= 0; ", fix));
  }

  // Returns true when the value is valid.
  bool one_of(const std::string& key, const std::string& v, const std::vector<std::string>& ok) {
    for (const auto& c : ok)
      if (v == c) return true;
    std::string msg = str(key, ": ", quoted(v), " is not valid; choose one of ", join(ok));
    const std::string guess = closest_match(v, ok);
    if (!guess.empty()) msg += " (did you mean " + quoted(guess) + "?)";
    add(msg);
    return false;
  }
};

// model.*: sizes and the family keys (validate_model.cpp).
void check_model(const ModelConfig& m, Checker& c);

// parallel.virtual_stages and parallel.cp (validate_parallel.cpp); dp: the data-parallel size,
// 0 when unknown.
void check_virtual_stages(const Config& cfg, long long dp, Checker& c);
void check_context_parallel(const Config& cfg, Checker& c);
void check_moe_layout(const Config& cfg, long long dp, Checker& c);

}  // namespace loom::validation
