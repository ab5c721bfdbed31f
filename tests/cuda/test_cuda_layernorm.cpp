// cuda twins of LayerNorm (forward, backward) vs the cpu twin.
#include <string>
#include <vector>

#include "kernels/layernorm.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom::cudatest {
namespace {

class CudaLayerNorm : public CudaTest {};

struct Shape {
  int N, C;
};
// C = 96: 128-bit packs for fp32 and bf16; C = 70: the scalar path; C = 1600: long rows.
const Shape kShapes[] = {{37, 96}, {19, 70}, {8, 1600}};

std::string name(const Shape& s) {
  return "N=" + std::to_string(s.N) + " C=" + std::to_string(s.C);
}

TEST_F(CudaLayerNorm, Fp32ForwardBackwardMatchCpu) {
  for (const Shape& s : kShapes) {
    const int N = s.N, C = s.C;
    const size_t NC = (size_t)N * C;
    auto x = randu(NC, 1, -2.0f, 3.0f), w = randu(C, 2, 0.5f, 1.5f), b = randu(C, 3);
    auto g = randu(NC, 4), dx0 = randu(NC, 5), dw0 = randu(C, 6), db0 = randu(C, 7);
    std::vector<float> y(NC), mean(N), rstd(N), dx = dx0, dw = dw0, db = db0;
    cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    cpu::layernorm_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(),
                            mean.data(), rstd.data(), N, C);

    DevBuf<float> dX(x), dW(w), dB(b), dY(NC), dMean(N), dRstd(N), dG(g), dDx(dx0), dDw(dw0),
        dDb(db0);
    cuda::layernorm_forward(dY.get(), dMean.get(), dRstd.get(), dX.get(), dW.get(), dB.get(), N, C,
                            nullptr);
    cuda::layernorm_backward(dDx.get(), dDw.get(), dDb.get(), dG.get(), dX.get(), dW.get(),
                             dMean.get(), dRstd.get(), N, C, nullptr);
    EXPECT_REL_LE(dY.download(), y, kTolF32, "forward out " + name(s));
    EXPECT_REL_LE(dMean.download(), mean, kTolF32, "forward mean " + name(s));
    EXPECT_REL_LE(dRstd.download(), rstd, kTolF32, "forward rstd " + name(s));
    EXPECT_REL_LE(dDx.download(), dx, kTolF32, "backward dinp (accumulated) " + name(s));
    EXPECT_REL_LE(dDw.download(), dw, kTolF32, "backward dw (accumulated) " + name(s));
    EXPECT_REL_LE(dDb.download(), db, kTolF32, "backward db (accumulated) " + name(s));

    // The backward is deterministic: a second run from the same state gives the same bits.
    DevBuf<float> dDw2(dw0), dDb2(db0), dDx2(dx0);
    cuda::layernorm_backward(dDx2.get(), dDw2.get(), dDb2.get(), dG.get(), dX.get(), dW.get(),
                             dMean.get(), dRstd.get(), N, C, nullptr);
    DevBuf<float> dDw3(dw0), dDb3(db0);
    cuda::layernorm_backward(dDx2.get(), dDw3.get(), dDb3.get(), dG.get(), dX.get(), dW.get(),
                             dMean.get(), dRstd.get(), N, C, nullptr);
    EXPECT_TRUE(bitwise_equal(dDw2.download(), dDw3.download())) << "dw deterministic";
    EXPECT_TRUE(bitwise_equal(dDb2.download(), dDb3.download())) << "db deterministic";
  }
}

template <typename T>
class CudaLayerNormLowp : public CudaTest {};
TYPED_TEST_SUITE(CudaLayerNormLowp, LowpTypes, TypeNames);

// bf16 and fp16: inputs rounded to the type (the cpu twin sees the same values), statistics and
// weight gradients fp32. dinp is checked written from zero and accumulated onto what it holds.
TYPED_TEST(CudaLayerNormLowp, MatchesCpuOnRoundedInputs) {
  using T = TypeParam;
  const std::string ty = type_name<T>();
  const uint32_t seed = per_type<T>(12u, 22u);
  const double tol = type_tol<T>();
  for (const Shape& s : kShapes) {
    const int N = s.N, C = s.C;
    const size_t NC = (size_t)N * C;
    auto x = round_to<T>(randu(NC, seed, -2.0f, 3.0f));
    auto w = round_to<T>(randu(C, seed + 1, 0.5f, 1.5f)), b = round_to<T>(randu(C, seed + 2));
    auto g = round_to<T>(randu(NC, seed + 3));
    std::vector<float> y(NC), mean(N), rstd(N);
    cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    DevBuf<T> hX(convert<T>(x)), hW(convert<T>(w)), hB(convert<T>(b)), hG(convert<T>(g)), hY(NC);
    DevBuf<float> dMean(N), dRstd(N);
    cuda::layernorm_forward(hY.get(), dMean.get(), dRstd.get(), hX.get(), hW.get(), hB.get(), N, C,
                            nullptr);
    EXPECT_REL_LE(to_f32(hY.download()), y, tol, ty + " forward " + name(s));
    EXPECT_REL_LE(dMean.download(), mean, kTolF32, ty + " forward mean (fp32) " + name(s));
    EXPECT_REL_LE(dRstd.download(), rstd, kTolF32, ty + " forward rstd (fp32) " + name(s));

    for (bool accumulate : {false, true}) {
      const std::string what = std::string(accumulate ? " (accumulated) " : " ") + name(s);
      const auto dx0 = accumulate ? round_to<T>(randu(NC, seed + 6)) : std::vector<float>(NC, 0.0f);
      std::vector<float> dx = dx0, dw(C, 0.0f), db(C, 0.0f);
      cpu::layernorm_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(),
                              mean.data(), rstd.data(), N, C);
      DevBuf<T> hDx(convert<T>(dx0));
      DevBuf<float> dDw(std::vector<float>(C, 0.0f)), dDb(std::vector<float>(C, 0.0f));
      cuda::layernorm_backward(hDx.get(), dDw.get(), dDb.get(), hG.get(), hX.get(), hW.get(),
                               dMean.get(), dRstd.get(), N, C, nullptr);
      EXPECT_REL_LE(to_f32(hDx.download()), dx, tol, ty + " dinp" + what);
      EXPECT_REL_LE(dDw.download(), dw, kTolF32 * 10, ty + " dw (fp32 accumulation)" + what);
      EXPECT_REL_LE(dDb.download(), db, kTolF32, ty + " db (fp32 accumulation)" + what);
    }
  }
}

}  // namespace
}  // namespace loom::cudatest
