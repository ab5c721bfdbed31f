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

std::string name(const Shape& s) { return "N=" + std::to_string(s.N) + " C=" + std::to_string(s.C); }

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

TEST_F(CudaLayerNorm, Bf16MatchesCpuOnRoundedInputs) {
  for (const Shape& s : kShapes) {
    const int N = s.N, C = s.C;
    const size_t NC = (size_t)N * C;
    auto x = round_bf16(randu(NC, 12, -2.0f, 3.0f)), w = round_bf16(randu(C, 13, 0.5f, 1.5f));
    auto b = round_bf16(randu(C, 14)), g = round_bf16(randu(NC, 15));
    std::vector<float> y(NC), mean(N), rstd(N), dx(NC, 0.0f), dw(C, 0.0f), db(C, 0.0f);
    cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    cpu::layernorm_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(),
                            mean.data(), rstd.data(), N, C);
    DevBuf<bf16> hX(to_bf16(x)), hW(to_bf16(w)), hB(to_bf16(b)), hG(to_bf16(g)), hY(NC),
        hDx(to_bf16(std::vector<float>(NC, 0.0f)));
    DevBuf<float> dMean(N), dRstd(N), dDw(std::vector<float>(C, 0.0f)),
        dDb(std::vector<float>(C, 0.0f));
    cuda::layernorm_forward(hY.get(), dMean.get(), dRstd.get(), hX.get(), hW.get(), hB.get(), N, C,
                            nullptr);
    cuda::layernorm_backward(hDx.get(), dDw.get(), dDb.get(), hG.get(), hX.get(), hW.get(),
                             dMean.get(), dRstd.get(), N, C, nullptr);
    EXPECT_REL_LE(to_f32(hY.download()), y, kTolBF16, "bf16 forward " + name(s));
    EXPECT_REL_LE(dRstd.download(), rstd, kTolF32, "bf16 forward rstd (fp32) " + name(s));
    EXPECT_REL_LE(to_f32(hDx.download()), dx, kTolBF16, "bf16 dinp " + name(s));
    EXPECT_REL_LE(dDw.download(), dw, kTolF32 * 10, "bf16 dw (fp32 accumulation) " + name(s));
    EXPECT_REL_LE(dDb.download(), db, kTolF32, "bf16 db (fp32 accumulation) " + name(s));
  }
}

// fp16 twin of the bf16 test: inputs rounded to fp16, statistics and weight gradients fp32.
TEST_F(CudaLayerNorm, F16MatchesCpuOnRoundedInputs) {
  for (const Shape& s : kShapes) {
    const int N = s.N, C = s.C;
    const size_t NC = (size_t)N * C;
    auto x = round_f16(randu(NC, 22, -2.0f, 3.0f)), w = round_f16(randu(C, 23, 0.5f, 1.5f));
    auto b = round_f16(randu(C, 24)), g = round_f16(randu(NC, 25));
    auto dx0 = round_f16(randu(NC, 28));  // dinp accumulates into what it holds
    std::vector<float> y(NC), mean(N), rstd(N), dx = dx0, dw(C, 0.0f), db(C, 0.0f);
    cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    cpu::layernorm_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(),
                            mean.data(), rstd.data(), N, C);
    DevBuf<f16> hX(to_f16(x)), hW(to_f16(w)), hB(to_f16(b)), hG(to_f16(g)), hY(NC),
        hDx(to_f16(dx0));
    DevBuf<float> dMean(N), dRstd(N), dDw(std::vector<float>(C, 0.0f)),
        dDb(std::vector<float>(C, 0.0f));
    cuda::layernorm_forward(hY.get(), dMean.get(), dRstd.get(), hX.get(), hW.get(), hB.get(), N, C,
                            nullptr);
    cuda::layernorm_backward(hDx.get(), dDw.get(), dDb.get(), hG.get(), hX.get(), hW.get(),
                             dMean.get(), dRstd.get(), N, C, nullptr);
    EXPECT_REL_LE(to_f32(hY.download()), y, kTolF16, "fp16 forward " + name(s));
    EXPECT_REL_LE(dMean.download(), mean, kTolF32, "fp16 forward mean (fp32) " + name(s));
    EXPECT_REL_LE(dRstd.download(), rstd, kTolF32, "fp16 forward rstd (fp32) " + name(s));
    EXPECT_REL_LE(to_f32(hDx.download()), dx, kTolF16, "fp16 dinp (accumulated) " + name(s));
    EXPECT_REL_LE(dDw.download(), dw, kTolF32 * 10, "fp16 dw (fp32 accumulation) " + name(s));
    EXPECT_REL_LE(dDb.download(), db, kTolF32, "fp16 db (fp32 accumulation) " + name(s));
  }
}

}  // namespace
}  // namespace loom::cudatest
