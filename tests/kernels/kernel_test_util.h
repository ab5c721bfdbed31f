// Shared helpers for the kernel tests: seeded random data, central differences, tolerance checks.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tests/support/compare.h"
#include "tests/support/random.h"

namespace loom::ktest {

using loom::test::bitwise_equal;
using loom::test::randu;

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
  return s;
}

// Central differences of the double objective f() w.r.t. every element of x (perturbed in place
// and restored). With h = 1e-4 in double the truncation error is O(h^2) ~ 1e-9 relative and the
// rounding error ~ 1e-16 / h ~ 1e-12: far below the fp32 tolerances the results are held to.
inline std::vector<double> fd_grad(std::vector<double>& x, const std::function<double()>& f,
                                   double h = 1e-4) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f();
    x[i] = x0 - h;
    const double fm = f();
    x[i] = x0;
    g[i] = (fp - fm) / (2.0 * h);
  }
  return g;
}

// Elementwise |got - want| <= rtol * |want| + atol_frac * max|want|. The absolute floor, relative
// to the largest expected value, covers entries that are sums with heavy cancellation, whose fp32
// error scales with the magnitude of the terms rather than with the (small) result.
// atol_each (n), when given, replaces the shared floor with one absolute floor per element.
inline bool expect_close(const float* got, const double* want, size_t n, double rtol,
                         double atol_frac, const std::string& what,
                         const double* atol_each = nullptr) {
  double maxw = 0.0;
  for (size_t i = 0; i < n; i++) maxw = std::max(maxw, std::fabs(want[i]));
  const double atol = atol_frac * maxw;
  size_t bad = 0, worst = 0;
  double worst_excess = -1.0;
  for (size_t i = 0; i < n; i++) {
    const double err = std::fabs((double)got[i] - want[i]);
    const double tol = rtol * std::fabs(want[i]) + (atol_each ? atol_each[i] : atol);
    if (!(err <= tol)) {  // NaN fails too
      bad++;
      const double excess = std::isnan(err) ? 1e300 : err / (tol > 0 ? tol : 1e-300);
      if (excess > worst_excess) worst_excess = excess, worst = i;
    }
  }
  if (bad) {
    ADD_FAILURE() << what << ": " << bad << "/" << n << " elements out of tolerance (rtol " << rtol
                  << ", atol " << (atol_each ? atol_each[worst] : atol) << "); worst at " << worst
                  << ": got " << got[worst] << ", want " << want[worst];
  }
  return bad == 0;
}

inline bool expect_close(const std::vector<float>& got, const std::vector<double>& want,
                         double rtol, double atol_frac, const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  return expect_close(got.data(), want.data(), std::min(got.size(), want.size()), rtol, atol_frac,
                      what);
}

// Tolerances shared by the kernel tests: fp32 results against a double reference forward and
// double central differences (good to ~1e-9, so the only error source is the kernel's fp32
// rounding). Error model: each result is a chain of fp32 sums; a sum of n terms in any order
// (so on any BLAS kernel family or SIMD width) is off by at most n*u of the sum of its terms'
// magnitudes, and by about sqrt(n)*u when the roundings have independent signs. The sums here
// have n <= 128 (channels, positions) except the 1000-entry softmax of one classifier test;
// rtol = 2e-5 is the worst case n*u for n = 330 and 8x the independent-sign estimate for
// n = 1000. The floor (a fraction of the largest entry) covers entries that are sums with heavy
// cancellation, whose error scales with the terms rather than the (small) result. A formula
// error (a missing term, a wrong scale, a wrong mask) is off by orders of magnitude more.
constexpr double kGradRtol = 2e-5;
constexpr double kGradAtol = 2e-6;
// fp32 forward against the double reference forward on identical inputs: one level of sums
// (n <= 128: 7.6e-6 worst case).
constexpr double kFwdRtol = 1e-5;
constexpr double kFwdAtol = 1e-6;

}  // namespace loom::ktest
