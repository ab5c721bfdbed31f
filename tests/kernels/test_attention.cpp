// attention cpu twin: causal forward vs double reference, dqkv vs central differences.
#include "kernels/attention.h"

#include <limits>

#include "kernel_test_util.h"

using namespace loom::ktest;

namespace {

// out (B, T, C), att (B, NH, T, T) from qkv (B, T, 3C), causal, in double.
void ref_attention(std::vector<double>& out, std::vector<double>* att,
                   const std::vector<double>& qkv, int B, int T, int C, int NH) {
  const int HS = C / NH;
  const double scale = 1.0 / std::sqrt((double)HS);
  out.assign((size_t)B * T * C, 0.0);
  if (att) att->assign((size_t)B * NH * T * T, 0.0);
  std::vector<double> p(T);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const double* q = qkv.data() + ((size_t)b * T + t) * 3 * C + h * HS;
        double mx = -INFINITY, sum = 0.0;
        for (int s = 0; s <= t; s++) {
          const double* k = qkv.data() + ((size_t)b * T + s) * 3 * C + C + h * HS;
          double d = 0.0;
          for (int i = 0; i < HS; i++) d += q[i] * k[i];
          p[s] = d * scale;
          mx = std::max(mx, p[s]);
        }
        for (int s = 0; s <= t; s++) sum += (p[s] = std::exp(p[s] - mx));
        double* o = out.data() + ((size_t)b * T + t) * C + h * HS;
        for (int s = 0; s <= t; s++) {
          p[s] /= sum;
          if (att) (*att)[(((size_t)b * NH + h) * T + t) * T + s] = p[s];
          const double* v = qkv.data() + ((size_t)b * T + s) * 3 * C + 2 * C + h * HS;
          for (int i = 0; i < HS; i++) o[i] += p[s] * v[i];
        }
      }
}

void check_forward(int B, int T, int C, int NH, uint32_t seed) {
  auto qkv = randu((size_t)B * T * 3 * C, seed, -1.5f, 1.5f);  // peaked enough softmax rows
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> out((size_t)B * T * C, nan), att((size_t)B * NH * T * T, nan);
  loom::cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  std::vector<double> o, a;
  ref_attention(o, &a, to_double(qkv), B, T, C, NH);
  expect_close(out, o, kFwdRtol, kFwdAtol, "out");
  expect_close(att, a, kFwdRtol, kFwdAtol, "att");
  size_t nonzero_masked = 0;  // s > t must be exactly 0
  for (int bh = 0; bh < B * NH; bh++)
    for (int t = 0; t < T; t++)
      for (int s = t + 1; s < T; s++) nonzero_masked += att[((size_t)bh * T + t) * T + s] != 0.0f;
  EXPECT_EQ(nonzero_masked, 0u);
}

void check_backward(int B, int T, int C, int NH, uint32_t seed) {
  auto qkv = randu((size_t)B * T * 3 * C, seed, -1.5f, 1.5f);
  auto R = randu((size_t)B * T * C, seed + 1);  // L = sum(out * R)
  std::vector<float> out((size_t)B * T * C), att((size_t)B * NH * T * T);
  loom::cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> dqkv(qkv.size(), nan), scratch((size_t)B * NH * T * T, nan);  // overwritten
  loom::cpu::attention_backward(dqkv.data(), scratch.data(), R.data(), qkv.data(), att.data(), B,
                                T, C, NH);
  auto qd = to_double(qkv), Rd = to_double(R);
  std::vector<double> o;
  auto L = [&]() { ref_attention(o, nullptr, qd, B, T, C, NH); return dot(o, Rd); };
  expect_close(dqkv, fd_grad(qd, L), kGradRtol, kGradAtol, "dqkv");
}

}  // namespace

TEST(KernelAttention, ForwardCausalMatchesReference) { check_forward(2, 7, 12, 3, 1); }

// T > 64 spans two query tiles of the kernel.
TEST(KernelAttention, ForwardLongSequenceMatchesReference) { check_forward(1, 70, 8, 2, 2); }

TEST(KernelAttention, BackwardMatchesFiniteDifferences) { check_backward(2, 7, 12, 3, 10); }

TEST(KernelAttention, BackwardLongSequenceMatchesFiniteDifferences) {
  check_backward(1, 67, 4, 1, 20);
}
