// cuda twins of the GEMMs (cuBLASLt, row-major) and the linear layer vs the cpu twin (OpenBLAS).
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/gelu.h"
#include "kernels/matmul.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom::cudatest {
namespace {

class CudaMatmul : public CudaTest {};

// cuBLASLt's GELU epilogue may evaluate tanh with a hardware approximation: its output is held
// to 1e-3 (the pre-activation it saves, to the fp32 tolerance).
constexpr double kTolGeluEpilogue = 1e-3;

template <typename T>
class CudaGemm : public CudaTest {};
TYPED_TEST_SUITE(CudaGemm, Fp32AndLowpTypes, TypeNames);

// Every type from the same fp32 inputs rounded to it (the cpu twin on the rounded values);
// outputs of the type, and for bf16 and fp16 inputs (fp32 accumulation) also fp32 outputs.
TYPED_TEST(CudaGemm, AllTransposes) {
  using T = TypeParam;
  const std::string ty = type_name<T>();
  cuda::GemmHandle h;
  const int M = 33, N = 48, K = 40;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const std::string what = std::string("ta=") + (ta ? "T" : "N") + " tb=" + (tb ? "T" : "N");
      // Leading dimensions larger than the rows (strided views), multiples of 8 elements so
      // that bf16 rows stay 16-byte aligned for the tensor-core kernels.
      auto pad = [](int x) { return (x + 7) / 8 * 8 + 8; };
      const int lda = pad(ta ? M : K), ldb = pad(tb ? K : N), ldc = pad(N);
      const size_t sa = (size_t)(ta ? K : M) * lda, sb = (size_t)(tb ? N : K) * ldb;
      const size_t sc = (size_t)M * ldc;
      auto A = round_to<T>(randu(sa, 1)), B = round_to<T>(randu(sb, 2));
      auto C0 = round_to<T>(randu(sc, 3));
      std::vector<float> want = C0;
      cpu::gemm(ta, tb, M, N, K, 0.7f, A.data(), lda, B.data(), ldb, 0.5f, want.data(), ldc);
      DevBuf<T> dA(convert<T>(A)), dB(convert<T>(B)), dC(convert<T>(C0));
      cuda::gemm(h, ta, tb, M, N, K, 0.7f, dA.get(), lda, dB.get(), ldb, 0.5f, dC.get(), ldc,
                 nullptr);
      EXPECT_REL_LE(to_f32(dC.download()), want, type_tol<T>(), ty + " gemm " + what);
      if constexpr (!std::is_same_v<T, float>) {
        DevBuf<float> fC(C0);
        cuda::gemm(h, ta, tb, M, N, K, 0.7f, dA.get(), lda, dB.get(), ldb, 0.5f, fC.get(), ldc,
                   nullptr);
        EXPECT_REL_LE(fC.download(), want, kTolF32, ty + " -> fp32 gemm " + what);
      }
    }
  }
}

TEST_F(CudaMatmul, LinearForwardBackwardFp32) {
  cuda::GemmHandle h;
  const int N = 50, IC = 64, OC = 96;
  auto x = randu((size_t)N * IC, 4), w = randu((size_t)IC * OC, 5), b = randu(OC, 6);
  auto g = randu((size_t)N * OC, 7), dw0 = randu((size_t)IC * OC, 8), db0 = randu(OC, 9);
  DevBuf<float> dX(x), dW(w), dB(b), dY((size_t)N * OC), dPre((size_t)N * OC), dG(g),
      dDx((size_t)N * IC), dDw(dw0), dDb(db0);
  for (bool with_bias : {true, false}) {
    std::vector<float> y((size_t)N * OC);
    cpu::matmul_forward(y.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, N, IC, OC);
    cuda::matmul_forward(h, dY.get(), dX.get(), dW.get(), with_bias ? dB.get() : nullptr, N, IC, OC,
                         nullptr, nullptr);
    EXPECT_REL_LE(dY.download(), y, kTolF32,
                  std::string("forward bias=") + (with_bias ? "1" : "0"));
    // Fused GELU: pre_gelu holds the linear output, out its GELU.
    std::vector<float> act(y.size());
    cpu::gelu_forward(act.data(), y.data(), y.size());
    cuda::matmul_forward(h, dY.get(), dX.get(), dW.get(), with_bias ? dB.get() : nullptr, N, IC, OC,
                         dPre.get(), nullptr);
    EXPECT_REL_LE(dPre.download(), y, kTolF32, "gelu epilogue pre-activation");
    EXPECT_REL_LE(dY.download(), act, kTolGeluEpilogue, "gelu epilogue output");
  }
  std::vector<float> dx((size_t)N * IC), dw = dw0, db = db0;
  cpu::matmul_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), N, IC, OC);
  cuda::matmul_backward(h, dDx.get(), dDw.get(), dDb.get(), dG.get(), dX.get(), dW.get(), N, IC, OC,
                        nullptr);
  EXPECT_REL_LE(dDx.download(), dx, kTolF32, "dinp");
  EXPECT_REL_LE(dDw.download(), dw, kTolF32, "dw (accumulated)");
  EXPECT_REL_LE(dDb.download(), db, kTolF32, "dbias (accumulated)");
  // dinp may be skipped; dbias alone through bias_backward.
  DevBuf<float> dDb2(db0);
  cuda::bias_backward(dDb2.get(), dG.get(), N, OC, nullptr);
  EXPECT_REL_LE(dDb2.download(), db, kTolF32, "bias_backward");
}

