// rope cpu twin: tables vs double, rotate-half forward vs reference, backward vs differences.
#include "kernel_test_util.h"
#include "kernels/rope.h"

using namespace loom::ktest;

namespace rope_test {

constexpr float kTheta = 10000.0f;

// qkv (B, T, (NH + 2 NKV) D) rotated in double: q and k heads, rotate-half pairing.
void ref_rope(std::vector<double>& x, int B, int T, int NH, int NKV, int D) {
  const int half = D / 2, row = (NH + 2 * NKV) * D;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int h = 0; h < NH + NKV; h++) {
        double* v = x.data() + ((size_t)b * T + t) * row + (size_t)h * D;
        for (int i = 0; i < half; i++) {
          const double a = t * std::pow((double)kTheta, -2.0 * i / D);
          const double x1 = v[i], x2 = v[i + half];
          v[i] = x1 * std::cos(a) - x2 * std::sin(a);
          v[i + half] = x2 * std::cos(a) + x1 * std::sin(a);
        }
      }
}

struct Shape {
  int B, T, NH, NKV, D;
};
const Shape kShapes[] = {{2, 5, 4, 2, 8}, {1, 7, 3, 1, 6}, {2, 3, 2, 2, 4}};

// Each table entry is the double cos/sin rounded once to fp32: within u = 2^-24 relative of the
// double value, plus 1e-7 absolute near zero crossings.
TEST(KernelRope, TablesAreRoundedDoubleAngles) {
  const int T = 300, D = 64;
  std::vector<float> c((size_t)T * D / 2), s((size_t)T * D / 2);
  loom::cpu::rope_table(c.data(), s.data(), T, D, kTheta);
  for (int t = 0; t < T; t++)
    for (int i = 0; i < D / 2; i++) {
      const double a = t * std::pow((double)kTheta, -2.0 * i / D);
      EXPECT_NEAR(c[(size_t)t * D / 2 + i], std::cos(a), 6e-8 * std::fabs(std::cos(a)) + 1e-12);
      EXPECT_NEAR(s[(size_t)t * D / 2 + i], std::sin(a), 6e-8 * std::fabs(std::sin(a)) + 1e-12);
    }
}

// Each rotated value is x1 c - x2 s: two products and a sum of fp32 values (plus the tables'
// rounding): a few u relative to |x1| + |x2|, inside kFwdRtol/kFwdAtol. v must stay bitwise.
TEST(KernelRope, ForwardMatchesReferenceAndLeavesV) {
  for (const Shape& s : kShapes) {
    const int row = (s.NH + 2 * s.NKV) * s.D;
    auto x = randu((size_t)s.B * s.T * row, 1 + s.D, -2.0f, 2.0f);
    std::vector<float> c((size_t)s.T * s.D / 2), sn((size_t)s.T * s.D / 2);
    loom::cpu::rope_table(c.data(), sn.data(), s.T, s.D, kTheta);
    auto y = x;
    loom::cpu::rope_forward(y.data(), c.data(), sn.data(), s.B, s.T, s.NH, s.NKV, s.D);
    auto want = to_double(x);
    ref_rope(want, s.B, s.T, s.NH, s.NKV, s.D);
    expect_close(y, want, kFwdRtol, kFwdAtol, "rope out");
    size_t v_changed = 0;
    for (size_t r = 0; r < (size_t)s.B * s.T; r++)
      for (int j = (s.NH + s.NKV) * s.D; j < row; j++)
        v_changed += y[r * row + j] != x[r * row + j];
    EXPECT_EQ(v_changed, 0u);
  }
}

// L = sum(R * rope(x)); the backward rotates R by the inverse rotation.
TEST(KernelRope, BackwardMatchesFiniteDifferences) {
  for (const Shape& s : kShapes) {
    const int row = (s.NH + 2 * s.NKV) * s.D;
    const size_t n = (size_t)s.B * s.T * row;
    auto x = randu(n, 30 + s.D, -2.0f, 2.0f), R = randu(n, 40 + s.D);
    std::vector<float> c((size_t)s.T * s.D / 2), sn((size_t)s.T * s.D / 2);
    loom::cpu::rope_table(c.data(), sn.data(), s.T, s.D, kTheta);
    auto g = R;
    loom::cpu::rope_backward(g.data(), c.data(), sn.data(), s.B, s.T, s.NH, s.NKV, s.D);
    auto xd = to_double(x), Rd = to_double(R);
    auto L = [&]() {
      auto y = xd;
      ref_rope(y, s.B, s.T, s.NH, s.NKV, s.D);
      return dot(y, Rd);
    };
    expect_close(g, fd_grad(xd, L), kGradRtol, kGradAtol, "rope dqkv");
  }
}

}  // namespace rope_test
