// bias_residual cpu twin against a double reference (error bound) and its exact fp32 sum order.
#include <cmath>
#include <limits>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/bias_residual.h"

using namespace loom::ktest;

namespace {

struct Shape {
  int N, C;
};
// An odd width (no vector tail alignment) and a wide one.
const Shape kShapes[] = {{37, 129}, {300, 256}};

TEST(KernelBiasResidual, MatchesDoubleReferenceWithinTwoRoundings) {
  for (const Shape& s : kShapes) {
    const size_t n = size_t(s.N) * s.C;
    auto r = randu(n, 1, -4.0f, 4.0f), p = randu(n, 2), b = randu(s.C, 3);
    std::vector<float> out(n, std::numeric_limits<float>::quiet_NaN());
    loom::cpu::bias_residual(out.data(), r.data(), p.data(), b.data(), s.N, s.C);
    // Two fp32 additions: |error| <= 2 u (|r| + |p| + |b|) (1 + u), u = 2^-24; 2^-22 has margin.
    std::vector<double> want(n), atol(n);
    for (size_t i = 0; i < n; i++) {
      const double bc = b[i % s.C];
      want[i] = (double)r[i] + (double)p[i] + bc;
      atol[i] = std::ldexp(std::fabs(r[i]) + std::fabs(p[i]) + std::fabs(bc), -22);
    }
    expect_close(out.data(), want.data(), n, 0.0, 0.0, "bias_residual", atol.data());
  }
}

TEST(KernelBiasResidual, SumOrderIsResidPlusBiasedPartialAndAliasingWorks) {
  const Shape s = kShapes[0];
  const size_t n = size_t(s.N) * s.C;
  auto r = randu(n, 4, -100.0f, 100.0f), p = randu(n, 5, -1e-3f, 1e-3f), b = randu(s.C, 6);
  std::vector<float> want(n), out(n);
  for (size_t i = 0; i < n; i++) {
    const float biased = p[i] + b[i % s.C];  // the contract: (partial + bias) first
    want[i] = r[i] + biased;
  }
  loom::cpu::bias_residual(out.data(), r.data(), p.data(), b.data(), s.N, s.C);
  EXPECT_TRUE(bitwise_equal(out, want));
  auto in_place = r;  // out aliasing resid
  loom::cpu::bias_residual(in_place.data(), in_place.data(), p.data(), b.data(), s.N, s.C);
  EXPECT_TRUE(bitwise_equal(in_place, want));
  auto in_partial = p;  // out aliasing partial
  loom::cpu::bias_residual(in_partial.data(), r.data(), in_partial.data(), b.data(), s.N, s.C);
  EXPECT_TRUE(bitwise_equal(in_partial, want));
}

}  // namespace
