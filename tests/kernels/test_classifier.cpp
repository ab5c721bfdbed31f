// fused classifier + cross-entropy: vs double reference/differences, vs the unfused path, shards.
#include <omp.h>

#include <limits>

#include "kernel_test_util.h"
#include "kernels/classifier.h"
#include "kernels/cross_entropy.h"
#include "kernels/matmul.h"

using namespace loom::ktest;
namespace cpu = loom::cpu;

namespace {

// Double reference: logits (N, Vp) = x (N, C) W^T (W (Vp, C)); mean-free sum of CE losses over
// global ids [0, V) times dloss.
double ref_objective(const std::vector<double>& x, const std::vector<double>& W,
                     const std::vector<int32_t>& tgt, int N, int C, int Vp, int V, double dloss,
                     std::vector<double>* logits_out = nullptr,
                     std::vector<double>* losses = nullptr) {
  std::vector<double> lg((size_t)N * Vp);  // (N, Vp)
  for (int n = 0; n < N; n++)
    for (int j = 0; j < Vp; j++) {
      double s = 0.0;
      for (int c = 0; c < C; c++) s += x[(size_t)n * C + c] * W[(size_t)j * C + c];
      lg[(size_t)n * Vp + j] = s;
    }
  double total = 0.0;
  if (losses) losses->assign(N, 0.0);
  for (int n = 0; n < N; n++) {
    const double* r = lg.data() + (size_t)n * Vp;
    double mx = -INFINITY, s = 0.0;
    for (int j = 0; j < V; j++) mx = std::max(mx, r[j]);
    for (int j = 0; j < V; j++) s += std::exp(r[j] - mx);
    const double l = std::log(s) + mx - r[tgt[n]];
    if (losses) (*losses)[n] = l;
    total += l;
  }
  if (logits_out) *logits_out = lg;
  return total * dloss;
}

struct Case {
  int N, C, V, Vp;
  std::vector<float> x, W;  // (N, C), (Vp, C); padded rows of W are nonzero on purpose
  std::vector<int32_t> tgt;
};

Case make_case(int N, int C, int V, int Vp, uint32_t seed) {
  Case k{N,
         C,
         V,
         Vp,
         randu((size_t)N * C, seed, -1.0f, 1.0f),
         randu((size_t)Vp * C, seed + 1, -1.0f, 1.0f),
         {}};
  for (int n = 0; n < N; n++) k.tgt.push_back((int32_t)((n * 7 + 3) % V));
  k.tgt[0] = 0;
  k.tgt[N - 1] = V - 1;
  return k;
}

}  // namespace

TEST(KernelClassifier, FusedMatchesReferenceAndFiniteDifferences) {
  // 3 chunks of 16 over Vp = 48; ids 37..47 are padding (inside the last chunk).
  Case k = make_case(5, 8, 37, 48, 11);
  const int N = k.N, C = k.C, V = k.V, Vp = k.Vp, chunk = 16;
  const float dloss = 0.37f;
  std::vector<float> logits((size_t)N * Vp), maxv(N), sums(2 * N), loss(N), dx((size_t)N * C);
  std::vector<float> dW0 = randu((size_t)Vp * C, 12, -0.1f, 0.1f), dW = dW0;  // accumulates
  std::vector<float> work(cpu::classifier_work_floats(N, Vp, chunk));
  cpu::classifier_forward(logits.data(), maxv.data(), sums.data(), work.data(), k.x.data(),
                          k.W.data(), k.tgt.data(), N, C, Vp, 0, V, chunk);
  cpu::ce_loss(loss.data(), maxv.data(), sums.data(), N);
  std::vector<double> ref_logits, ref_loss;
  auto xd = to_double(k.x), Wd = to_double(k.W);
  ref_objective(xd, Wd, k.tgt, N, C, Vp, V, dloss, &ref_logits, &ref_loss);
  expect_close(logits, ref_logits, kFwdRtol, kFwdAtol, "logits");
  expect_close(loss, ref_loss, kFwdRtol, kFwdAtol, "loss");

  cpu::classifier_backward(dx.data(), dW.data(), logits.data(), maxv.data(), sums.data(),
                           k.tgt.data(), dloss, k.x.data(), k.W.data(), N, C, Vp, 0, V, chunk);
  auto f = [&]() { return ref_objective(xd, Wd, k.tgt, N, C, Vp, V, dloss); };
  expect_close(dx, fd_grad(xd, f), kGradRtol, kGradAtol, "dx");
  std::vector<float> dWadd((size_t)Vp * C);
  for (size_t i = 0; i < dW.size(); i++) dWadd[i] = dW[i] - dW0[i];
  expect_close(dWadd, fd_grad(Wd, f), kGradRtol, kGradAtol, "dW");
  for (int j = V; j < Vp; j++)
    for (int c = 0; c < C; c++)
      EXPECT_EQ(dW[(size_t)j * C + c], dW0[(size_t)j * C + c]) << "padding row " << j;
}

