// Host fp16 conversions (kernels/cuda_device.h) against an independent frexp/ldexp reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "kernels/cuda_device.h"

namespace {

using loom::cuda::f16;
using loom::cuda::f16_from_float;
using loom::cuda::f16_to_float;

// The value of an fp16 bit pattern from its definition: (-1)^s * 2^(e-15) * (1 + m/1024) for
// 0 < e < 31, (-1)^s * 2^-14 * m/1024 for e == 0, inf or NaN for e == 31.
double ref_decode(uint16_t bits) {
  const int s = bits >> 15, e = (bits >> 10) & 31, m = bits & 1023;
  double v;
  if (e == 31) {
    v = m != 0 ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    v = std::ldexp((double)m, -24);
  } else {
    v = std::ldexp((double)(1024 + m), e - 25);
  }
  return s ? -v : v;
}

// fp32 -> fp16 bits through double arithmetic: count the value in units of the fp16 spacing of
// its binade (2^-24 in the subnormal range), round that count with nearbyint (ties to even in
// the default rounding mode), then encode the rounded value. NaN gives CUDA's canonical 0x7fff.
uint16_t ref_encode(float f) {
  if (std::isnan(f)) return 0x7fff;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs((double)f);
  if (std::isinf(a)) return sign | 0x7c00;
  int E = 0;
  std::frexp(a, &E);                        // a in [2^(E-1), 2^E) (E = 0 for a = 0)
  const int q = std::max(E - 1 - 10, -24);  // exponent of the spacing: 11 significant bits
  const double n = std::nearbyint(std::ldexp(a, -q));  // exact: a has 24 bits, q is a power
  const double r = std::ldexp(n, q);
  if (r > 65504.0) return sign | 0x7c00;  // rounded beyond the largest finite value
  if (r < std::ldexp(1.0, -14)) return sign | (uint16_t)std::ldexp(r, 24);  // subnormal or 0
  int E2 = 0;
  std::frexp(r, &E2);  // r may have moved up a binade when rounding carried
  const int exponent = E2 - 1;
  const int mant = (int)std::ldexp(r, 10 - exponent) - 1024;
  return sign | (uint16_t)((exponent + 15) << 10) | (uint16_t)mant;
}

bool is_nan_bits(uint16_t b) { return (b & 0x7c00) == 0x7c00 && (b & 0x3ff) != 0; }

TEST(F16Host, AllBitPatternsDecodeExactly) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  int bad = 0;
  for (uint32_t b = 0; b < 65536; b++) {
    const float got = f16_to_float(f16{(uint16_t)b});
    const double want = ref_decode((uint16_t)b);
    if (std::isnan(want)) {
      bad += !std::isnan(got);
    } else {
      bad += (double)got != want || std::signbit(got) != std::signbit(want);
    }
    if (bad == 1) ADD_FAILURE() << "first mismatch at bits 0x" << std::hex << b;
    if (bad) break;
  }
  EXPECT_EQ(bad, 0);
}

TEST(F16Host, AllBitPatternsRoundTripThroughFloat) {
  int bad = 0;
  for (uint32_t b = 0; b < 65536; b++) {
    const uint16_t back = f16_from_float(f16_to_float(f16{(uint16_t)b})).bits;
    const uint16_t want = is_nan_bits((uint16_t)b) ? 0x7fff : (uint16_t)b;  // NaN: canonical
    if (back != want && bad++ == 0)
      ADD_FAILURE() << "0x" << std::hex << b << " came back as 0x" << back;
  }
  EXPECT_EQ(bad, 0);
}

