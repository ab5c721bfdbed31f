// layernorm cpu twin: forward vs double reference, backward vs central differences, semantics.
#include <omp.h>

#include <limits>

#include "kernel_test_util.h"
#include "kernels/layernorm.h"

using namespace loom::ktest;

namespace layernorm_test {

void ref_layernorm(std::vector<double>& out, std::vector<double>* mean, std::vector<double>* rstd,
                   const std::vector<double>& x, const std::vector<double>& w,
                   const std::vector<double>& b, int N, int C) {
  out.assign((size_t)N * C, 0.0);
  if (mean) mean->assign(N, 0.0);
  if (rstd) rstd->assign(N, 0.0);
  for (int n = 0; n < N; n++) {
    const double* xr = x.data() + (size_t)n * C;
    double m = 0.0, v = 0.0;
    for (int c = 0; c < C; c++) m += xr[c];
    m /= C;
    for (int c = 0; c < C; c++) v += (xr[c] - m) * (xr[c] - m);
    v /= C;
    const double r = 1.0 / std::sqrt(v + (double)loom::cpu::kLayerNormEps);
    for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (xr[c] - m) * r * w[c] + b[c];
    if (mean) (*mean)[n] = m;
    if (rstd) (*rstd)[n] = r;
  }
}

// Inputs with a row offset (mean ~ 3) so a one-pass variance would lose digits.
std::vector<float> ln_input(int N, int C, uint32_t seed) {
  auto x = randu((size_t)N * C, seed);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) x[(size_t)n * C + c] += 3.0f + 0.5f * n;
  return x;
}

constexpr int N = 5, C = 12;

TEST(KernelLayernorm, ForwardMatchesReference) {
  auto x = ln_input(N, C, 1), w = randu(C, 2, 0.5f, 1.5f), b = randu(C, 3);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> out((size_t)N * C, nan), mean(N, nan), rstd(N, nan);
  loom::cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(),
                               N, C);
  std::vector<double> o, m, r;
  ref_layernorm(o, &m, &r, to_double(x), to_double(w), to_double(b), N, C);
  expect_close(out, o, kFwdRtol, kFwdAtol, "out");
  expect_close(mean, m, kFwdRtol, 0.0, "mean");
  expect_close(rstd, r, kFwdRtol, 0.0, "rstd");
}

TEST(KernelLayernorm, BackwardMatchesFiniteDifferences) {
  auto x = ln_input(N, C, 10), w = randu(C, 11, 0.5f, 1.5f), b = randu(C, 12);
  auto R = randu((size_t)N * C, 13);  // L = sum(out * R)
  std::vector<float> out((size_t)N * C), mean(N), rstd(N);
  loom::cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(),
                               N, C);
  std::vector<float> dx((size_t)N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
  loom::cpu::layernorm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(),
                                mean.data(), rstd.data(), N, C);
  auto xd = to_double(x), wd = to_double(w), bd = to_double(b), Rd = to_double(R);
  std::vector<double> o;
  auto L = [&]() {
    ref_layernorm(o, nullptr, nullptr, xd, wd, bd, N, C);
    return dot(o, Rd);
  };
  expect_close(dx, fd_grad(xd, L), kGradRtol, kGradAtol, "dinp");
  expect_close(dw, fd_grad(wd, L), kGradRtol, kGradAtol, "dw");
  expect_close(db, fd_grad(bd, L), kGradRtol, kGradAtol, "db");
}

TEST(KernelLayernorm, BackwardAccumulatesAllThree) {
  auto x = ln_input(N, C, 20), w = randu(C, 21, 0.5f, 1.5f), b = randu(C, 22);
  auto g = randu((size_t)N * C, 23);
  std::vector<float> out((size_t)N * C), mean(N), rstd(N);
  loom::cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(),
                               N, C);
  std::vector<float> dx0((size_t)N * C, 0.0f), dw0(C, 0.0f), db0(C, 0.0f);
  loom::cpu::layernorm_backward(dx0.data(), dw0.data(), db0.data(), g.data(), x.data(), w.data(),
                                mean.data(), rstd.data(), N, C);
  auto dx = randu((size_t)N * C, 24), dw = randu(C, 25), db = randu(C, 26);
  auto sum = [](const std::vector<float>& a, const std::vector<float>& d) {
    std::vector<double> s(a.size());
    for (size_t i = 0; i < a.size(); i++) s[i] = (double)a[i] + d[i];
    return s;
  };
  auto want_dx = sum(dx, dx0), want_dw = sum(dw, dw0), want_db = sum(db, db0);
  loom::cpu::layernorm_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(),
                                mean.data(), rstd.data(), N, C);
  // Accumulation adds one fp32 rounding: 1e-6 relative to the largest entry.
  expect_close(dx, want_dx, 1e-6, 1e-6, "dinp accumulates");
  expect_close(dw, want_dw, 1e-6, 1e-6, "dw accumulates");
  expect_close(db, want_db, 1e-6, 1e-6, "db accumulates");
}

TEST(KernelLayernorm, BackwardBitwiseSameFor1And2Threads) {
  const int n = 96, c = 100;  // c not a multiple of the channel block
  auto x = ln_input(n, c, 30), w = randu(c, 31, 0.5f, 1.5f), b = randu(c, 32);
  auto g = randu((size_t)n * c, 33);
  std::vector<float> out((size_t)n * c), mean(n), rstd(n);
  loom::cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(),
                               n, c);
  const int saved = omp_get_max_threads();
  std::vector<float> res[2][3];
  for (int k = 0; k < 2; k++) {
    omp_set_num_threads(k + 1);
    res[k][0] = randu((size_t)n * c, 34);  // identical non-zero prefill for both runs
    res[k][1] = randu(c, 35);
    res[k][2] = randu(c, 36);
    loom::cpu::layernorm_backward(res[k][0].data(), res[k][1].data(), res[k][2].data(), g.data(),
                                  x.data(), w.data(), mean.data(), rstd.data(), n, c);
  }
  omp_set_num_threads(saved);
  EXPECT_TRUE(bitwise_equal(res[0][0], res[1][0])) << "dinp differs between 1 and 2 threads";
  EXPECT_TRUE(bitwise_equal(res[0][1], res[1][1])) << "dw differs between 1 and 2 threads";
  EXPECT_TRUE(bitwise_equal(res[0][2], res[1][2])) << "db differs between 1 and 2 threads";
}

}  // namespace layernorm_test