TEST(KernelClassifier, FusedEqualsUnfusedPath) {
  // Shapes of a small real head: many chunks, padding in the last one.
  Case k = make_case(64, 32, 1000, 1024, 21);
  const int N = k.N, C = k.C, V = k.V, Vp = k.Vp;
  const float dloss = 1.0f / N;
  // Unfused: one GEMM, three CE passes, two GEMMs.
  std::vector<float> lg((size_t)N * Vp), mx(N), sm(2 * N), ls(N), dx((size_t)N * C);
  std::vector<float> dW((size_t)Vp * C, 0.0f);
  cpu::gemm(false, true, N, Vp, C, 1.0f, k.x.data(), C, k.W.data(), C, 0.0f, lg.data(), Vp);
  cpu::ce_row_max(mx.data(), lg.data(), N, Vp, 0, V);
  cpu::ce_row_sums(sm.data(), lg.data(), mx.data(), k.tgt.data(), N, Vp, 0, V);
  cpu::ce_loss(ls.data(), mx.data(), sm.data(), N);
  cpu::ce_backward_inplace(lg.data(), mx.data(), sm.data(), k.tgt.data(), dloss, N, Vp, 0, V);
  cpu::gemm(false, false, N, C, Vp, 1.0f, lg.data(), Vp, k.W.data(), C, 0.0f, dx.data(), C);
  cpu::gemm(true, false, Vp, C, N, 1.0f, lg.data(), Vp, k.x.data(), C, 1.0f, dW.data(), C);
  for (int chunk : {0, 128, 320}) {  // default, even and uneven splits
    std::vector<float> flg((size_t)N * Vp), fmx(N), fsm(2 * N), fls(N), fdx((size_t)N * C);
    std::vector<float> fdW((size_t)Vp * C, 0.0f);
    std::vector<float> work(cpu::classifier_work_floats(N, Vp, chunk));
    cpu::classifier_forward(flg.data(), fmx.data(), fsm.data(), work.data(), k.x.data(), k.W.data(),
                            k.tgt.data(), N, C, Vp, 0, V, chunk);
    cpu::ce_loss(fls.data(), fmx.data(), fsm.data(), N);
    cpu::classifier_backward(fdx.data(), fdW.data(), flg.data(), fmx.data(), fsm.data(),
                             k.tgt.data(), dloss, k.x.data(), k.W.data(), N, C, Vp, 0, V, chunk);
    const std::string tag = " chunk " + std::to_string(chunk);
    // Only the order of the fp32 sums differs (exp sums per chunk, dx accumulated per chunk).
    expect_close(fls, to_double(ls), 1e-6, 1e-7, "loss" + tag);
    expect_close(fdx, to_double(dx), 1e-5, 1e-6, "dx" + tag);
    expect_close(fdW, to_double(dW), 1e-5, 1e-6, "dW" + tag);
    expect_close(flg, to_double(lg), 1e-5, 1e-6, "dlogits" + tag);
  }
}

TEST(KernelClassifier, VocabShardsCombineToUnshardedResult) {
  // Global padded vocab 64 = 4 shards of 16 over V = 37: the third shard holds 5 real ids and
  // padding, the fourth only padding (max -inf, sums 0, no gradient).
  constexpr int S = 4, Wd = 16, chunk = 8;
  Case k = make_case(6, 8, 37, S * Wd, 31);
  const int N = k.N, C = k.C, V = k.V, Vp = k.Vp;
  const float dloss = 0.25f;
  std::vector<float> lg((size_t)N * Vp), mx(N), sm(2 * N), ls(N), dx((size_t)N * C);
  std::vector<float> dW((size_t)Vp * C, 0.0f);
  std::vector<float> work(cpu::classifier_work_floats(N, Vp, chunk));
  cpu::classifier_forward(lg.data(), mx.data(), sm.data(), work.data(), k.x.data(), k.W.data(),
                          k.tgt.data(), N, C, Vp, 0, V, chunk);
  cpu::ce_loss(ls.data(), mx.data(), sm.data(), N);
  cpu::classifier_backward(dx.data(), dW.data(), lg.data(), mx.data(), sm.data(), k.tgt.data(),
                           dloss, k.x.data(), k.W.data(), N, C, Vp, 0, V, chunk);
  // Sharded: the test plays the all-reduces (MAX, rescale, SUM) between the passes.
  std::vector<std::vector<float>> slg(S, std::vector<float>((size_t)N * Wd)), lmax(S), ssum(S);
  std::vector<float> gmax(N, -INFINITY), gsum(2 * N, 0.0f);
  for (int s = 0; s < S; s++) {
    lmax[s].resize(N);
    ssum[s].resize(2 * N);
    std::vector<float> swork(cpu::classifier_work_floats(N, Wd, chunk));
    cpu::classifier_forward(slg[s].data(), lmax[s].data(), ssum[s].data(), swork.data(), k.x.data(),
                            k.W.data() + (size_t)s * Wd * C, k.tgt.data(), N, C, Wd, s * Wd, V,
                            chunk);
    for (int n = 0; n < N; n++) gmax[n] = std::max(gmax[n], lmax[s][n]);
  }
  for (int n = 0; n < N; n++) EXPECT_EQ(lmax[S - 1][n], -INFINITY) << "padding-only shard max";
  for (int s = 0; s < S; s++) {
    cpu::ce_rescale_sums(ssum[s].data(), lmax[s].data(), gmax.data(), N);
    for (int i = 0; i < 2 * N; i++) gsum[i] += ssum[s][i];
  }
  for (int i = 0; i < 2 * N; i++) EXPECT_EQ(ssum[S - 1][i], 0.0f) << "padding-only shard sums";
  std::vector<float> sls(N);
  cpu::ce_loss(sls.data(), gmax.data(), gsum.data(), N);
  expect_close(sls, to_double(ls), 1e-6, 1e-7, "sharded loss");
  std::vector<double> sdx((size_t)N * C, 0.0), sdW((size_t)Vp * C);
  for (int s = 0; s < S; s++) {
    std::vector<float> pdx((size_t)N * C), pdW((size_t)Wd * C, 0.0f);
    cpu::classifier_backward(pdx.data(), pdW.data(), slg[s].data(), gmax.data(), gsum.data(),
                             k.tgt.data(), dloss, k.x.data(), k.W.data() + (size_t)s * Wd * C, N, C,
                             Wd, s * Wd, V, chunk);
    for (size_t i = 0; i < pdx.size(); i++) sdx[i] += pdx[i];  // the TP all-reduce of dx
    for (size_t i = 0; i < pdW.size(); i++) sdW[(size_t)s * Wd * C + i] = pdW[i];
  }
  expect_close(dx, sdx, 1e-5, 1e-6, "sharded dx");
  expect_close(dW, sdW, 1e-5, 1e-6, "sharded dW");
}

