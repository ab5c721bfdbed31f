// cuda twins of bias_residual (fp32, bf16 and fp16; packed and scalar paths) vs the cpu twin.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/bias_residual.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom::cudatest {
namespace bias_residual {

class CudaBiasResidual : public CudaTest {};

// C = 256: 128-bit packs; C = 129: scalar path (a pack would cross rows).
struct Shape {
  int N, C;
};
const Shape kShapes[] = {{64, 256}, {37, 129}};

std::string name(const Shape& s) {
  return "N=" + std::to_string(s.N) + " C=" + std::to_string(s.C);
}

// The same fp32 additions in the same order as the cpu twin: bitwise equal.
TEST_F(CudaBiasResidual, Fp32BitwiseEqualToCpu) {
  for (const Shape& s : kShapes) {
    const size_t n = size_t(s.N) * s.C;
    auto r = randu(n, 1, -50.0f, 50.0f), p = randu(n, 2), b = randu(s.C, 3);
    std::vector<float> want(n);
    cpu::bias_residual(want.data(), r.data(), p.data(), b.data(), s.N, s.C);
    DevBuf<float> dr(r), dp(p), db(b), dout(n);
    cuda::bias_residual(dout.get(), dr.get(), dp.get(), db.get(), s.N, s.C, nullptr);
    EXPECT_TRUE(bitwise_equal(dout.download(), want)) << name(s);
    cuda::bias_residual(dr.get(), dr.get(), dp.get(), db.get(), s.N, s.C, nullptr);  // in place
    EXPECT_TRUE(bitwise_equal(dr.download(), want)) << name(s) << " out aliasing resid";
  }
}

// Pointers one element past a 16-byte boundary take the scalar path with C = 256.
TEST_F(CudaBiasResidual, Fp32UnalignedPointers) {
  const Shape s = kShapes[0];
  const size_t n = size_t(s.N) * s.C;
  auto r = randu(n, 4), p = randu(n, 5), b = randu(s.C, 6);
  std::vector<float> want(n);
  cpu::bias_residual(want.data(), r.data(), p.data(), b.data(), s.N, s.C);
  std::vector<float> r1(1, 0.0f), p1(1, 0.0f), b1(1, 0.0f);
  r1.insert(r1.end(), r.begin(), r.end());
  p1.insert(p1.end(), p.begin(), p.end());
  b1.insert(b1.end(), b.begin(), b.end());
  // The output starts as a sentinel: the element before the unaligned start stays untouched.
  DevBuf<float> dr(r1), dp(p1), db(b1), dout(std::vector<float>(n + 1, -7.0f));
  cuda::bias_residual(dout.get() + 1, dr.get() + 1, dp.get() + 1, db.get() + 1, s.N, s.C, nullptr);
  const auto got = dout.download();
  EXPECT_EQ(got[0], -7.0f) << "written before the output's start";
  EXPECT_TRUE(bitwise_equal(std::vector<float>(got.begin() + 1, got.end()), want));
}

template <typename T>
class CudaBiasResidualLowp : public CudaTest {};
TYPED_TEST_SUITE(CudaBiasResidualLowp, LowpTypes, TypeNames);

// bf16 and fp16 storage: inputs rounded to the type (the cpu twin sees the same values), the
// fp32 result rounded once, so the output is bitwise the host rounding of the cpu result.
TYPED_TEST(CudaBiasResidualLowp, IsOneRoundingOfTheCpuResult) {
  using T = TypeParam;
  const uint32_t seed = per_type<T>(7u, 10u);
  for (const Shape& s : kShapes) {
    const size_t n = size_t(s.N) * s.C;
    auto r = round_to<T>(randu(n, seed, -8.0f, 8.0f)), p = round_to<T>(randu(n, seed + 1));
    auto b = round_to<T>(randu(s.C, seed + 2));
    std::vector<float> want(n);
    cpu::bias_residual(want.data(), r.data(), p.data(), b.data(), s.N, s.C);
    DevBuf<T> dr(convert<T>(r)), dp(convert<T>(p)), db(convert<T>(b)), dout(n);
    cuda::bias_residual(dout.get(), dr.get(), dp.get(), db.get(), s.N, s.C, nullptr);
    EXPECT_TRUE(bitwise_equal(to_f32(dout.download()), round_to<T>(want)))
        << type_name<T>() << " " << name(s);
    cuda::bias_residual(dp.get(), dr.get(), dp.get(), db.get(), s.N, s.C, nullptr);  // in place
    EXPECT_TRUE(bitwise_equal(to_f32(dp.download()), round_to<T>(want)))
        << type_name<T>() << " " << name(s) << " out aliasing partial";
  }
}

// fp16 overflow is not clamped: a residual-stream value beyond 65504 is stored as inf, for the
// loss scaler's non-finite gradient check to see.
TEST_F(CudaBiasResidual, F16OverflowBecomesInf) {
  const size_t n = 16;  // one row of 16
  std::vector<float> r(n, 60000.0f), p(n, 6000.0f), b(n, 0.0f);
  p[3] = -6016.0f;  // 53984 = 1687 * 32: finite and an fp16 value (54000 is not: it rounds)
  DevBuf<f16> dr(convert<f16>(r)), dp(convert<f16>(p)), db(convert<f16>(b)), dout(n);
  cuda::bias_residual(dout.get(), dr.get(), dp.get(), db.get(), 1, int(n), nullptr);
  const auto y = to_f32(dout.download());
  for (size_t i = 0; i < n; i++) {
    if (i == 3) {
      EXPECT_EQ(y[i], 53984.0f);
    } else {
      EXPECT_TRUE(std::isinf(y[i]) && y[i] > 0) << "element " << i << " = " << y[i];
    }
  }
}

}  // namespace bias_residual
}  // namespace loom::cudatest
