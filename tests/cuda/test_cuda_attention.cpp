// cuda twin of causal attention (flash style, saved logsumexp) vs the cpu twin, forward and
// backward.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom::cudatest {
namespace attention {

class CudaAttention : public CudaTest {};

struct Shape {
  int B, T, NH, HS;
};
// Every supported head size; T not a multiple of the 32-row tiles; T = 1; several key tiles.
const Shape kShapes[] = {{2, 70, 2, 16},  {2, 70, 2, 32}, {1, 200, 3, 64},
                         {2, 37, 1, 128}, {1, 1, 2, 64},  {1, 100, 2, 128}};

std::string name(const Shape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " NH=" + std::to_string(s.NH) +
         " HS=" + std::to_string(s.HS);
}

// lse (B, NH, T) in double from qkv (B, T, 3C): log sum_{s<=t} exp(q_t . k_s / sqrt(HS)).
std::vector<float> reference_lse(const std::vector<float>& qkv, const Shape& s) {
  const int C = s.NH * s.HS, C3 = 3 * C;
  std::vector<float> lse((size_t)s.B * s.NH * s.T);
  std::vector<double> sc(s.T);
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < s.NH; h++)
      for (int t = 0; t < s.T; t++) {
        const float* q = &qkv[((size_t)b * s.T + t) * C3 + (size_t)h * s.HS];
        double mx = -INFINITY;
        for (int u = 0; u <= t; u++) {
          const float* k = &qkv[((size_t)b * s.T + u) * C3 + C + (size_t)h * s.HS];
          double d = 0.0;
          for (int e = 0; e < s.HS; e++) d += (double)q[e] * k[e];
          sc[u] = d / std::sqrt((double)s.HS);
          mx = std::max(mx, sc[u]);
        }
        double sum = 0.0;
        for (int u = 0; u <= t; u++) sum += std::exp(sc[u] - mx);
        lse[((size_t)b * s.NH + h) * s.T + t] = (float)(mx + std::log(sum));
      }
  return lse;
}

struct CpuResult {
  std::vector<float> out, dqkv;
};

CpuResult cpu_attention(const std::vector<float>& qkv, const std::vector<float>& dout,
                        const Shape& s) {
  const int C = s.NH * s.HS;
  const size_t tt = (size_t)s.B * s.NH * s.T * s.T;
  CpuResult r;
  r.out.resize((size_t)s.B * s.T * C);
  r.dqkv.resize(qkv.size());
  std::vector<float> att(tt), scratch(tt);
  cpu::attention_forward(r.out.data(), att.data(), qkv.data(), s.B, s.T, C, s.NH);
  cpu::attention_backward(r.dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), s.B,
                          s.T, C, s.NH);
  return r;
}

template <typename T>
class CudaAttentionTyped : public CudaTest {};
TYPED_TEST_SUITE(CudaAttentionTyped, Fp32AndLowpTypes, TypeNames);

// Inputs rounded to the storage type (the cpu twin sees the same values). Scores, softmax and
// lse stay fp32 whatever the storage: lse is held to the fp32 tolerance. The backward is
// deterministic (no atomics): a second run gives the same bits.
TYPED_TEST(CudaAttentionTyped, MatchesCpuOnRoundedInputs) {
  using T = TypeParam;
  const std::string ty = type_name<T>();
  const uint32_t seed = per_type<T>(1u, 3u, 5u);
  const double tol = type_tol<T>(kTolF32Attn);
  for (const Shape& s : kShapes) {
    const int C = s.NH * s.HS;
    const size_t n_qkv = (size_t)s.B * s.T * 3 * C, n_out = (size_t)s.B * s.T * C;
    const size_t n_row = (size_t)s.B * s.NH * s.T;
    auto qkv = round_to<T>(randu(n_qkv, seed, -2.0f, 2.0f));
    auto dout = round_to<T>(randu(n_out, seed + 1));
    const CpuResult want = cpu_attention(qkv, dout, s);
    DevBuf<T> hQkv(convert<T>(qkv)), hOut(n_out), hDout(convert<T>(dout)), hDqkv(n_qkv);
    DevBuf<float> dLse(n_row), dDelta(n_row);
    cuda::attention_forward(hOut.get(), dLse.get(), hQkv.get(), s.B, s.T, C, s.NH, nullptr);
    EXPECT_REL_LE(to_f32(hOut.download()), want.out, tol, ty + " forward out " + name(s));
    EXPECT_REL_LE(dLse.download(), reference_lse(qkv, s), kTolF32Attn,
                  ty + " lse (fp32) " + name(s));
    cuda::attention_backward(hDqkv.get(), dDelta.get(), hDout.get(), hQkv.get(), hOut.get(),
                             dLse.get(), s.B, s.T, C, s.NH, nullptr);
    const auto got = to_f32(hDqkv.download());
    EXPECT_REL_LE(got, want.dqkv, tol, ty + " backward dqkv " + name(s));
    cuda::attention_backward(hDqkv.get(), dDelta.get(), hDout.get(), hQkv.get(), hOut.get(),
                             dLse.get(), s.B, s.T, C, s.NH, nullptr);
    EXPECT_TRUE(bitwise_equal(to_f32(hDqkv.download()), got))
        << ty << " backward deterministic " << name(s);
  }
}

TEST_F(CudaAttention, RejectsUnsupportedHeadSize) {
  DevBuf<float> buf(3 * 2 * 48);
  DevBuf<float> lse(2);
  // C = 48, NH = 1: head size 48 is not instantiated.
  EXPECT_THROW(cuda::attention_forward(buf.get(), lse.get(), buf.get(), 1, 2, 48, 1, nullptr),
               std::exception);
}

}  // namespace attention
}  // namespace loom::cudatest
