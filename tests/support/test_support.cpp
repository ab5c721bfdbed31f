// The shared test helpers: bitwise equality, NaN as the worst difference wherever it stands,
// the key-bias exclusion of max_abs_diff, and the seeded random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/support/compare.h"
#include "tests/support/random.h"
#include "tests/support/tolerance.h"

namespace loom::test {
namespace {

TEST(Compare, BitwiseEqualComparesBitsNotValues) {
  EXPECT_TRUE(bitwise_equal({}, {}));
  EXPECT_TRUE(bitwise_equal({1.0f, -2.5f}, {1.0f, -2.5f}));
  EXPECT_FALSE(bitwise_equal({0.0f}, {-0.0f}));  // equal values, other bits
  EXPECT_FALSE(bitwise_equal({1.0f}, {std::nextafter(1.0f, 2.0f)}));
  EXPECT_FALSE(bitwise_equal({1.0f}, {1.0f, 1.0f}));
  const float nan = std::nanf("");
  EXPECT_TRUE(bitwise_equal({nan}, {nan}));  // the same bits, though NaN != NaN
}

TEST(Compare, ANaNStaysTheWorstWhateverFollows) {
  double worst = 0;
  for (double d : {0.1, 0.3, 0.2})
    if (worse(d, worst)) worst = d;
  EXPECT_EQ(worst, 0.3);
  worst = 0;
  for (double d : {0.1, std::numeric_limits<double>::quiet_NaN(), 0.3, 0.2})
    if (worse(d, worst)) worst = d;
  EXPECT_TRUE(std::isnan(worst)) << worst;
}

// A NaN in the first element of the first tensor, with finite differences after it in that
// tensor and in the next one, is the result.
TEST(Compare, WorstInStepsReportsANaNFollowedByFiniteDifferences) {
  std::map<std::string, CanonicalTensor> ref, got;
  ref["a.weight"].data = {1.0f, 2.0f, 3.0f};
  ref["b.weight"].data = {1.0f, 2.0f};
  got = ref;
  got["b.weight"].data[1] = 2.5f;
  WorstTensor w = worst_in_steps(got, ref, 32, 0.25);
  EXPECT_EQ(w.value, 2.0);  // 0.5 in units of 0.25
  EXPECT_EQ(w.name, "b.weight");
  got["a.weight"].data[0] = std::nanf("");
  w = worst_in_steps(got, ref, 32, 0.25);
  EXPECT_TRUE(std::isnan(w.value)) << w.value;
  EXPECT_EQ(w.name, "a.weight");
  w = worst_relative(got, ref, 32);
  EXPECT_TRUE(std::isnan(w.value)) << w.value;
  EXPECT_EQ(w.name, "a.weight");
}

TEST(Compare, MaxAbsDiffLeavesOutTheKeyBiasOnly) {
  // attn.c_attn.bias with d_model 2 holds [q0 q1 k0 k1 v0 v1]: elements 2 and 3 are left out.
  const std::vector<float> a = {0, 0, 5, 5, 0, 1}, b(6, 0.0f);
  EXPECT_EQ(max_abs_diff("h.0.attn.c_attn.bias", a.data(), b.data(), a.size(), 2), 1.0);
  EXPECT_EQ(max_abs_diff("h.0.attn.c_proj.bias", a.data(), b.data(), a.size(), 2), 5.0);
  const std::vector<double> nan_first = {NAN, 0, 0, 0, 0, 0};
  EXPECT_TRUE(std::isnan(max_abs_diff("x", a.data(), nan_first.data(), a.size(), 2)));
}

TEST(Random, SeededUniformValuesInRange) {
  const auto u = randu(1000, 7, -2.0f, 3.0f);
  EXPECT_TRUE(bitwise_equal(u, randu(1000, 7, -2.0f, 3.0f))) << "same seed, same values";
  EXPECT_FALSE(bitwise_equal(u, randu(1000, 8, -2.0f, 3.0f))) << "another seed";
  for (float x : u) ASSERT_TRUE(x >= -2.0f && x < 3.0f) << x;
  const auto ids = randi(1000, 7, 3);
  EXPECT_EQ(ids, randi(1000, 7, 3));
  for (int32_t t : ids) ASSERT_TRUE(t >= 0 && t < 7) << t;
  EXPECT_EQ(std::set<int32_t>(ids.begin(), ids.end()).size(), 7u) << "every id in 1000 draws";
}

}  // namespace
}  // namespace loom::test
