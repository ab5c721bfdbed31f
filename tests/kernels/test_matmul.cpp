// matmul/gemm cpu twins against double references and central differences.
#include <limits>

#include "backend/blas_setup.h"
#include "kernel_test_util.h"
#include "kernels/matmul.h"

using namespace loom::ktest;

namespace matmul_test {

// out (N, OC) = inp (N, IC) @ w (IC, OC) + bias (OC), in double.
void ref_linear(std::vector<double>& out, const std::vector<double>& inp,
                const std::vector<double>& w, const std::vector<double>* bias, int N, int IC,
                int OC) {
  out.assign((size_t)N * OC, 0.0);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double s = bias ? (*bias)[o] : 0.0;
      for (int i = 0; i < IC; i++) s += inp[(size_t)n * IC + i] * w[(size_t)i * OC + o];
      out[(size_t)n * OC + o] = s;
    }
}

constexpr int N = 6, IC = 5, OC = 7;

// M = 1 takes the matrix-vector path (one decode row).
TEST(KernelMatmul, GemmAllTransposesAndLeadingDims) {
  const int Nn = 7, K = 3;
  const float alpha = 0.7f, beta = 0.3f;
  for (const int M : {5, 1})
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        // Stored shapes: op(A) is (M, K), so A is (K, M) when transposed; padded leading dims.
        const int arows = ta ? K : M, acols = ta ? M : K, lda = acols + 2;
        const int brows = tb ? Nn : K, bcols = tb ? K : Nn, ldb = bcols + 1;
        const int ldc = Nn + 3;
        auto A = randu((size_t)arows * lda, 1), Bm = randu((size_t)brows * ldb, 2);
        auto Cm = randu((size_t)M * ldc, 3);
        std::vector<double> want(Cm.begin(), Cm.end());
        for (int i = 0; i < M; i++)
          for (int j = 0; j < Nn; j++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) {
              const double a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
              const double b = tb ? Bm[(size_t)j * ldb + k] : Bm[(size_t)k * ldb + j];
              s += a * b;
            }
            want[(size_t)i * ldc + j] = alpha * s + beta * (double)Cm[(size_t)i * ldc + j];
          }
        loom::cpu::gemm(ta, tb, M, Nn, K, alpha, A.data(), lda, Bm.data(), ldb, beta, Cm.data(),
                        ldc);
        // The padding columns (j >= Nn) must be untouched: want holds their original values.
        expect_close(Cm, want, kFwdRtol, kFwdAtol,
                     "gemm M=" + std::to_string(M) + " ta=" + std::to_string(ta) +
                         " tb=" + std::to_string(tb));
      }
}

TEST(KernelMatmul, ForwardMatchesReference) {
  auto inp = randu((size_t)N * IC, 10), w = randu((size_t)IC * OC, 11), b = randu(OC, 12);
  auto di = to_double(inp), dw = to_double(w), db = to_double(b);
  std::vector<double> want;
  for (int with_bias = 0; with_bias < 2; with_bias++) {
    std::vector<float> out((size_t)N * OC, std::numeric_limits<float>::quiet_NaN());  // overwritten
    loom::cpu::matmul_forward(out.data(), inp.data(), w.data(), with_bias ? b.data() : nullptr, N,
                              IC, OC);
    ref_linear(want, di, dw, with_bias ? &db : nullptr, N, IC, OC);
    expect_close(out, want, kFwdRtol, kFwdAtol, with_bias ? "out (bias)" : "out (no bias)");
  }
}

