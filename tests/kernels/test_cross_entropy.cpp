// cross-entropy cpu twin: padded vocab vs double reference/differences; vocab shards vs unsharded.
#include <limits>

#include "kernel_test_util.h"
#include "kernels/cross_entropy.h"

using namespace loom::ktest;

namespace cross_entropy_test {

// losses (N) over global ids [0, V) of logits (N, Vp), in double.
std::vector<double> ref_ce(const std::vector<double>& logits, const std::vector<int32_t>& tgt,
                           int N, int Vp, int V) {
  std::vector<double> loss(N);
  for (int n = 0; n < N; n++) {
    const double* r = logits.data() + (size_t)n * Vp;
    double mx = -INFINITY, s = 0.0;
    for (int j = 0; j < V; j++) mx = std::max(mx, r[j]);
    for (int j = 0; j < V; j++) s += std::exp(r[j] - mx);
    loss[n] = std::log(s) + mx - r[tgt[n]];
  }
  return loss;
}

// Logits (N, Vp) with the padded columns (ids >= V) set huge: any leak of padding into the max,
// the sum or the gradient shows up at once.
std::vector<float> ce_logits(int N, int Vp, int V, uint32_t seed) {
  auto l = randu((size_t)N * Vp, seed, -4.0f, 4.0f);
  for (int n = 0; n < N; n++)
    for (int j = V; j < Vp; j++) l[(size_t)n * Vp + j] = 50.0f;
  return l;
}

constexpr int N = 6, V = 13, VL = 16;
const std::vector<int32_t> kTargets = {0, 4, 5, 9, 10, 12};  // every shard of width 5, both ends

TEST(KernelCrossEntropy, PaddedVocabLossAndGradient) {
  auto logits = ce_logits(N, VL, V, 1);
  const float dloss = 1.0f / N;  // mean over rows, as in training
  std::vector<float> maxv(N), sums(2 * N), loss(N);
  loom::cpu::ce_row_max(maxv.data(), logits.data(), N, VL, 0, V);
  loom::cpu::ce_row_sums(sums.data(), logits.data(), maxv.data(), kTargets.data(), N, VL, 0, V);
  loom::cpu::ce_loss(loss.data(), maxv.data(), sums.data(), N);
  std::vector<float> dl = logits;
  loom::cpu::ce_backward_inplace(dl.data(), maxv.data(), sums.data(), kTargets.data(), dloss, N, VL,
                                 0, V);
  auto ld = to_double(logits);
  expect_close(loss, ref_ce(ld, kTargets, N, VL, V), kFwdRtol, kFwdAtol, "loss");
  // L = dloss * sum(losses): the padded columns are absent from the reference, so their
  // difference quotient is exactly 0 and the kernel must write exactly 0 there.
  auto L = [&]() {
    double s = 0.0;
    for (double x : ref_ce(ld, kTargets, N, VL, V)) s += x;
    return s * (double)dloss;
  };
  auto g = fd_grad(ld, L);
  expect_close(dl, g, kGradRtol, kGradAtol, "dlogits");
  for (int n = 0; n < N; n++)
    for (int j = V; j < VL; j++) EXPECT_EQ(dl[(size_t)n * VL + j], 0.0f) << "padding n=" << n;
}

TEST(KernelCrossEntropy, VocabShardsCombineToUnshardedResult) {
  // Global padded vocab 20 = 4 shards of 5 over V = 13: [0,5) [5,10) [10,15: 13,14 padding)
  // [15,20: all padding, so its max is -inf and its sums are 0].
  constexpr int S = 4, W = 5, VP = S * W;
  auto logits = ce_logits(N, VP, V, 2);
  const float dloss = 0.37f;
  // Unsharded run.
  std::vector<float> maxv(N), sums(2 * N), loss(N), dl = logits;
  loom::cpu::ce_row_max(maxv.data(), logits.data(), N, VP, 0, V);
  loom::cpu::ce_row_sums(sums.data(), logits.data(), maxv.data(), kTargets.data(), N, VP, 0, V);
  loom::cpu::ce_loss(loss.data(), maxv.data(), sums.data(), N);
  loom::cpu::ce_backward_inplace(dl.data(), maxv.data(), sums.data(), kTargets.data(), dloss, N, VP,
                                 0, V);
  // Sharded: the test plays the all-reduces (MAX, then SUM) between the passes.
  std::vector<std::vector<float>> shard(S, std::vector<float>((size_t)N * W));
  for (int s = 0; s < S; s++)
    for (int n = 0; n < N; n++)
      for (int j = 0; j < W; j++) shard[s][(size_t)n * W + j] = logits[(size_t)n * VP + s * W + j];
  std::vector<float> gmax(N, -INFINITY), gsums(2 * N, 0.0f), part(2 * N);
  for (int s = 0; s < S; s++) {
    std::vector<float> m(N);
    loom::cpu::ce_row_max(m.data(), shard[s].data(), N, W, s * W, V);
    for (int n = 0; n < N; n++) {
      if (s == S - 1) {
        EXPECT_EQ(m[n], -INFINITY) << "padding-only shard max";
      }
      gmax[n] = std::max(gmax[n], m[n]);
    }
  }
  for (int s = 0; s < S; s++) {
    loom::cpu::ce_row_sums(part.data(), shard[s].data(), gmax.data(), kTargets.data(), N, W, s * W,
                           V);
    for (int i = 0; i < 2 * N; i++) {
      if (s == S - 1) {
        EXPECT_EQ(part[i], 0.0f) << "padding-only shard sums";
      }
      gsums[i] += part[i];
    }
  }
  std::vector<float> sloss(N);
  loom::cpu::ce_loss(sloss.data(), gmax.data(), gsums.data(), N);
  std::vector<double> sdl((size_t)N * VP);
  for (int s = 0; s < S; s++) {
    loom::cpu::ce_backward_inplace(shard[s].data(), gmax.data(), gsums.data(), kTargets.data(),
                                   dloss, N, W, s * W, V);
    for (int n = 0; n < N; n++)
      for (int j = 0; j < W; j++) sdl[(size_t)n * VP + s * W + j] = shard[s][(size_t)n * W + j];
  }
  // The max is exact and the target logit is picked, not summed; only the sum of exps is
  // rounded differently (fp32 partial sums added here): a few fp32 ulps.
  expect_close(loss, std::vector<double>(sloss.begin(), sloss.end()), 1e-6, 1e-7, "sharded loss");
  expect_close(dl, sdl, 1e-6, 1e-7, "sharded dlogits");
  expect_close(sloss, ref_ce(to_double(logits), kTargets, N, VP, V), kFwdRtol, kFwdAtol,
               "sharded loss vs reference");
}

}  // namespace cross_entropy_test
