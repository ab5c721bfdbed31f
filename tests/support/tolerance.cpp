// Canonical-tensor comparisons of the tolerance classes (bounds and error models: tolerance.h).
#include "tests/support/tolerance.h"

#include <cmath>

namespace loom::test {

bool structurally_zero_gradient(const std::string& name, size_t i, int d_model) {
  return name.find("c_attn.bias") != std::string::npos && i >= size_t(d_model) &&
         i < size_t(2 * d_model);
}

namespace {
// Calls f(tensor name, got values, ref values) for every tensor; a missing tensor or a size
// mismatch is reported as an infinite difference.
template <typename F>
WorstTensor worst_of(const std::map<std::string, CanonicalTensor>& got,
                     const std::map<std::string, CanonicalTensor>& ref, F per_tensor) {
  WorstTensor w;
  if (got.size() != ref.size()) return {INFINITY, "tensor count differs"};
  for (const auto& [name, r] : ref) {
    auto it = got.find(name);
    if (it == got.end() || it->second.data.size() != r.data.size()) return {INFINITY, name};
    const double v = per_tensor(name, it->second.data, r.data);
    if (worse(v, w.value)) w = {v, name};
  }
  return w;
}
}  // namespace

WorstTensor worst_relative(const std::map<std::string, CanonicalTensor>& got,
                           const std::map<std::string, CanonicalTensor>& ref, int d_model) {
  return worst_of(
      got, ref,
      [&](const std::string& name, const std::vector<float>& a, const std::vector<float>& b) {
        double num = 0, den = 0;
        for (size_t i = 0; i < b.size(); ++i) {
          if (structurally_zero_gradient(name, i, d_model)) continue;
          const double d = double(a[i]) - double(b[i]);
          num += d * d;
          den += double(b[i]) * double(b[i]);
        }
        return std::sqrt(num / (den > 0 ? den : 1));
      });
}

WorstTensor worst_in_steps(const std::map<std::string, CanonicalTensor>& got,
                           const std::map<std::string, CanonicalTensor>& ref, int d_model,
                           double steps_lr) {
  return worst_of(
      got, ref,
      [&](const std::string& name, const std::vector<float>& a, const std::vector<float>& b) {
        return max_abs_diff(name, a.data(), b.data(), b.size(), d_model) / steps_lr;
      });
}

}  // namespace loom::test