// Between adjacent fp16 values lo < hi (same sign), the exact midpoint (representable in float:
// 12 significant bits) rounds to the one with an even mantissa; one float ulp either side rounds
// to the nearer one. Covers every subnormal, normal and binade boundary, and the overflow
// threshold 65520 (midpoint of 65504 and 65536 = 2^16, the first value beyond the range).
TEST(F16Host, MidpointsRoundToEvenAndNeighboursToNearest) {
  int bad = 0;
  for (uint32_t b = 0; b < 0x7c00; b++) {
    const double lo = ref_decode((uint16_t)b);
    const double hi = b + 1 < 0x7c00 ? ref_decode((uint16_t)(b + 1)) : 65536.0;
    const uint16_t even = (b & 1) ? (uint16_t)(b + 1) : (uint16_t)b;  // 0x7c00 (inf) above max
    for (int s = 0; s < 2; s++) {
      const float sg = s ? -1.0f : 1.0f;
      const uint16_t sb = s ? 0x8000 : 0;
      const float mid = sg * (float)((lo + hi) / 2);
      ASSERT_EQ((double)std::fabs(mid), (lo + hi) / 2) << "midpoint not exact in float";
      const float below = std::nextafter(mid, sg * 0.0f);
      const float above = std::nextafter(mid, sg * INFINITY);
      const uint16_t got_mid = f16_from_float(mid).bits;
      const uint16_t got_below = f16_from_float(below).bits;
      const uint16_t got_above = f16_from_float(above).bits;
      const bool ok =
          got_mid == (sb | even) && got_below == (sb | b) && got_above == (sb | (uint16_t)(b + 1));
      if (!ok && bad++ == 0)
        ADD_FAILURE() << "between 0x" << std::hex << (sb | b) << " and 0x" << (sb | (b + 1))
                      << ": mid 0x" << got_mid << " below 0x" << got_below << " above 0x"
                      << got_above;
    }
  }
  EXPECT_EQ(bad, 0);
}

// Float bit patterns swept with a stride through everything that lands in fp16's range (and
// beyond it on both sides), plus uniformly random 32-bit patterns (NaNs, huge and tiny values).
TEST(F16Host, MatchesReferenceOnSweptAndRandomFloats) {
  auto check = [](uint32_t u, int& bad) {
    float f;
    std::memcpy(&f, &u, sizeof(f));
    const uint16_t got = f16_from_float(f).bits, want = ref_encode(f);
    if (got != want && bad++ == 0)
      ADD_FAILURE() << "float bits 0x" << std::hex << u << " (" << f << "): got 0x" << got
                    << ", reference 0x" << want;
  };
  int bad = 0;
  // 2^-26 .. 2^17, both signs; the odd stride visits every residue of the low 13 bits.
  for (uint32_t u = 0x32800000u; u < 0x48000000u; u += 1031u) {
    check(u, bad);
    check(u | 0x80000000u, bad);
  }
  std::mt19937 gen(20240611);
  for (int i = 0; i < 2000000; i++) check((uint32_t)gen(), bad);
  EXPECT_EQ(bad, 0);
}

TEST(F16Host, KnownValues) {
  auto bits = [](float f) { return f16_from_float(f).bits; };
  EXPECT_EQ(bits(0.0f), 0x0000);
  EXPECT_EQ(bits(-0.0f), 0x8000);
  EXPECT_EQ(bits(1.0f), 0x3c00);
  EXPECT_EQ(bits(-2.0f), 0xc000);
  EXPECT_EQ(bits(0.1f), 0x2e66);
  EXPECT_EQ(bits(65504.0f), 0x7bff);   // largest finite
  EXPECT_EQ(bits(65519.99f), 0x7bff);  // below the midpoint to 2^16
  EXPECT_EQ(bits(65520.0f), 0x7c00);   // the midpoint rounds to even: inf
  EXPECT_EQ(bits(-1e6f), 0xfc00);
  EXPECT_EQ(bits(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(bits(INFINITY), 0x7c00);
  EXPECT_EQ(bits(-INFINITY), 0xfc00);
  EXPECT_EQ(bits(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(bits(std::ldexp(1.0f, -25)), 0x0000);  // half of it: ties to even (0)
  EXPECT_EQ(bits(-std::ldexp(1.0f, -25)), 0x8000);
  EXPECT_EQ(bits(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(bits(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units: ties to even (2)
  EXPECT_EQ(bits(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(bits(std::nanf("")), 0x7fff);
  EXPECT_EQ(bits(-std::nanf("")), 0x7fff);
  EXPECT_EQ(f16_to_float(f16{0x7bff}), 65504.0f);
  EXPECT_EQ(f16_to_float(f16{0x0001}), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_float(f16{0x03ff}), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_TRUE(std::isnan(f16_to_float(f16{0x7e00})));
  EXPECT_TRUE(std::isinf(f16_to_float(f16{0xfc00})) && f16_to_float(f16{0xfc00}) < 0);
}

}  // namespace
