// cuda twins of the elementwise kernels (GELU, add_inplace, casts, AdamW, global norm) vs the
// cpu twins.
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/add_inplace.h"
#include "kernels/gelu.h"
#include "kernels/global_norm.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom::cudatest {
namespace {

class CudaElementwise : public CudaTest {};

// Runs everywhere (no skip): without a GPU the probe answers false with a reason, never throws.
TEST(CudaDevice, AvailabilityIsAnsweredWithAReason) {
  bool ok = false;
  ASSERT_NO_THROW(ok = cuda::cuda_available());
  if (ok) {
    EXPECT_TRUE(cuda::cuda_unavailable_reason().empty());
    std::cout << "[ info ] " << cuda::device_description(0) << "\n";
  } else {
    EXPECT_FALSE(cuda::cuda_unavailable_reason().empty());
    std::cout << "[ info ] " << cuda::cuda_unavailable_reason() << "\n";
  }
}

// Sizes: a multiple of 8 (128-bit packs) and an odd one (scalar path).
const size_t kSizes[] = {4096, 1001};

template <typename T>
class CudaGelu : public CudaTest {};
TYPED_TEST_SUITE(CudaGelu, Fp32AndLowpTypes, TypeNames);

// Inputs rounded to the storage type (the cpu twin sees the same values); the backward also in
// place (dinp aliasing dout).
TYPED_TEST(CudaGelu, MatchesCpu) {
  using T = TypeParam;
  const std::string ty = type_name<T>();
  const uint32_t seed = per_type<T>(1u, 3u, 23u);
  const double tol = type_tol<T>();
  for (size_t n : kSizes) {
    auto x = round_to<T>(randu(n, seed, -6.0f, 6.0f));
    auto g = round_to<T>(randu(n, seed + 1));
    std::vector<float> want(n), dwant(n);
    cpu::gelu_forward(want.data(), x.data(), n);
    cpu::gelu_backward(dwant.data(), x.data(), g.data(), n);
    DevBuf<T> dx(convert<T>(x)), dg(convert<T>(g)), dy(n), ddx(n);
    cuda::gelu_forward(dy.get(), dx.get(), n, nullptr);
    cuda::gelu_backward(ddx.get(), dx.get(), dg.get(), n, nullptr);
    const std::string what = ty + " n=" + std::to_string(n);
    EXPECT_REL_LE(to_f32(dy.download()), want, tol, "gelu_forward " + what);
    EXPECT_REL_LE(to_f32(ddx.download()), dwant, tol, "gelu_backward " + what);
    cuda::gelu_backward(dg.get(), dx.get(), dg.get(), n, nullptr);  // dinp aliasing dout
    EXPECT_REL_LE(to_f32(dg.download()), dwant, tol, "gelu_backward in place " + what);
  }
}

// fp32 only (it accumulates fp32 gradient pieces): the same additions as the cpu twin, bitwise.
TEST_F(CudaElementwise, AddInplaceMatchesCpu) {
  for (size_t n : kSizes) {
    auto a = randu(n, 5), b = randu(n, 6);
    std::vector<float> acc = a;
    cpu::add_inplace(acc.data(), b.data(), n);
    DevBuf<float> da(a), db(b);
    cuda::add_inplace(da.get(), db.get(), n, nullptr);
    EXPECT_TRUE(bitwise_equal(da.download(), acc)) << "add_inplace n=" << n;
  }
}

TEST_F(CudaElementwise, CastsRoundToNearestEven) {
  for (size_t n : kSizes) {
    auto x = randu(n, 7, -100.0f, 100.0f);
    x[0] = 1.00390625f;  // exactly halfway between two bf16 values: rounds to even (1.0)
    DevBuf<float> dx(x), back(n);
    DevBuf<bf16> h(n);
    cuda::cast_f32_to_bf16(h.get(), dx.get(), n, nullptr);
    cuda::cast_bf16_to_f32(back.get(), h.get(), n, nullptr);
    const auto got = h.download();
    const auto want = convert<bf16>(x);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += got[i].bits != want[i].bits;
    EXPECT_EQ(bad, 0u) << "cast_f32_to_bf16 n=" << n;
    EXPECT_EQ(cuda::bf16_to_float(got[0]), 1.0f);
    EXPECT_TRUE(bitwise_equal(back.download(), to_f32(want))) << "cast_bf16_to_f32";
  }
}

TEST_F(CudaElementwise, CastsF16RoundToNearestEvenAndOverflowToInf) {
  for (size_t n : kSizes) {
    auto x = randu(n, 17, -100.0f, 100.0f);
    // Specials at the front (the 4-wide path) and at the end (the scalar tail when n % 4 != 0).
    const float specials[] = {1.00048828125f,         // 1 + 2^-11: halfway, rounds to even (1.0)
                              1.00146484375f,         // 1 + 3 * 2^-11: halfway, rounds up
                              65504.0f,               // largest finite
                              65520.0f,               // midpoint to 2^16: inf
                              -1e5f,                  // -inf
                              std::ldexp(1.0f, -25),  // half the smallest subnormal: 0
                              std::ldexp(3.0f, -25),  // 1.5 subnormal units: 2 units
                              1e-7f,                  // subnormal
                              -0.0f};
    const size_t ns = sizeof(specials) / sizeof(specials[0]);
    for (size_t k = 0; k < ns; k++) x[k] = specials[k];
    x[n - 1] = 65520.0f;
    x[n - 2] = std::ldexp(3.0f, -25);
    x[n - 3] = std::nanf("");
    DevBuf<float> dx(x), back(n);
    DevBuf<f16> h(n);
    cuda::cast_f32_to_f16(h.get(), dx.get(), n, nullptr);
    cuda::cast_f16_to_f32(back.get(), h.get(), n, nullptr);
    const auto got = h.download();
    const auto want = convert<f16>(x);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
      if (i == n - 3) continue;  // NaN: checked below
      bad += got[i].bits != want[i].bits;
    }
    EXPECT_EQ(bad, 0u) << "cast_f32_to_f16 n=" << n;
    EXPECT_EQ(cuda::f16_to_float(got[0]), 1.0f);
    EXPECT_EQ(got[3].bits, 0x7c00) << "65520 -> +inf";
    EXPECT_EQ(got[4].bits, 0xfc00) << "-1e5 -> -inf";
    EXPECT_EQ(got[n - 1].bits, 0x7c00) << "65520 -> +inf (tail)";
    EXPECT_EQ(got[n - 2].bits, 0x0002) << "subnormal tie to even (tail)";
    EXPECT_EQ(got[n - 3].bits & 0x7c00, 0x7c00) << "NaN stays NaN";
    EXPECT_NE(got[n - 3].bits & 0x03ff, 0) << "NaN stays NaN";
    auto gb = back.download();
    auto wb = to_f32(got);  // every fp16 value (NaN included) converts to float exactly
    EXPECT_TRUE(std::isnan(gb[n - 3]));
    gb[n - 3] = wb[n - 3] = 0.0f;
    EXPECT_TRUE(bitwise_equal(gb, wb)) << "cast_f16_to_f32";
  }
}

