// validate() on parallel.cp (context parallelism): each broken rule is one line naming the keys,
// the values and the fix.
#include <gtest/gtest.h>

#include "config/config.h"
#include "tests/config/validate_util.h"

namespace {

using loom::Config;
using loom::test::base;
using loom::test::expect_one;
using loom::test::reports;

// seq_len 32 over cp 2 (4 chunks of 8): valid on 2 ranks.
Config context_parallel() {
  Config c = base();
  c.parallel.cp = 2;
  return c;
}

TEST(ConfigValidateCp, ContextParallelIsValid) {
  EXPECT_TRUE(loom::validate(context_parallel(), 2).empty());
  Config c = context_parallel();
  c.parallel.cp = 4;
  c.parallel.tp = 2;
  c.parallel.sequence_parallel = true;
  c.parallel.order = "tp-cp-dp-pp";
  EXPECT_TRUE(loom::validate(c, 16).empty());  // dp = 16 / (tp*cp) = 2
  c.parallel.order = "cp-pp-dp-tp";
  EXPECT_TRUE(loom::validate(c, 8).empty());
}

TEST(ConfigValidateCp, AtLeastOne) {
  Config c = base();
  c.parallel.cp = 0;
  expect_one(c, 1, {"parallel.cp: 0 must be >= 1"});
}

TEST(ConfigValidateCp, SequenceSplitsIntoTwoChunksPerRank) {
  Config c = context_parallel();
  c.model.seq_len = 30;  // not a multiple of 2*cp = 4
  expect_one(c, 2, {"model.seq_len: 30 is not divisible by 2 x parallel.cp = 4", "28 or 32"});
  c.model.seq_len = 32;
  c.parallel.cp = 3;  // 32 is not a multiple of 6
  expect_one(c, 3, {"model.seq_len: 32", "2 x parallel.cp = 6", "30 or 36"});
}

TEST(ConfigValidateCp, RanksCountTheContextAxis) {
  Config c = context_parallel();
  c.parallel.tp = 2;
  c.parallel.dp = 2;
  expect_one(c, 4, {"tp=2 x pp=1 x cp=2 x dp=2 = 8 ranks but the job has 4"});
  c.parallel.dp = 0;
  expect_one(c, 6, {"tp=2 x pp=1 x cp=2 = 4 ranks per model replica does not divide the job's 6"});
}

TEST(ConfigValidateCp, OrderMayNameCp) {
  Config c = context_parallel();
  c.parallel.order = "tp-cp-dp-cp";
  expect_one(c, 2, {"parallel.order: 'tp-cp-dp-cp'", "tp-cp-dp-pp"});
  c.parallel.order = "tp-dp";
  expect_one(c, 2, {"parallel.order: 'tp-dp'"});
}

TEST(ConfigValidateCp, SequenceParallelRowsAreThisRanksShare) {
  Config c = context_parallel();  // 32 / 2 = 16 rows per micro-batch of one sequence
  c.parallel.tp = 32;
  c.model.n_head = 32;
  c.parallel.sequence_parallel = true;
  EXPECT_TRUE(reports(
      c, 64, {"parallel.sequence_parallel", "/ cp=2 = 16 token rows", "do not split over tp=32"}));
}

}  // namespace