TEST(KernelClassifier, LogitsOnlyWithoutTargets) {
  Case k = make_case(3, 4, 20, 32, 41);
  std::vector<float> lg((size_t)k.N * k.Vp);
  cpu::classifier_forward(lg.data(), nullptr, nullptr, nullptr, k.x.data(), k.W.data(), nullptr,
                          k.N, k.C, k.Vp, 0, k.V, 8);
  std::vector<double> ref;
  auto xd = to_double(k.x), Wd = to_double(k.W);
  ref_objective(xd, Wd, k.tgt, k.N, k.C, k.Vp, k.V, 1.0, &ref);
  expect_close(lg, ref, kFwdRtol, kFwdAtol, "logits");
}

// Threads own whole vocab chunks and merge chunk statistics in chunk order, and each chunk's
// GEMMs run single-threaded inside the parallel region: logits, statistics, dlogits and dW do not
// depend on the thread count (bitwise). dx is one threaded OpenBLAS GEMM, whose summation order
// may change with the thread count (it does with the Haswell kernels): a dot product over Vp
// terms reordered is off by at most (Vp - 1) u sum_j |dlogits[n,j] W[j,c]| (worst case).
TEST(KernelClassifier, ThreadCountChangesOnlyTheThreadedGemm) {
  Case k = make_case(32, 16, 1000, 1024, 51);
  const int N = k.N, C = k.C, V = k.V, Vp = k.Vp, chunk = 128;
  auto run = [&](int threads, std::vector<float>& lg, std::vector<float>& dx,
                 std::vector<float>& dW) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<float> mx(N), sm(2 * N), work(cpu::classifier_work_floats(N, Vp, chunk));
    lg.assign((size_t)N * Vp, 0.0f);
    dx.assign((size_t)N * C, 0.0f);
    dW.assign((size_t)Vp * C, 0.0f);
    cpu::classifier_forward(lg.data(), mx.data(), sm.data(), work.data(), k.x.data(), k.W.data(),
                            k.tgt.data(), N, C, Vp, 0, V, chunk);
    cpu::classifier_backward(dx.data(), dW.data(), lg.data(), mx.data(), sm.data(), k.tgt.data(),
                             0.5f, k.x.data(), k.W.data(), N, C, Vp, 0, V, chunk);
    omp_set_num_threads(saved);
  };
  std::vector<float> lg1, dx1, dW1, lg2, dx2, dW2;
  run(1, lg1, dx1, dW1);
  run(2, lg2, dx2, dW2);
  EXPECT_TRUE(bitwise_equal(lg1, lg2)) << "dlogits";
  EXPECT_TRUE(bitwise_equal(dW1, dW2)) << "dW";
  std::vector<double> want(dx1.begin(), dx1.end()), atol((size_t)N * C);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      double mag = 0.0;
      for (int j = 0; j < Vp; j++)
        mag += std::fabs((double)lg1[(size_t)n * Vp + j] * k.W[(size_t)j * C + c]);
      // Both results are within (Vp - 1) u mag of the exact sum, so of each other within twice.
      atol[(size_t)n * C + c] = 2.0 * (Vp - 1) * std::ldexp(mag, -24);
    }
  expect_close(dx2.data(), want.data(), want.size(), 0.0, 0.0, "dx (2 threads vs 1)", atol.data());
}
