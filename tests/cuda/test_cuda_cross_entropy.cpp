// cuda twin of the vocab-parallel softmax cross-entropy (three passes) vs the cpu twin, incl. a
// TP=2 split.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cross_entropy.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom::cudatest {
namespace {

class CudaCrossEntropy : public CudaTest {};

struct Shard {
  int Vl, vstart, V;
};
// Vl = 304: 128-bit packs (fp32 and bf16); 301: scalar path; padding columns (V < vstart + Vl);
// a shard of padding only (vstart >= V: max -inf, sums 0).
const Shard kShards[] = {{304, 0, 300}, {301, 150, 400}, {304, 304, 550}, {64, 600, 550}};

std::string name(const Shard& s) {
  return "Vl=" + std::to_string(s.Vl) + " vstart=" + std::to_string(s.vstart) +
         " V=" + std::to_string(s.V);
}

TEST_F(CudaCrossEntropy, Fp32PassesMatchCpu) {
  const int N = 9;
  const float dloss = 1.0f / N;
  for (const Shard& s : kShards) {
    auto logits = randu((size_t)N * s.Vl, 1, -8.0f, 8.0f);
    auto targets = test::randi(N, s.V, 2);
    std::vector<float> maxv(N), sums(2 * N), dl = logits;
    cpu::ce_row_max(maxv.data(), logits.data(), N, s.Vl, s.vstart, s.V);
    cpu::ce_row_sums(sums.data(), logits.data(), maxv.data(), targets.data(), N, s.Vl, s.vstart,
                     s.V);
    DevBuf<float> dLog(logits), dMax(N), dSums(2 * N), dMax2(N), dSums2(2 * N);
    DevBuf<int32_t> dTgt(targets);
    cuda::ce_row_max(dMax.get(), dLog.get(), N, s.Vl, s.vstart, s.V, nullptr);
    cuda::ce_row_sums(dSums.get(), dLog.get(), dMax.get(), dTgt.get(), N, s.Vl, s.vstart, s.V,
                      nullptr);
    cuda::ce_row_stats(dMax2.get(), dSums2.get(), dLog.get(), dTgt.get(), N, s.Vl, s.vstart, s.V,
                       nullptr);
    const auto gmax = dMax.download();
    EXPECT_TRUE(bitwise_equal(gmax, maxv)) << "row max " << name(s);
    EXPECT_TRUE(bitwise_equal(dMax2.download(), maxv)) << "row stats max " << name(s);
    EXPECT_REL_LE(dSums.download(), sums, kTolF32, "row sums " + name(s));
    EXPECT_REL_LE(dSums2.download(), sums, kTolF32, "row stats sums " + name(s));
    if (s.vstart >= s.V) continue;  // no valid column: no loss from this shard alone
    std::vector<float> losses(N);
    cpu::ce_loss(losses.data(), maxv.data(), sums.data(), N);
    cpu::ce_backward_inplace(dl.data(), maxv.data(), sums.data(), targets.data(), dloss, N, s.Vl,
                             s.vstart, s.V);
    DevBuf<float> dLoss(N);
    cuda::ce_loss(dLoss.get(), dMax.get(), dSums.get(), N, nullptr);
    cuda::ce_backward_inplace(dLog.get(), dMax.get(), dSums.get(), dTgt.get(), dloss, N, s.Vl,
                              s.vstart, s.V, nullptr);
    EXPECT_REL_LE(dLoss.download(), losses, kTolF32, "loss " + name(s));
    EXPECT_REL_LE(dLog.download(), dl, kTolF32, "dlogits " + name(s));
  }
}

template <typename T>
class CudaCrossEntropyLowp : public CudaTest {};
TYPED_TEST_SUITE(CudaCrossEntropyLowp, LowpTypes, TypeNames);

// bf16 and fp16 logits: all three passes (separate max and sums, and the one-pass stats) against
// the cpu twin on the rounded logits; dlogits rounded once to the type.
TYPED_TEST(CudaCrossEntropyLowp, PassesMatchCpuOnRoundedLogits) {
  using T = TypeParam;
  const std::string ty = type_name<T>();
  const uint32_t seed = per_type<T>(3u, 7u);
  const int N = 9;
  const float dloss = 1.0f / N;
  for (const Shard& s : kShards) {
    if (s.vstart >= s.V) continue;
    auto logits = round_to<T>(randu((size_t)N * s.Vl, seed, -8.0f, 8.0f));
    auto targets = test::randi(N, s.V, seed + 1);
    std::vector<float> maxv(N), sums(2 * N), losses(N), dl = logits;
    cpu::ce_row_max(maxv.data(), logits.data(), N, s.Vl, s.vstart, s.V);
    cpu::ce_row_sums(sums.data(), logits.data(), maxv.data(), targets.data(), N, s.Vl, s.vstart,
                     s.V);
    cpu::ce_loss(losses.data(), maxv.data(), sums.data(), N);
    cpu::ce_backward_inplace(dl.data(), maxv.data(), sums.data(), targets.data(), dloss, N, s.Vl,
                             s.vstart, s.V);
    DevBuf<T> hLog(convert<T>(logits));
    DevBuf<float> dMax(N), dSums(2 * N), dMax1(N), dSums1(2 * N), dLoss(N);
    DevBuf<int32_t> dTgt(targets);
    cuda::ce_row_max(dMax1.get(), hLog.get(), N, s.Vl, s.vstart, s.V, nullptr);
    cuda::ce_row_sums(dSums1.get(), hLog.get(), dMax1.get(), dTgt.get(), N, s.Vl, s.vstart, s.V,
                      nullptr);
    cuda::ce_row_stats(dMax.get(), dSums.get(), hLog.get(), dTgt.get(), N, s.Vl, s.vstart, s.V,
                       nullptr);
    cuda::ce_loss(dLoss.get(), dMax.get(), dSums.get(), N, nullptr);
    cuda::ce_backward_inplace(hLog.get(), dMax.get(), dSums.get(), dTgt.get(), dloss, N, s.Vl,
                              s.vstart, s.V, nullptr);
    // Statistics and losses are fp32 computed from exact (rounded) inputs: fp32 tolerance.
    EXPECT_TRUE(bitwise_equal(dMax1.download(), maxv)) << ty << " row max " << name(s);
    EXPECT_TRUE(bitwise_equal(dMax.download(), maxv)) << ty << " row stats max " << name(s);
    EXPECT_REL_LE(dSums1.download(), sums, kTolF32, ty + " row sums " + name(s));
    EXPECT_REL_LE(dSums.download(), sums, kTolF32, ty + " row stats sums " + name(s));
    EXPECT_REL_LE(dLoss.download(), losses, kTolF32, ty + " loss " + name(s));
    EXPECT_REL_LE(to_f32(hLog.download()), dl, type_tol<T>(), ty + " dlogits " + name(s));
  }
}

// Two vocab shards as TP ranks would hold them: local stats, MAX and SUM reductions (done on
// the host here, as the communicator would), then the loss equals the unsharded one.
TEST_F(CudaCrossEntropy, TwoShardsReduceToFullVocabLoss) {
  const int N = 7, V = 500, Vl = 256;  // padded vocab 512 over two shards, 12 padding ids
  auto full = randu((size_t)N * 2 * Vl, 5, -6.0f, 6.0f);
  auto targets = test::randi(N, V, 6);
  std::vector<float> maxv(N), sums(2 * N), losses(N);
  cpu::ce_row_max(maxv.data(), full.data(), N, 2 * Vl, 0, V);
  cpu::ce_row_sums(sums.data(), full.data(), maxv.data(), targets.data(), N, 2 * Vl, 0, V);
  cpu::ce_loss(losses.data(), maxv.data(), sums.data(), N);

  std::vector<float> lmax[2], lsums[2];
  DevBuf<int32_t> dTgt(targets);
  std::vector<std::vector<float>> shard(2, std::vector<float>((size_t)N * Vl));
  for (int r = 0; r < 2; r++) {
    for (int n = 0; n < N; n++)
      std::copy_n(&full[(size_t)n * 2 * Vl + (size_t)r * Vl], Vl, &shard[r][(size_t)n * Vl]);
    DevBuf<float> dLog(shard[r]), dMax(N), dSums(2 * N);
    cuda::ce_row_stats(dMax.get(), dSums.get(), dLog.get(), dTgt.get(), N, Vl, r * Vl, V, nullptr);
    lmax[r] = dMax.download();
    lsums[r] = dSums.download();
  }
  std::vector<float> gmax(N), total(2 * N, 0.0f);
  for (int n = 0; n < N; n++) gmax[n] = std::max(lmax[0][n], lmax[1][n]);  // all-reduce MAX
  for (int r = 0; r < 2; r++) {
    DevBuf<float> dSums(lsums[r]), dLocal(lmax[r]), dGlobal(gmax);
    cuda::ce_rescale_sums(dSums.get(), dLocal.get(), dGlobal.get(), N, nullptr);
    const auto rs = dSums.download();
    for (int i = 0; i < 2 * N; i++) total[i] += rs[i];  // all-reduce SUM
  }
  DevBuf<float> dMax(gmax), dSums(total), dLoss(N);
  cuda::ce_loss(dLoss.get(), dMax.get(), dSums.get(), N, nullptr);
  EXPECT_REL_LE(dLoss.download(), losses, kTolF32, "loss from two shards");
}

}  // namespace
}  // namespace loom::cudatest
