// The two-stage column reductions (bias and LayerNorm weight gradients) vs the cpu twins, in
// fp32, bf16 and fp16, with and without scratch, and bitwise run to run.
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "tests/cuda/cuda_scratch.h"
#include "tests/cuda/cuda_test_util.h"
#ifdef LOOM_CUDA_EMULATE
#include "loom_emu/emulator.h"
#endif

namespace loom::cudatest {
namespace reductions {

class CudaReductions : public CudaTest {};

struct Shape {
  int N, C;
};
// Tails everywhere: C not a multiple of the 32 columns of a block, N not a multiple of the 16
// threads down a column nor of the chunk; N = 64 is the largest single-chunk N, 65 the smallest
// two-stage one; C = 768 (GPT-2) with N = 1100 has 22 chunks of 50 rows.
const Shape kShapes[] = {{1, 1}, {7, 33}, {64, 40}, {65, 40}, {300, 97}, {1000, 42}, {1100, 768}};

std::string name(const Shape& s, const char* dtype, bool scratch) {
  return std::string(dtype) + " N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) +
         (scratch ? " two-stage" : " one-stage");
}

// Error model: both twins add the same N + 1 fp32 numbers (the initial value and N terms, each
// term computed in fp32 from identical inputs with at most 3 roundings) in different orders; any
// order is within N u of the exact sum's magnitude sum S = |d0| + sum |term|, and each term
// within 3 u |term|, so |cuda - cpu| <= 2 (N + 3) u S per element, whatever the storage dtype.
void expect_within_model(const std::vector<float>& got, const std::vector<float>& want,
                         const std::vector<double>& mag, int N, const std::string& what) {
  const double u = std::ldexp(1.0, -24);
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t c = 0; c < got.size(); c++) {
    const double bound = 2.0 * (N + 3) * u * mag[c];
    const double err = std::fabs((double)got[c] - (double)want[c]);
    if (!(err <= bound) && bad++ < 3)
      ADD_FAILURE() << what << ": column " << c << " differs by " << err << " > " << bound;
  }
  EXPECT_EQ(bad, 0) << what;
}

// Kernels launched since `before` (emulation build: two-stage means two launches).
#ifdef LOOM_CUDA_EMULATE
uint64_t launches_since(uint64_t before) { return loom_emu::stats().kernels - before; }
uint64_t launches_now() { return loom_emu::stats().kernels; }
#endif

template <typename T>
void check_bias(const Shape& s, const char* dtype) {
  const int N = s.N, OC = s.C;
  const auto g = round_to<T>(randu((size_t)N * OC, 1, -2.0f, 2.0f));
  const auto d0 = randu(OC, 2);
  std::vector<float> want = d0, dw(OC, 0.0f), inp(N, 0.0f), w(OC, 0.0f);  // IC = 1
  cpu::matmul_backward(nullptr, dw.data(), want.data(), g.data(), inp.data(), w.data(), N, 1, OC);
  std::vector<double> mag(OC);
  for (int c = 0; c < OC; c++) {
    mag[c] = std::fabs(d0[c]);
    for (int n = 0; n < N; n++) mag[c] += std::fabs(g[(size_t)n * OC + c]);
  }
  DevBuf<T> dG(convert<T>(g));
  for (bool scratch : {true, false}) {
    const std::string what = "bias_backward " + name(s, dtype, scratch);
    const cuda::Workspace ws = scratch ? test_scratch() : cuda::Workspace{};
    std::vector<std::vector<float>> runs;
    for (int run = 0; run < 2; run++) {
      DevBuf<float> dDb(d0);
#ifdef LOOM_CUDA_EMULATE
      const uint64_t k0 = launches_now();
#endif
      cuda::bias_backward(dDb.get(), dG.get(), N, OC, nullptr, ws);
#ifdef LOOM_CUDA_EMULATE
      EXPECT_EQ(launches_since(k0), scratch && N > 64 ? 2u : 1u) << what;
#endif
      runs.push_back(dDb.download());
    }
    expect_within_model(runs[0], want, mag, N, what);
    EXPECT_TRUE(bitwise_equal(runs[0], runs[1])) << what << ": run to run";
  }
}

template <typename T>
void check_layernorm(const Shape& s, const char* dtype) {
  const int N = s.N, C = s.C;
  const size_t NC = (size_t)N * C;
  const auto x = round_to<T>(randu(NC, 3, -2.0f, 3.0f));
  const auto w = round_to<T>(randu(C, 4, 0.5f, 1.5f));
  const auto b = round_to<T>(randu(C, 5));
  const auto g = round_to<T>(randu(NC, 6));
  const auto dw0 = randu(C, 7), db0 = randu(C, 8);
  std::vector<float> y(NC), mean(N), rstd(N), dx(NC, 0.0f), dw = dw0, db = db0;
  cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  cpu::layernorm_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
  std::vector<double> mag_w(C), mag_b(C);
  for (int c = 0; c < C; c++) {
    mag_w[c] = std::fabs(dw0[c]);
    mag_b[c] = std::fabs(db0[c]);
    for (int n = 0; n < N; n++) {
      const size_t i = (size_t)n * C + c;
      mag_w[c] += std::fabs((double)g[i] * (((double)x[i] - mean[n]) * rstd[n]));
      mag_b[c] += std::fabs(g[i]);
    }
  }
  // mean and rstd from the cpu forward feed both twins: the comparison is of the reductions.
  DevBuf<T> dX(convert<T>(x)), dW(convert<T>(w)), dG(convert<T>(g)), dDx(NC);
  DevBuf<float> dMean(mean), dRstd(rstd);
  for (bool scratch : {true, false}) {
    const std::string what = "layernorm_backward " + name(s, dtype, scratch);
    const cuda::Workspace ws = scratch ? test_scratch() : cuda::Workspace{};
    std::vector<std::vector<float>> rw, rb;
    for (int run = 0; run < 2; run++) {
      DevBuf<float> dDw(dw0), dDb(db0);
      cuda::layernorm_backward(dDx.get(), dDw.get(), dDb.get(), dG.get(), dX.get(), dW.get(),
                               dMean.get(), dRstd.get(), N, C, nullptr, ws);
      rw.push_back(dDw.download());
      rb.push_back(dDb.download());
    }
    expect_within_model(rw[0], dw, mag_w, N, what + " dw");
    expect_within_model(rb[0], db, mag_b, N, what + " db");
    EXPECT_TRUE(bitwise_equal(rw[0], rw[1])) << what << " dw: run to run";
    EXPECT_TRUE(bitwise_equal(rb[0], rb[1])) << what << " db: run to run";
  }
}

TEST_F(CudaReductions, BiasBackwardMatchesCpu) {
  for (const Shape& s : kShapes) {
    check_bias<float>(s, "fp32");
    check_bias<bf16>(s, "bf16");
    check_bias<f16>(s, "fp16");
  }
}

TEST_F(CudaReductions, LayerNormWeightGradientsMatchCpu) {
  for (const Shape& s : kShapes) {
    check_layernorm<float>(s, "fp32");
    check_layernorm<bf16>(s, "bf16");
    check_layernorm<f16>(s, "fp16");
  }
}

// The bound can fail: one wrong row (as a chunk summed twice or skipped would give) exceeds it.
TEST_F(CudaReductions, ModelBoundCatchesAMissingRow) {
  const int N = 300, OC = 97;
  const auto g = randu((size_t)N * OC, 1, 0.5f, 2.0f);
  std::vector<float> want(OC, 0.0f), dw(OC, 0.0f), inp(N, 0.0f), w(OC, 0.0f);
  cpu::matmul_backward(nullptr, dw.data(), want.data(), g.data(), inp.data(), w.data(), N, 1, OC);
  std::vector<double> mag(OC, 0.0);
  for (int c = 0; c < OC; c++)
    for (int n = 0; n < N; n++) mag[c] += std::fabs(g[(size_t)n * OC + c]);
  DevBuf<float> dG(g), dDb(OC);
  dDb.upload(std::vector<float>(OC, 0.0f));
  cuda::bias_backward(dDb.get(), dG.get(), N - 1, OC, nullptr, test_scratch());  // row N-1 lost
  const auto got = dDb.download();
  const double u = std::ldexp(1.0, -24);
  for (int c = 0; c < OC; c++)
    EXPECT_GT(std::fabs((double)got[c] - want[c]), 2.0 * (N + 3) * u * mag[c]) << c;
}

}  // namespace reductions
}  // namespace loom::cudatest