TEST(KernelMatmul, BackwardMatchesFiniteDifferences) {
  auto inp = randu((size_t)N * IC, 20), w = randu((size_t)IC * OC, 21), b = randu(OC, 22);
  auto R = randu((size_t)N * OC, 23);  // L = sum(out * R), so dout = R
  std::vector<float> dinp((size_t)N * IC, std::numeric_limits<float>::quiet_NaN());
  std::vector<float> dw((size_t)IC * OC, 0.0f), db(OC, 0.0f);
  loom::cpu::matmul_backward(dinp.data(), dw.data(), db.data(), R.data(), inp.data(), w.data(), N,
                             IC, OC);
  auto di = to_double(inp), dwd = to_double(w), dbd = to_double(b), Rd = to_double(R);
  std::vector<double> out;
  auto L = [&]() {
    ref_linear(out, di, dwd, &dbd, N, IC, OC);
    return dot(out, Rd);
  };
  expect_close(dinp, fd_grad(di, L), kGradRtol, kGradAtol, "dinp");
  expect_close(dw, fd_grad(dwd, L), kGradRtol, kGradAtol, "dw");
  expect_close(db, fd_grad(dbd, L), kGradRtol, kGradAtol, "dbias");
}

TEST(KernelMatmul, BackwardAccumulatesDwDbiasOverwritesDinp) {
  auto inp = randu((size_t)N * IC, 30), w = randu((size_t)IC * OC, 31),
       g = randu((size_t)N * OC, 32);
  // Reference gradients from zero-initialised buffers.
  std::vector<float> dinp0((size_t)N * IC), dw0((size_t)IC * OC, 0.0f), db0(OC, 0.0f);
  loom::cpu::matmul_backward(dinp0.data(), dw0.data(), db0.data(), g.data(), inp.data(), w.data(),
                             N, IC, OC);
  // Pre-filled buffers: dw/dbias must become prefill + grad, dinp must be replaced.
  auto dw = randu((size_t)IC * OC, 33), db = randu(OC, 34);
  std::vector<float> dinp((size_t)N * IC, 1e30f);
  std::vector<double> want_dw(dw.size()), want_db(db.size());
  for (size_t i = 0; i < dw.size(); i++) want_dw[i] = (double)dw[i] + dw0[i];
  for (size_t i = 0; i < db.size(); i++) want_db[i] = (double)db[i] + db0[i];
  loom::cpu::matmul_backward(dinp.data(), dw.data(), db.data(), g.data(), inp.data(), w.data(), N,
                             IC, OC);
  EXPECT_TRUE(bitwise_equal(dinp, dinp0)) << "dinp must be overwritten, not accumulated";
  // One fp32 rounding of the sum: 1e-6 relative.
  expect_close(dw, want_dw, 1e-6, 1e-7, "dw accumulates");
  expect_close(db, want_db, 1e-6, 1e-7, "dbias accumulates");
  // nullptr dinp and dbias are skipped; dw still accumulates.
  std::vector<float> dw2((size_t)IC * OC, 0.0f);
  loom::cpu::matmul_backward(nullptr, dw2.data(), nullptr, g.data(), inp.data(), w.data(), N, IC,
                             OC);
  EXPECT_TRUE(bitwise_equal(dw2, dw0));
}

}  // namespace matmul_test

namespace loom {
namespace {

// ensure_fast_blas() re-executes /proc/self/exe; started as `ld.so PROGRAM ARGS` (the GPU
// bundle's wrappers) that is the loader, which would then run ARGS[0] as the program. It must
// recognise the loader by name and leave such a process alone.
TEST(BlasSetup, RecognisesTheDynamicLoader) {
  EXPECT_TRUE(is_dynamic_loader("/lib64/ld-linux-x86-64.so.2"));
  EXPECT_TRUE(is_dynamic_loader("/opt/b/lib/ld-linux-x86-64.so.2"));
  EXPECT_TRUE(is_dynamic_loader("ld-linux-aarch64.so.1"));
  EXPECT_TRUE(is_dynamic_loader("/lib/ld-musl-x86_64.so.1"));
  EXPECT_FALSE(is_dynamic_loader("/work/build/bin/loom"));
  EXPECT_FALSE(is_dynamic_loader("/usr/bin/ld"));             // the linker, not a loader
  EXPECT_FALSE(is_dynamic_loader("/opt/ld-tools/bin/loom"));  // only the file name counts
  EXPECT_FALSE(is_dynamic_loader(""));
}

}  // namespace
}  // namespace loom
