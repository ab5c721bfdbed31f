// Grouped-query indexing of the tensor-core attention (kernels/attention_tc.cuh, whose public
// interface passes NKV = NH today): with NKV < NH it must equal multi-head attention on a qkv
// whose kv heads are repeated per group. Emulation build only: the internal header is device
// code, and the test files of this folder are compiled as such.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/attention_tc.cuh"
#include "loom_emu/emulator.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom::cudatest {
namespace {

using Dev = __nv_bfloat16;

Dev* dev(DevBuf<bf16>& b) { return reinterpret_cast<Dev*>(b.get()); }

// Forward then backward of one layout; delta (B, NH, T) = rowsum(dout * out) from the host.
struct Run {
  std::vector<float> out, lse, dqkv;
};

Run run(const std::vector<float>& qkv, const std::vector<float>& dout,
        const std::vector<float>& delta, const cuda::tc::AttnLayout& g) {
  const size_t n_out = (size_t)g.B * g.T * g.o_row, n_row = (size_t)g.B * g.NH * g.T;
  DevBuf<bf16> dQkv(convert<bf16>(qkv)), dOut(n_out), dDout(convert<bf16>(dout)), dDqkv(qkv.size());
  DevBuf<float> dLse(n_row), dDelta(delta.empty() ? std::vector<float>(n_row, 0.0f) : delta);
  cuda::tc::forward(dev(dOut), dLse.get(), dev(dQkv), g, nullptr);
  cuda::tc::backward(dev(dDqkv), dev(dDout), dev(dQkv), dLse.get(), dDelta.get(), g, nullptr);
  return Run{to_f32(dOut.download()), dLse.download(), to_f32(dDqkv.download())};
}

// B=2, T=77 sequences, NH query heads of size D in groups of G = NH / NKV.
void check_gqa(int NH, int NKV, int D, uint32_t seed) {
  const int B = 2, T = 77, G = NH / NKV, C = NH * D, Ckv = NKV * D;
  const auto gq = cuda::tc::attn_layout(B, T, NH, NKV, D),
             mh = cuda::tc::attn_layout(B, T, NH, NH, D);
  const auto qkv = round_to<bf16>(randu((size_t)B * T * gq.qkv_row, seed, -2.0f, 2.0f));
  std::vector<float> rep((size_t)B * T * mh.qkv_row);  // kv head h / G repeated for head h
  for (size_t bt = 0; bt < (size_t)B * T; bt++)
    for (int h = 0; h < NH; h++)
      for (int d = 0; d < D; d++) {
        const float* x = &qkv[bt * gq.qkv_row];
        float* y = &rep[bt * mh.qkv_row];
        y[h * D + d] = x[h * D + d];
        y[C + h * D + d] = x[C + (h / G) * D + d];
        y[2 * C + h * D + d] = x[C + Ckv + (h / G) * D + d];
      }
  // The outputs of one run with dout 0 (delta then is 0): forward results only.
  const Run f = run(qkv, std::vector<float>((size_t)B * T * C, 0.0f), {}, gq);
  // With dout nonzero only on heads h = j (mod G), kv head g receives exactly the gradient of
  // head g G + j of the repeated layout: the other heads add exact zeros. Bitwise equal.
  for (int j = 0; j < G; j++) {
    auto dout = round_to<bf16>(randu((size_t)B * T * C, seed + 1 + j));
    std::vector<float> delta((size_t)B * NH * T, 0.0f);
    for (int b = 0; b < B; b++)
      for (int t = 0; t < T; t++)
        for (int h = 0; h < NH; h++) {
          float* row = &dout[((size_t)b * T + t) * C + h * D];
          const float* o = &f.out[((size_t)b * T + t) * C + h * D];
          double s = 0.0;
          for (int d = 0; d < D; d++) {
            if (h % G != j) row[d] = 0.0f;
            s += (double)row[d] * o[d];
          }
          delta[((size_t)b * NH + h) * T + t] = (float)s;
        }
    const Run a = run(qkv, dout, delta, gq), m = run(rep, dout, delta, mh);
    const std::string what = "NH=" + std::to_string(NH) + " NKV=" + std::to_string(NKV) +
                             " D=" + std::to_string(D) + " j=" + std::to_string(j);
    EXPECT_TRUE(bitwise_equal(a.out, m.out)) << what << " out";
    EXPECT_TRUE(bitwise_equal(a.lse, m.lse)) << what << " lse";
    for (size_t bt = 0; bt < (size_t)B * T; bt++)
      for (int h = 0; h < NH; h++)
        for (int d = 0; d < D; d++) {
          const float* x = &a.dqkv[bt * gq.qkv_row];
          const float* y = &m.dqkv[bt * mh.qkv_row];
          ASSERT_EQ(x[h * D + d], y[h * D + d]) << what << " dq " << bt << " " << h;
          if (h % G != j) continue;
          ASSERT_EQ(x[C + (h / G) * D + d], y[C + h * D + d]) << what << " dk " << bt << " " << h;
          ASSERT_EQ(x[C + Ckv + (h / G) * D + d], y[2 * C + h * D + d])
              << what << " dv " << bt << " " << h;
        }
  }
}

TEST(AttentionTcGqa, EqualsMultiHeadWithRepeatedKvHeads) {
  check_gqa(4, 2, 64, 51);
  check_gqa(3, 1, 128, 61);
}

}  // namespace
}  // namespace loom::cudatest
