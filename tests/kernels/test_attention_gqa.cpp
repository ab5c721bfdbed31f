// grouped-query attention cpu twin: equal to multi-head attention on repeated kv heads, and
// dqkv vs central differences of a double reference.
#include <limits>

#include "kernel_test_util.h"
#include "kernels/attention.h"

using namespace loom::ktest;

namespace attention_gqa_test {

// The multi-head qkv (B, T, 3 NH D) whose kv head h is kv head h / (NH / NKV) of the grouped one.
std::vector<float> repeat_kv(const std::vector<float>& x, int B, int T, int NH, int NKV, int D) {
  const int row = (NH + 2 * NKV) * D, C = NH * D, group = NH / NKV;
  std::vector<float> y((size_t)B * T * 3 * C);
  for (size_t r = 0; r < (size_t)B * T; r++) {
    const float* src = x.data() + r * row;
    float* dst = y.data() + r * 3 * C;
    std::copy(src, src + C, dst);
    for (int h = 0; h < NH; h++)
      for (int d = 0; d < D; d++) {
        dst[C + h * D + d] = src[C + (h / group) * D + d];
        dst[2 * C + h * D + d] = src[C + (NKV + h / group) * D + d];
      }
  }
  return y;
}

// out (B, T, NH D) from the grouped qkv, causal, in double.
void ref_gqa(std::vector<double>& out, const std::vector<double>& x, int B, int T, int NH, int NKV,
             int D) {
  const int row = (NH + 2 * NKV) * D, C = NH * D, group = NH / NKV;
  out.assign((size_t)B * T * C, 0.0);
  std::vector<double> p(T);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const double* q = x.data() + ((size_t)b * T + t) * row + h * D;
        double mx = -INFINITY, sum = 0.0;
        for (int s = 0; s <= t; s++) {
          const double* k = x.data() + ((size_t)b * T + s) * row + C + (h / group) * D;
          double d = 0.0;
          for (int i = 0; i < D; i++) d += q[i] * k[i];
          p[s] = d / std::sqrt((double)D);
          mx = std::max(mx, p[s]);
        }
        for (int s = 0; s <= t; s++) sum += (p[s] = std::exp(p[s] - mx));
        double* o = out.data() + ((size_t)b * T + t) * C + h * D;
        for (int s = 0; s <= t; s++) {
          const double* v = x.data() + ((size_t)b * T + s) * row + C + (NKV + h / group) * D;
          for (int i = 0; i < D; i++) o[i] += p[s] / sum * v[i];
        }
      }
}

struct Shape {
  int B, T, NH, NKV, D;
};

// Forward and dQ: the same BLAS calls on the same values (strides differ only), so the same bits.
// dK, dV: each query head's sum over tiles is the multi-head one; the grouped kernel adds them in
// head order, as done here on the multi-head result.
TEST(KernelAttentionGqa, EqualsMultiHeadOnRepeatedKvHeads) {
  const Shape shapes[] = {{2, 70, 4, 2, 8}, {1, 9, 6, 1, 4}, {2, 5, 3, 3, 4}, {1, 66, 4, 1, 16}};
  for (const Shape& s : shapes) {
    const int C = s.NH * s.D, row = (s.NH + 2 * s.NKV) * s.D, group = s.NH / s.NKV;
    const size_t BT = (size_t)s.B * s.T, TT = (size_t)s.B * s.NH * s.T * s.T;
    auto x = randu(BT * row, 5 + s.T, -1.5f, 1.5f), g = randu(BT * C, 6 + s.T);
    const auto xm = repeat_kv(x, s.B, s.T, s.NH, s.NKV, s.D);
    std::vector<float> o(BT * C), a(TT), om(BT * C), am(TT);
    std::vector<float> scratch(
        loom::cpu::attention_backward_scratch_floats(s.B, s.T, s.NH, s.NKV, s.D));
    loom::cpu::attention_forward_gqa(o.data(), a.data(), x.data(), s.B, s.T, s.NH, s.NKV, s.D);
    loom::cpu::attention_forward(om.data(), am.data(), xm.data(), s.B, s.T, C, s.NH);
    EXPECT_TRUE(bitwise_equal(o, om)) << "out, NKV " << s.NKV;
    EXPECT_TRUE(bitwise_equal(a, am)) << "att, NKV " << s.NKV;
    std::vector<float> dx(BT * row, std::numeric_limits<float>::quiet_NaN()), dxm(BT * 3 * C);
    loom::cpu::attention_backward_gqa(dx.data(), scratch.data(), g.data(), x.data(), a.data(), s.B,
                                      s.T, s.NH, s.NKV, s.D);
    loom::cpu::attention_backward(dxm.data(), scratch.data(), g.data(), xm.data(), am.data(), s.B,
                                  s.T, C, s.NH);
    std::vector<float> want(BT * row, 0.0f);
    for (size_t r = 0; r < BT; r++) {
      std::copy(dxm.data() + r * 3 * C, dxm.data() + r * 3 * C + C, want.data() + r * row);
      for (int h = 0; h < s.NH; h++)  // head order within each group
        for (int d = 0; d < s.D; d++) {
          want[r * row + C + (h / group) * s.D + d] += dxm[r * 3 * C + C + h * s.D + d];
          want[r * row + C + (s.NKV + h / group) * s.D + d] += dxm[r * 3 * C + 2 * C + h * s.D + d];
        }
    }
    EXPECT_TRUE(bitwise_equal(dx, want)) << "dqkv, NH " << s.NH << " NKV " << s.NKV;
  }
}

TEST(KernelAttentionGqa, BackwardMatchesFiniteDifferences) {
  const Shape shapes[] = {{2, 5, 4, 2, 4}, {1, 6, 3, 1, 4}};
  for (const Shape& s : shapes) {
    const int C = s.NH * s.D, row = (s.NH + 2 * s.NKV) * s.D;
    const size_t BT = (size_t)s.B * s.T, TT = (size_t)s.B * s.NH * s.T * s.T;
    auto x = randu(BT * row, 50 + s.NKV, -1.5f, 1.5f), R = randu(BT * C, 60 + s.NKV);
    std::vector<float> o(BT * C), a(TT), dx(BT * row);
    std::vector<float> scratch(
        loom::cpu::attention_backward_scratch_floats(s.B, s.T, s.NH, s.NKV, s.D));
    loom::cpu::attention_forward_gqa(o.data(), a.data(), x.data(), s.B, s.T, s.NH, s.NKV, s.D);
    std::vector<double> od;
    ref_gqa(od, to_double(x), s.B, s.T, s.NH, s.NKV, s.D);
    expect_close(o, od, kFwdRtol, kFwdAtol, "gqa out");
    loom::cpu::attention_backward_gqa(dx.data(), scratch.data(), R.data(), x.data(), a.data(), s.B,
                                      s.T, s.NH, s.NKV, s.D);
    auto xd = to_double(x), Rd = to_double(R);
    auto L = [&]() {
      ref_gqa(od, xd, s.B, s.T, s.NH, s.NKV, s.D);
      return dot(od, Rd);
    };
    // Error model of kernel_test_util.h: dK/dV sum group * T <= 12 terms per entry.
    expect_close(dx, fd_grad(xd, L), kGradRtol, kGradAtol, "gqa dqkv");
  }
}

}  // namespace attention_gqa_test