template <typename T>
class CudaLinearLowp : public CudaTest {};
TYPED_TEST_SUITE(CudaLinearLowp, LowpTypes, TypeNames);

// bf16 and fp16 activations (inputs rounded, the cpu twin on the rounded values), weight and
// bias gradients fp32.
TYPED_TEST(CudaLinearLowp, ForwardBackward) {
  using T = TypeParam;
  const std::string ty = type_name<T>();
  const uint32_t seed = per_type<T>(10u, 14u);
  const double tol = type_tol<T>();
  cuda::GemmHandle h;
  const int N = 50, IC = 64, OC = 96;
  auto x = round_to<T>(randu((size_t)N * IC, seed));
  auto w = round_to<T>(randu((size_t)IC * OC, seed + 1));
  auto b = round_to<T>(randu(OC, seed + 2)), g = round_to<T>(randu((size_t)N * OC, seed + 3));
  std::vector<float> y((size_t)N * OC), act((size_t)N * OC), dx((size_t)N * IC);
  std::vector<float> dw((size_t)IC * OC, 0.0f), db(OC, 0.0f);
  cpu::matmul_forward(y.data(), x.data(), w.data(), b.data(), N, IC, OC);
  cpu::gelu_forward(act.data(), y.data(), y.size());
  cpu::matmul_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), N, IC, OC);
  // Outputs start as NaN: an element the GEMM leaves unwritten fails the comparison (and the
  // buffers are initialised for compute-sanitizer's initcheck, which does not see the Hopper
  // cuBLASLt kernels' bulk-copy stores).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  DevBuf<T> hX(convert<T>(x)), hW(convert<T>(w)), hB(convert<T>(b)), hG(convert<T>(g)),
      hY(convert<T>(std::vector<float>(y.size(), nan))),
      hPre(convert<T>(std::vector<float>(y.size(), nan))),
      hDx(convert<T>(std::vector<float>(dx.size(), nan)));
  // The device accumulators start from zero, as dw and db did before the cpu backward above.
  DevBuf<float> dDw(std::vector<float>(dw.size(), 0.0f)), dDb(std::vector<float>(OC, 0.0f));
  for (bool with_bias : {true, false}) {
    std::vector<float> yb((size_t)N * OC);
    cpu::matmul_forward(yb.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, N, IC, OC);
    cuda::matmul_forward(h, hY.get(), hX.get(), hW.get(), with_bias ? hB.get() : nullptr, N, IC, OC,
                         nullptr, nullptr);
    EXPECT_REL_LE(to_f32(hY.download()), yb, tol, ty + " forward bias=" + (with_bias ? "1" : "0"));
  }
  cuda::matmul_forward(h, hY.get(), hX.get(), hW.get(), hB.get(), N, IC, OC, hPre.get(), nullptr);
  EXPECT_REL_LE(to_f32(hPre.download()), y, tol, ty + " gelu epilogue pre-activation");
  EXPECT_REL_LE(to_f32(hY.download()), act, tol, ty + " gelu epilogue output");
  cuda::matmul_backward(h, hDx.get(), dDw.get(), dDb.get(), hG.get(), hX.get(), hW.get(), N, IC, OC,
                        nullptr);
  EXPECT_REL_LE(to_f32(hDx.download()), dx, tol, ty + " dinp");
  EXPECT_REL_LE(dDw.download(), dw, kTolF32, ty + " inputs, fp32 dw");
  EXPECT_REL_LE(dDb.download(), db, kTolF32, ty + " inputs, fp32 dbias");
  DevBuf<float> dDb2(std::vector<float>(OC, 0.0f));
  cuda::bias_backward(dDb2.get(), hG.get(), N, OC, nullptr);
  EXPECT_REL_LE(dDb2.download(), db, kTolF32, ty + " bias_backward");
}

}  // namespace
}  // namespace loom::cudatest
