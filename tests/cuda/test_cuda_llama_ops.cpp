// cuda twins of rmsnorm, rope and swiglu vs the cpu twins, fp32/bf16/fp16, tail shapes.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "tests/cuda/cuda_scratch.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom::cudatest {
namespace {

constexpr float kEps = 1e-5f;

template <typename T>
class CudaLlamaOps : public CudaTest {};
TYPED_TEST_SUITE(CudaLlamaOps, Fp32AndLowpTypes, TypeNames);

// Tolerances (cuda_test_util.h): fp32 kTolF32 (same math, other summation order); bf16/fp16:
// inputs rounded to the type first so the cpu twin sees the same values, and the error is the
// storage rounding of each output (2^-9 / 2^-11 relative) with margin. rstd and dw are fp32
// whatever the storage; dw sums N products of two rounded inputs, each within fp32 of the cpu
// twin's, so its norm-wise error stays at the fp32 level (10x kTolF32 for N = 300 rows).
TYPED_TEST(CudaLlamaOps, RmsnormMatchesCpu) {
  using T = TypeParam;
  const std::string ty = type_name<T>();
  const uint32_t seed = per_type<T>(1u, 11u, 21u);
  // C = 96: 128-bit packs; C = 70: scalar path; N = 300: two-stage dw with scratch.
  const int shapes[][2] = {{37, 96}, {19, 70}, {300, 40}, {8, 1600}};
  for (const auto& sh : shapes) {
    const int N = sh[0], C = sh[1];
    const size_t NC = (size_t)N * C;
    const std::string what = " N=" + std::to_string(N) + " C=" + std::to_string(C);
    auto x = round_to<T>(randu(NC, seed, -2.0f, 3.0f)),
         w = round_to<T>(randu(C, seed + 1, 0.5f, 1.5f));
    auto g = round_to<T>(randu(NC, seed + 2)), dx0 = round_to<T>(randu(NC, seed + 3));
    auto dw0 = randu(C, seed + 4);
    std::vector<float> y(NC), rstd(N), dx = dx0, dw = dw0;
    cpu::rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
    cpu::rmsnorm_backward(dx.data(), dw.data(), g.data(), x.data(), w.data(), rstd.data(), N, C);
    DevBuf<T> hX(convert<T>(x)), hW(convert<T>(w)), hG(convert<T>(g)), hY(NC);
    DevBuf<float> dRstd(N);
    cuda::rmsnorm_forward(hY.get(), dRstd.get(), hX.get(), hW.get(), N, C, kEps, nullptr);
    EXPECT_REL_LE(to_f32(hY.download()), y, type_tol<T>(), ty + " rmsnorm out" + what);
    EXPECT_REL_LE(dRstd.download(), rstd, kTolF32, ty + " rmsnorm rstd (fp32)" + what);
    std::vector<std::vector<float>> runs;
    for (int run = 0; run < 2; run++) {
      DevBuf<T> hDx(convert<T>(dx0));
      DevBuf<float> dDw(dw0);
      cuda::rmsnorm_backward(hDx.get(), dDw.get(), hG.get(), hX.get(), hW.get(), dRstd.get(), N, C,
                             nullptr, test_scratch());
      EXPECT_REL_LE(to_f32(hDx.download()), dx, type_tol<T>(), ty + " rmsnorm dinp (acc)" + what);
      runs.push_back(dDw.download());
    }
    EXPECT_REL_LE(runs[0], dw, kTolF32 * 10, ty + " rmsnorm dw (acc, fp32)" + what);
    EXPECT_TRUE(bitwise_equal(runs[0], runs[1])) << ty << " rmsnorm dw run to run" << what;
    DevBuf<float> dDw1(dw0);  // one-stage (no scratch): same contract
    DevBuf<T> hDx1(convert<T>(dx0));
    cuda::rmsnorm_backward(hDx1.get(), dDw1.get(), hG.get(), hX.get(), hW.get(), dRstd.get(), N, C,
                           nullptr);
    EXPECT_REL_LE(dDw1.download(), dw, kTolF32 * 10, ty + " rmsnorm dw one-stage" + what);
  }
}

// Elementwise: a handful of fp32 operations per output; low precision rounds each output once.
TYPED_TEST(CudaLlamaOps, SwigluMatchesCpu) {
  using T = TypeParam;
  const std::string ty = type_name<T>();
  const uint32_t seed = per_type<T>(31u, 41u, 51u);
  const int shapes[][2] = {{37, 96}, {19, 70}, {3, 1}};
  for (const auto& sh : shapes) {
    const int N = sh[0], F = sh[1];
    const std::string what = " N=" + std::to_string(N) + " F=" + std::to_string(F);
    auto gu = round_to<T>(randu((size_t)N * 2 * F, seed, -6.0f, 6.0f));
    auto g = round_to<T>(randu((size_t)N * F, seed + 1));
    std::vector<float> out((size_t)N * F), dgu(gu.size());
    cpu::swiglu_forward(out.data(), gu.data(), N, F);
    cpu::swiglu_backward(dgu.data(), g.data(), gu.data(), N, F);
    DevBuf<T> hGu(convert<T>(gu)), hG(convert<T>(g)), hOut((size_t)N * F), hDgu(gu.size());
    cuda::swiglu_forward(hOut.get(), hGu.get(), N, F, nullptr);
    cuda::swiglu_backward(hDgu.get(), hG.get(), hGu.get(), N, F, nullptr);
    EXPECT_REL_LE(to_f32(hOut.download()), out, type_tol<T>(), ty + " swiglu out" + what);
    EXPECT_REL_LE(to_f32(hDgu.download()), dgu, type_tol<T>(), ty + " swiglu dgu" + what);
  }
}

// RoPE: tables from the device's double cos/sin are within one fp32 rounding of the cpu twin's
// (2^-23 relative); each rotated value is two products and a sum (a few u in fp32), so the fp32
// tolerance holds; low precision rounds each rotated value once. v stays bitwise.
TYPED_TEST(CudaLlamaOps, RopeMatchesCpu) {
  using T = TypeParam;
  const std::string ty = type_name<T>();
  const uint32_t seed = per_type<T>(61u, 71u, 81u);
  struct Shape {
    int B, T, NH, NKV, D;
  };
  const Shape shapes[] = {{2, 37, 5, 1, 64}, {1, 19, 4, 2, 128}, {2, 7, 3, 3, 6}};
  for (const Shape& s : shapes) {
    const std::string what = " T=" + std::to_string(s.T) + " NH=" + std::to_string(s.NH) +
                             " NKV=" + std::to_string(s.NKV) + " D=" + std::to_string(s.D);
    const int row = (s.NH + 2 * s.NKV) * s.D, half = s.D / 2;
    const size_t n = (size_t)s.B * s.T * row;
    std::vector<float> c((size_t)s.T * half), sn((size_t)s.T * half);
    cpu::rope_table(c.data(), sn.data(), s.T, s.D, 500000.0f);
    DevBuf<float> dC(c.size()), dS(sn.size());
    cuda::rope_table(dC.get(), dS.get(), s.T, s.D, 500000.0f, nullptr);
    const auto gc = dC.download(), gs = dS.download();
    size_t bad = 0;
    for (size_t i = 0; i < c.size(); i++)
      bad += !(std::fabs(gc[i] - c[i]) <= 1.2e-7 * std::fabs(c[i]) + 1e-30) +
             !(std::fabs(gs[i] - sn[i]) <= 1.2e-7 * std::fabs(sn[i]) + 1e-30);
    EXPECT_EQ(bad, 0u) << ty << " rope tables" << what;
    for (bool fwd : {true, false}) {
      auto x = round_to<T>(randu(n, seed + s.D + fwd, -2.0f, 2.0f));
      auto want = x;
      if (fwd)
        cpu::rope_forward(want.data(), c.data(), sn.data(), s.B, s.T, s.NH, s.NKV, s.D);
      else
        cpu::rope_backward(want.data(), c.data(), sn.data(), s.B, s.T, s.NH, s.NKV, s.D);
      DevBuf<T> hX(convert<T>(x));
      if (fwd)
        cuda::rope_forward(hX.get(), dC.get(), dS.get(), s.B, s.T, s.NH, s.NKV, s.D, nullptr);
      else
        cuda::rope_backward(hX.get(), dC.get(), dS.get(), s.B, s.T, s.NH, s.NKV, s.D, nullptr);
      const auto got = to_f32(hX.download());
      EXPECT_REL_LE(got, want, type_tol<T>(),
                    ty + (fwd ? " rope forward" : " rope backward") + what);
      size_t v_changed = 0;
      for (size_t r = 0; r < (size_t)s.B * s.T; r++)
        for (int j = (s.NH + s.NKV) * s.D; j < row; j++)
          v_changed += got[r * row + j] != x[r * row + j];
      EXPECT_EQ(v_changed, 0u) << ty << " rope leaves v" << what;
    }
  }
}

}  // namespace
}  // namespace loom::cudatest
