// cuda twin of grouped-query attention vs the cpu twin, and vs multi-head attention on repeated
// kv heads.
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom::cudatest {
namespace {

struct Shape {
  int B, T, NH, NKV, D;
};
// T not a multiple of the 32-row tiles; groups of 2, 3 and 4; NKV = 1 (multi-query); the CUDA-core
// fallback for every head size in fp32 (and for 16, 32 in bf16/fp16; 64, 128 there run on tensor
// cores, which take the same layout).
const Shape kShapes[] = {
    {2, 70, 4, 2, 32}, {1, 37, 3, 1, 64}, {2, 33, 6, 2, 16}, {1, 45, 4, 1, 128}};

std::string name(const Shape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " NH=" + std::to_string(s.NH) +
         " NKV=" + std::to_string(s.NKV) + " D=" + std::to_string(s.D);
}

template <typename T>
class CudaAttentionGqa : public CudaTest {};
TYPED_TEST_SUITE(CudaAttentionGqa, Fp32AndLowpTypes, TypeNames);

// Tolerance as the multi-head attention test (kTolF32Attn in fp32: online softmax and longer
// reductions; the storage rounding for bf16/fp16). dK/dV sum a group's heads in a fixed order:
// a second backward gives the same bits.
TYPED_TEST(CudaAttentionGqa, MatchesCpu) {
  using T = TypeParam;
  const std::string ty = type_name<T>();
  const uint32_t seed = per_type<T>(7u, 9u, 13u);
  const double tol = type_tol<T>(kTolF32Attn);
  for (const Shape& s : kShapes) {
    const int C = s.NH * s.D, row = (s.NH + 2 * s.NKV) * s.D;
    const size_t BT = (size_t)s.B * s.T, TT = (size_t)s.B * s.NH * s.T * s.T;
    const size_t n_rows = (size_t)s.B * s.NH * s.T;
    auto qkv = round_to<T>(randu(BT * row, seed, -2.0f, 2.0f));
    auto dout = round_to<T>(randu(BT * C, seed + 1));
    std::vector<float> out(BT * C), att(TT), dqkv(qkv.size());
    std::vector<float> scratch(cpu::attention_backward_scratch_floats(s.B, s.T, s.NH, s.NKV, s.D));
    cpu::attention_forward_gqa(out.data(), att.data(), qkv.data(), s.B, s.T, s.NH, s.NKV, s.D);
    cpu::attention_backward_gqa(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(),
                                s.B, s.T, s.NH, s.NKV, s.D);
    DevBuf<T> hQkv(convert<T>(qkv)), hOut(BT * C), hDout(convert<T>(dout)), hDqkv(qkv.size());
    DevBuf<float> dLse(n_rows), dDelta(n_rows);
    cuda::attention_forward_gqa(hOut.get(), dLse.get(), hQkv.get(), s.B, s.T, s.NH, s.NKV, s.D,
                                nullptr);
    EXPECT_REL_LE(to_f32(hOut.download()), out, tol, ty + " gqa out " + name(s));
    cuda::attention_backward_gqa(hDqkv.get(), dDelta.get(), hDout.get(), hQkv.get(), hOut.get(),
                                 dLse.get(), s.B, s.T, s.NH, s.NKV, s.D, nullptr);
    const auto got = to_f32(hDqkv.download());
    EXPECT_REL_LE(got, dqkv, tol, ty + " gqa dqkv " + name(s));
    cuda::attention_backward_gqa(hDqkv.get(), dDelta.get(), hDout.get(), hQkv.get(), hOut.get(),
                                 dLse.get(), s.B, s.T, s.NH, s.NKV, s.D, nullptr);
    EXPECT_TRUE(bitwise_equal(to_f32(hDqkv.download()), got)) << ty << " deterministic " << name(s);
  }
}

// The fp32 fallback on the grouped layout against itself on the multi-head layout with each kv
// head repeated for its group: out, lse and dQ run the same arithmetic per query head (bitwise);
// dK/dV of a kv head are the group's per-head sums, added in another association (fp32 level).
TEST(CudaAttentionGqaFallback, EqualsMultiHeadOnRepeatedKvHeads) {
  if (!cuda::cuda_available()) GTEST_SKIP() << cuda::cuda_unavailable_reason();
  for (const Shape& s : {Shape{2, 40, 4, 2, 32}, Shape{1, 35, 3, 1, 16}}) {
    const int C = s.NH * s.D, row = (s.NH + 2 * s.NKV) * s.D, group = s.NH / s.NKV;
    const size_t BT = (size_t)s.B * s.T, n_rows = (size_t)s.B * s.NH * s.T;
    auto x = randu(BT * row, 17, -2.0f, 2.0f), g = randu(BT * C, 18);
    std::vector<float> xm(BT * 3 * C);
    for (size_t r = 0; r < BT; r++)
      for (int h = 0; h < s.NH; h++)
        for (int d = 0; d < s.D; d++) {
          xm[r * 3 * C + h * s.D + d] = x[r * row + h * s.D + d];
          xm[r * 3 * C + C + h * s.D + d] = x[r * row + C + (h / group) * s.D + d];
          xm[r * 3 * C + 2 * C + h * s.D + d] = x[r * row + C + (s.NKV + h / group) * s.D + d];
        }
    DevBuf<float> dX(x), dXm(xm), dG(g), dO(BT * C), dOm(BT * C), dL(n_rows), dLm(n_rows),
        dD(n_rows), dDx(x.size()), dDxm(xm.size());
    cuda::attention_forward_gqa(dO.get(), dL.get(), dX.get(), s.B, s.T, s.NH, s.NKV, s.D, nullptr);
    cuda::attention_forward(dOm.get(), dLm.get(), dXm.get(), s.B, s.T, C, s.NH, nullptr);
    EXPECT_TRUE(bitwise_equal(dO.download(), dOm.download())) << "out " << name(s);
    EXPECT_TRUE(bitwise_equal(dL.download(), dLm.download())) << "lse " << name(s);
    cuda::attention_backward_gqa(dDx.get(), dD.get(), dG.get(), dX.get(), dO.get(), dL.get(), s.B,
                                 s.T, s.NH, s.NKV, s.D, nullptr);
    cuda::attention_backward(dDxm.get(), dD.get(), dG.get(), dXm.get(), dOm.get(), dLm.get(), s.B,
                             s.T, C, s.NH, nullptr);
    const auto gx = dDx.download(), gm = dDxm.download();
    std::vector<float> dq(BT * C), dqm(BT * C), dkv(BT * 2 * s.NKV * s.D, 0.0f), dkvw = dkv;
    for (size_t r = 0; r < BT; r++) {
      for (int j = 0; j < C; j++)
        dq[r * C + j] = gx[r * row + j], dqm[r * C + j] = gm[r * 3 * C + j];
      for (int j = 0; j < 2 * s.NKV * s.D; j++) dkv[r * 2 * s.NKV * s.D + j] = gx[r * row + C + j];
      for (int h = 0; h < s.NH; h++)
        for (int d = 0; d < s.D; d++) {
          dkvw[r * 2 * s.NKV * s.D + (h / group) * s.D + d] += gm[r * 3 * C + C + h * s.D + d];
          dkvw[r * 2 * s.NKV * s.D + (s.NKV + h / group) * s.D + d] +=
              gm[r * 3 * C + 2 * C + h * s.D + d];
        }
    }
    EXPECT_TRUE(bitwise_equal(dq, dqm)) << "dq " << name(s);
    EXPECT_REL_LE(dkv, dkvw, kTolF32, "dk, dv vs summed multi-head " + name(s));
  }
}

}  // namespace
}  // namespace loom::cudatest
