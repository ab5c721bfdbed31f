// Blending proportions, Megatron split bounds and the epoch shuffle, against direct references.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <set>

#include "core/check.h"
#include "data/blend.h"
#include "data/shuffle.h"
#include "data/split.h"

using namespace loom;

TEST(Blend, FirstPeriodEqualsPlainGreedy) {
  // Reference: Megatron's greedy rule run directly, without the periodic table.
  std::vector<double> w = {5, 3, 2};
  BlendIndex b(w, 1000);
  std::vector<int64_t> count(3, 0);
  for (int64_t i = 0; i < 1000; ++i) {
    int best = 0;
    double be = -1e300;
    for (int d = 0; d < 3; ++d) {
      double e = w[d] / 10.0 * double(i + 1) - double(count[d]);
      if (e > be) be = e, best = d;
    }
    auto [d, k] = b.locate(i);
    ASSERT_EQ(d, best) << "sample " << i;
    ASSERT_EQ(k, count[best]) << "sample " << i;
    ++count[best];
  }
  EXPECT_EQ(b.per_period(0), 500);
  EXPECT_EQ(b.per_period(1), 300);
  EXPECT_EQ(b.per_period(2), 200);
}

TEST(Blend, ProportionsWithinStatedTolerance) {
  // Tolerance from blend.h: |count_d - w_d n| <= 1 + n / P for every prefix length n.
  std::vector<double> w = {0.7, 0.2, 0.1 / 3, 0.2 / 3};
  BlendIndex b(w);
  const int64_t P = b.period();
  std::array<int64_t, 4> count{}, next{};
  const int64_t n_max = 3 * P + 12345;
  for (int64_t i = 0; i < n_max; ++i) {
    auto [d, k] = b.locate(i);
    ASSERT_EQ(k, next[size_t(d)]++) << "each dataset's samples are drawn in order, once";
    ++count[size_t(d)];
    if ((i + 1) % 997 == 0 || i + 1 == n_max) {
      for (size_t e = 0; e < w.size(); ++e)
        ASSERT_LE(std::fabs(double(count[e]) - b.weights()[e] * double(i + 1)), 1.0 + double(i + 1) / double(P))
            << "dataset " << e << " after " << i + 1 << " samples";
    }
  }
}

TEST(Blend, SingleDatasetIsIdentity) {
  BlendIndex b({3.0});
  EXPECT_EQ(b.locate(123456789).first, 0);
  EXPECT_EQ(b.locate(123456789).second, 123456789);
}

TEST(Split, ParseAndNormalize) {
  auto w = parse_split("969,30,1", "data.split");
  EXPECT_DOUBLE_EQ(w[0], 0.969);
  EXPECT_DOUBLE_EQ(w[1], 0.030);
  EXPECT_DOUBLE_EQ(w[2], 0.001);
  w = parse_split("90/10", "data.split");
  EXPECT_DOUBLE_EQ(w[0], 0.9);
  EXPECT_DOUBLE_EQ(w[2], 0.0);
  for (const char* bad : {"", "a,b", "1,-1", "0,0,0", "1,2,3,4", "1,,2"}) {
    try {
      parse_split(bad, "data.split");
      ADD_FAILURE() << "accepted \"" << bad << "\"";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("data.split"), std::string::npos) << e.what();
    }
  }
}

TEST(Split, BoundsFollowMegatron) {
  // Values worked by hand from Megatron's _get_split_indices (Python round: half to even).
  using B = std::array<int64_t, 4>;
  EXPECT_EQ(split_bounds(parse_split("969,30,1", "s"), 1000), (B{0, 969, 999, 1000}));
  EXPECT_EQ(split_bounds(parse_split("969,30,1", "s"), 1189), (B{0, 1152, 1188, 1189}));
  EXPECT_EQ(split_bounds(parse_split("1,1", "s"), 10), (B{0, 5, 10, 10}));
  // 2.5 and 2.5 round to 2 and 2: [0,2,4,4], excess -1 shifts every later bound up by one.
  EXPECT_EQ(split_bounds(parse_split("1,1", "s"), 5), (B{0, 3, 5, 5}));
  EXPECT_EQ(split_bounds(parse_split("1", "s"), 7), (B{0, 7, 7, 7}));
  // Degenerate: Megatron would give b[1] = -1 here; bounds are kept ordered.
  EXPECT_EQ(split_bounds(parse_split("0,1,1", "s"), 3), (B{0, 0, 1, 3}));
}

TEST(Shuffle, IsAPermutationPerEpochAndDeterministic) {
  for (uint64_t n : {1ull, 2ull, 3ull, 5ull, 17ull, 1000ull, 65537ull}) {
    EpochShuffle s(42, 0, n), again(42, 0, n), other_seed(43, 0, n), other_stream(42, 1, n);
    for (uint64_t epoch : {0ull, 1ull, 7ull}) {
      std::vector<char> seen(n, 0);
      uint64_t same_as_next_epoch = 0, same_seed = 0, same_stream = 0;
      for (uint64_t j = 0; j < n; ++j) {
        uint64_t p = s.permute(epoch, j);
        ASSERT_LT(p, n);
        ASSERT_FALSE(seen[p]) << "n=" << n << " epoch " << epoch << ": " << p << " twice";
        seen[p] = 1;
        ASSERT_EQ(p, again.permute(epoch, j));
        same_as_next_epoch += p == s.permute(epoch + 1, j);
        same_seed += p == other_seed.permute(epoch, j);
        same_stream += p == other_stream.permute(epoch, j);
      }
      if (n >= 1000) {  // a fixed point fraction near 1/n is expected; far from all-equal
        EXPECT_LT(same_as_next_epoch, n / 50) << "epochs must reshuffle";
        EXPECT_LT(same_seed, n / 50);
        EXPECT_LT(same_stream, n / 50);
      }
    }
  }
}

TEST(Shuffle, RoughlyUniformPositions) {
  // Where item 0 lands over 4000 epochs of n = 10: each slot expects 400; a chi-square with 9
  // degrees of freedom above 40 has probability < 1e-5 for a uniform shuffle.
  const uint64_t n = 10, epochs = 4000;
  EpochShuffle s(7, 3, n);
  std::vector<int> hits(n, 0);
  for (uint64_t e = 0; e < epochs; ++e)
    for (uint64_t j = 0; j < n; ++j)
      if (s.permute(e, j) == 0) ++hits[j];
  double chi2 = 0, expect = double(epochs) / double(n);
  for (int h : hits) chi2 += (h - expect) * (h - expect) / expect;
  EXPECT_LT(chi2, 40.0);
}