template <typename T>
class CudaAdamW : public CudaTest {};
TYPED_TEST_SUITE(CudaAdamW, LowpTypes, TypeNames);

// fp32 master weights and moments against the cpu twin over three steps; the compute copy (bf16
// or fp16) is the one rounding of the fp32 weights; without a copy (nullptr) the fp32 update is
// the same, bit for bit.
TYPED_TEST(CudaAdamW, MatchesCpuOverStepsWithAndWithoutCopy) {
  using T = TypeParam;
  const std::string ty = type_name<T>();
  const uint32_t seed = per_type<T>(8u, 18u), grad_seed = per_type<T>(100u, 200u);
  for (size_t n : kSizes) {
    auto p = randu(n, seed), m = randu(n, seed + 1, 0.0f, 0.01f);
    auto v = randu(n, seed + 2, 0.0f, 0.01f);
    DevBuf<float> dp(p), dm(m), dv(v), dg(n), dp2(p), dm2(m), dv2(v);
    DevBuf<T> copy(n);
    for (int step = 1; step <= 3; step++) {
      auto g = randu(n, grad_seed + step);
      const cpu::AdamWParams hp{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 0.5f};
      cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), n, hp);
      dg.upload(g);
      cuda::adamw_update(dp.get(), dg.get(), dm.get(), dv.get(), n, hp, copy.get(), nullptr);
      cuda::adamw_update(dp2.get(), dg.get(), dm2.get(), dv2.get(), n, hp, nullptr, nullptr);
    }
    const auto gp = dp.download();
    EXPECT_REL_LE(gp, p, 1e-6, "adamw params (" + ty + " copy)");
    EXPECT_REL_LE(dm.download(), m, 1e-6, "adamw m");
    EXPECT_REL_LE(dv.download(), v, 1e-6, "adamw v");
    EXPECT_TRUE(bitwise_equal(to_f32(copy.download()), round_to<T>(gp))) << ty << " copy of params";
    EXPECT_TRUE(bitwise_equal(dp2.download(), gp)) << "no copy: same fp32 update";
    EXPECT_TRUE(bitwise_equal(dm2.download(), dm.download())) << "no copy: same m";
    EXPECT_TRUE(bitwise_equal(dv2.download(), dv.download())) << "no copy: same v";
  }
}

TEST_F(CudaElementwise, SumSquaresDeterministicAndExact) {
  const size_t n1 = 1 << 20, n2 = 1001;
  auto x1 = randu(n1, 11), x2 = randu(n2, 12);
  const double want = cpu::sum_squares(x1.data(), n1) + cpu::sum_squares(x2.data(), n2);
  DevBuf<float> d1(x1), d2(x2);
  DevBuf<double> acc(1), partials(cuda::kSumSquaresPartials);
  std::vector<double> results;
  for (int rep = 0; rep < 2; rep++) {
    acc.upload({0.0});
    cuda::sum_squares(acc.get(), d1.get(), n1, partials.get(), nullptr);
    cuda::sum_squares(acc.get(), d2.get(), n2, partials.get(), nullptr);
    results.push_back(acc.download()[0]);
  }
  EXPECT_NEAR(results[0], want, 1e-10 * want) << "double accumulation";
  EXPECT_EQ(results[0], results[1]) << "two runs must give the same bits";
}

TEST_F(CudaElementwise, ScaleInplaceMatchesCpu) {
  for (size_t n : kSizes) {
    auto x = randu(n, 13);
    DevBuf<float> dx(x);
    cpu::scale_inplace(x.data(), 0.37f, n);
    cuda::scale_inplace(dx.get(), 0.37f, n, nullptr);
    EXPECT_TRUE(bitwise_equal(dx.download(), x)) << "scale_inplace n=" << n;
  }
}

}  // namespace
}  // namespace loom::cudatest
