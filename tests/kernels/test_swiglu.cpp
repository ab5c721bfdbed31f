// swiglu cpu twin: forward vs double reference, backward vs central differences, layout.
#include <limits>

#include "kernel_test_util.h"
#include "kernels/swiglu.h"

using namespace loom::ktest;

namespace swiglu_test {

// out (N, F) = silu(gate) * up, gu (N, 2F) = [gate | up] per row, in double.
void ref_swiglu(std::vector<double>& out, const std::vector<double>& gu, int N, int F) {
  out.assign((size_t)N * F, 0.0);
  for (int n = 0; n < N; n++)
    for (int f = 0; f < F; f++) {
      const double g = gu[(size_t)n * 2 * F + f], u = gu[(size_t)n * 2 * F + F + f];
      out[(size_t)n * F + f] = g / (1.0 + std::exp(-g)) * u;
    }
}

constexpr int N = 4, F = 7;

// exp_clamped is within 2 ulp of exp; each output is a handful of fp32 operations (< 8 u total
// relative, u = 2^-24), inside kFwdRtol = 1e-5 with a wide margin.
TEST(KernelSwiglu, ForwardMatchesReference) {
  auto gu = randu((size_t)N * 2 * F, 1, -6.0f, 6.0f);
  std::vector<float> out((size_t)N * F, std::numeric_limits<float>::quiet_NaN());
  loom::cpu::swiglu_forward(out.data(), gu.data(), N, F);
  std::vector<double> o;
  ref_swiglu(o, to_double(gu), N, F);
  expect_close(out, o, kFwdRtol, kFwdAtol, "out");
}

TEST(KernelSwiglu, BackwardMatchesFiniteDifferences) {
  auto gu = randu((size_t)N * 2 * F, 2, -6.0f, 6.0f), R = randu((size_t)N * F, 3);
  std::vector<float> dgu((size_t)N * 2 * F, std::numeric_limits<float>::quiet_NaN());
  loom::cpu::swiglu_backward(dgu.data(), R.data(), gu.data(), N, F);
  auto gud = to_double(gu), Rd = to_double(R);
  std::vector<double> o;
  auto L = [&]() {
    ref_swiglu(o, gud, N, F);
    return dot(o, Rd);
  };
  // Elementwise: a few fp32 operations per entry; error model of kernel_test_util.h.
  expect_close(dgu, fd_grad(gud, L), kGradRtol, kGradAtol, "dgu");
}

// Saturated gates: silu(-100) = 0 (not NaN), silu(100) = 100, and the gradient stays finite.
TEST(KernelSwiglu, SaturatedGatesStayFinite) {
  std::vector<float> gu = {-100.0f, 100.0f, 2.0f, 3.0f}, out(2), dgu(4);
  std::vector<float> g = {1.0f, 1.0f};
  loom::cpu::swiglu_forward(out.data(), gu.data(), 1, 2);
  EXPECT_NEAR(out[0], 0.0f, 1e-30f);
  EXPECT_FLOAT_EQ(out[1], 300.0f);
  loom::cpu::swiglu_backward(dgu.data(), g.data(), gu.data(), 1, 2);
  for (float v : dgu) EXPECT_TRUE(std::isfinite(v));
  EXPECT_FLOAT_EQ(dgu[1], 3.0f);    // d gate at g = 100: up * silu'(100) = 3 * 1
  EXPECT_FLOAT_EQ(dgu[3], 100.0f);  // d up = silu(100)
}

}  // namespace swiglu_test
