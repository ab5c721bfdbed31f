// Pure optimizer pieces: the LR schedule against hand-computed values, ZeRO shard ranges, and
// the dynamic loss scaler's skip/backoff/growth rule.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "optim/loss_scale.h"
#include "optim/lr_schedule.h"
#include "optim/zero.h"

namespace loom {
namespace {

TEST(LrSchedule, WarmupThenCosineLinearConstant) {
  OptimizerConfig o;
  o.lr = 1.0, o.min_lr = 0.1, o.warmup_steps = 10, o.schedule = "cosine";
  EXPECT_DOUBLE_EQ(lr_at(o, 1, 110), 0.1);    // 1/10 of the peak
  EXPECT_DOUBLE_EQ(lr_at(o, 10, 110), 1.0);   // end of warm-up
  EXPECT_NEAR(lr_at(o, 60, 110), 0.55, 1e-12);  // half-way: (1 + 0.1) / 2
  EXPECT_NEAR(lr_at(o, 110, 110), 0.1, 1e-12);
  EXPECT_NEAR(lr_at(o, 500, 110), 0.1, 1e-12);  // clamped after the decay
  o.schedule = "linear";
  EXPECT_NEAR(lr_at(o, 35, 110), 1.0 - 0.9 * 0.25, 1e-12);
  o.schedule = "constant";
  EXPECT_DOUBLE_EQ(lr_at(o, 77, 110), 1.0);
  o.schedule = "cosine", o.decay_steps = 60;  // decay ends before the last step
  EXPECT_NEAR(lr_at(o, 35, 110), 0.55, 1e-12);
  EXPECT_NEAR(lr_at(o, 100, 110), 0.1, 1e-12);
}

TEST(ZeroShards, ContiguousEqualShardsCoverTheBuffer) {
  for (size_t total : {1u, 7u, 61982u, 64u})
    for (int dp : {1, 2, 3, 4, 8}) {
      size_t S = zero_shard_size(total, dp), covered = 0;
      EXPECT_GE(S * size_t(dp), total);
      EXPECT_LT(S * size_t(dp) - total, size_t(dp));
      for (int r = 0; r < dp; ++r) {
        ShardRange s = zero_shard(total, dp, r);
        EXPECT_EQ(s.lo, std::min(total, size_t(r) * S));
        EXPECT_LE(s.hi - s.lo, S);
        covered += s.hi - s.lo;
      }
      EXPECT_EQ(covered, total) << total << " over " << dp;
    }
}

TEST(LossScaler, SkipsAndBacksOffOnOverflowGrowsAfterCleanInterval) {
  LossScaler s(1024.0f, 2.0f, 0.5f, 3);
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 1024.0f);
  EXPECT_TRUE(s.update(false));  // third clean step in a row: grow
  EXPECT_EQ(s.scale(), 2048.0f);
  EXPECT_FALSE(s.update(true));  // overflow: skip and halve, clean count restarts
  EXPECT_EQ(s.scale(), 1024.0f);
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 512.0f);
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 512.0f);
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 1024.0f);
  EXPECT_EQ(s.skipped(), 2);
}

TEST(LossScaler, FindsInfAndNan) {
  std::vector<float> x(1000, 1.0f);
  EXPECT_FALSE(has_nonfinite(x.data(), x.size()));
  x[777] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(has_nonfinite(x.data(), x.size()));
  x[777] = 0.0f;
  x[3] = std::nanf("");
  EXPECT_TRUE(has_nonfinite(x.data(), x.size()));
}

}  // namespace
}  // namespace loom
