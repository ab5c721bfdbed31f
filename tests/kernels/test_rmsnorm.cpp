// rmsnorm cpu twin: forward vs double reference, backward vs central differences, accumulation.
#include <limits>

#include "kernel_test_util.h"
#include "kernels/rmsnorm.h"

using namespace loom::ktest;

namespace {

constexpr float kEps = 1e-5f;

// out (N, C) = x / sqrt(mean(x^2) + eps) * w in double; rstd (N).
void ref_rmsnorm(std::vector<double>& out, std::vector<double>* rstd, const std::vector<double>& x,
                 const std::vector<double>& w, int N, int C) {
  out.assign((size_t)N * C, 0.0);
  if (rstd) rstd->assign(N, 0.0);
  for (int n = 0; n < N; n++) {
    const double* xr = x.data() + (size_t)n * C;
    double ss = 0.0;
    for (int c = 0; c < C; c++) ss += xr[c] * xr[c];
    const double r = 1.0 / std::sqrt(ss / C + (double)kEps);
    for (int c = 0; c < C; c++) out[(size_t)n * C + c] = xr[c] * r * w[c];
    if (rstd) (*rstd)[n] = r;
  }
}

constexpr int N = 5, C = 12;

}  // namespace

TEST(KernelRmsnorm, ForwardMatchesReference) {
  auto x = randu((size_t)N * C, 1, -2.0f, 3.0f), w = randu(C, 2, 0.5f, 1.5f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> out((size_t)N * C, nan), rstd(N, nan);
  loom::cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
  std::vector<double> o, r;
  ref_rmsnorm(o, &r, to_double(x), to_double(w), N, C);
  expect_close(out, o, kFwdRtol, kFwdAtol, "out");
  expect_close(rstd, r, kFwdRtol, 0.0, "rstd");
}

TEST(KernelRmsnorm, BackwardMatchesFiniteDifferences) {
  auto x = randu((size_t)N * C, 10, -2.0f, 3.0f), w = randu(C, 11, 0.5f, 1.5f);
  auto R = randu((size_t)N * C, 13);  // L = sum(out * R)
  std::vector<float> out((size_t)N * C), rstd(N);
  loom::cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
  std::vector<float> dx((size_t)N * C, 0.0f), dw(C, 0.0f);
  loom::cpu::rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), N,
                              C);
  auto xd = to_double(x), wd = to_double(w), Rd = to_double(R);
  std::vector<double> o;
  auto L = [&]() {
    ref_rmsnorm(o, nullptr, xd, wd, N, C);
    return dot(o, Rd);
  };
  // Error model: kernel_test_util.h (fp32 sums of n <= 12 terms; central differences ~1e-9).
  expect_close(dx, fd_grad(xd, L), kGradRtol, kGradAtol, "dinp");
  expect_close(dw, fd_grad(wd, L), kGradRtol, kGradAtol, "dw");
}

TEST(KernelRmsnorm, BackwardAccumulatesIntoBoth) {
  auto x = randu((size_t)N * C, 20, -2.0f, 3.0f), w = randu(C, 21, 0.5f, 1.5f);
  auto g = randu((size_t)N * C, 23);
  std::vector<float> out((size_t)N * C), rstd(N);
  loom::cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
  std::vector<float> dx0((size_t)N * C, 0.0f), dw0(C, 0.0f);
  loom::cpu::rmsnorm_backward(dx0.data(), dw0.data(), g.data(), x.data(), w.data(), rstd.data(), N,
                              C);
  auto dx = randu((size_t)N * C, 24), dw = randu(C, 25);
  const auto dx_init = dx, dw_init = dw;
  loom::cpu::rmsnorm_backward(dx.data(), dw.data(), g.data(), x.data(), w.data(), rstd.data(), N,
                              C);
  // One fp32 addition each: |error| <= u |sum| (u = 2^-24), well inside 1e-6 relative.
  for (size_t i = 0; i < dx.size(); i++)
    EXPECT_NEAR(dx[i], dx_init[i] + dx0[i], 1e-6 * (1.0 + std::fabs(dx_init[i] + dx0[i])));
  for (int c = 0; c < C; c++)
    EXPECT_NEAR(dw[c], dw_init[c] + dw0[c], 1e-6 * (1.0 + std::fabs(dw_init[c] + dw0[c])));
}
