// validate() on parallel.virtual_stages (interleaved 1F1B): each broken rule is one line naming
// the keys, the values and the fix.
#include <gtest/gtest.h>

#include "config/config.h"
#include "tests/config/validate_util.h"

namespace {

using loom::Config;
using loom::test::base;
using loom::test::expect_one;
using loom::test::reports;

// Two stages of two chunks over 4 layers, 8 micro-batches: valid on 2 ranks.
Config interleaved() {
  Config c = base();
  c.parallel.pp = 2;
  c.parallel.virtual_stages = 2;
  return c;
}

TEST(ConfigValidateVpp, InterleavedIsValid) {
  EXPECT_TRUE(loom::validate(interleaved(), 2).empty());
  EXPECT_TRUE(loom::validate(interleaved(), 0).empty());
}

TEST(ConfigValidateVpp, AtLeastOne) {
  Config c = base();
  c.parallel.virtual_stages = 0;
  expect_one(c, 1, {"parallel.virtual_stages: 0 must be >= 1"});
}

TEST(ConfigValidateVpp, LayersSplitIntoEqualChunks) {
  Config c = interleaved();
  c.model.n_layer = 6;
  expect_one(c, 2,
             {"model.n_layer: 6 is not divisible by parallel.pp x parallel.virtual_stages = 4",
              "multiple of 4"});
}

TEST(ConfigValidateVpp, NeedsAPipeline) {
  Config c = interleaved();
  c.parallel.pp = 1;
  expect_one(c, 1, {"parallel.virtual_stages: 2", "parallel.pp > 1", "virtual_stages: 1"});
}

TEST(ConfigValidateVpp, NoStageLayers) {
  Config c = interleaved();
  c.parallel.stage_layers = {2, 2};
  expect_one(c, 2, {"parallel.virtual_stages: 2", "parallel.stage_layers", "remove"});
}

TEST(ConfigValidateVpp, MicroBatchesInGroupsOfStages) {
  Config c = interleaved();
  c.parallel.pp = 4;
  c.model.n_layer = 8;
  c.train.global_batch_size = 6;  // 6 micro-batches of 1 on dp 1
  expect_one(
      c, 4,
      {"train.global_batch_size: 6 gives 6 micro-batches", "parallel.pp=4", "virtual_stages: 2"});
  c.train.global_batch_size = 8;
  EXPECT_TRUE(loom::validate(c, 4).empty());
  c.parallel.dp = 2, c.train.global_batch_size = 12;  // 6 per data-parallel rank
  expect_one(c, 8, {"gives 6 micro-batches", "parallel.pp=4"});
}

TEST(ConfigValidateVpp, OneFOneBOnly) {
  Config c = interleaved();
  c.parallel.schedule = "gpipe";
  expect_one(c, 2, {"parallel.virtual_stages: 2", "parallel.schedule is 'gpipe'", "1f1b"});
}

// The device pipeline transfers run on a ring (the last stage's chunks send to the first), so
// cuda takes virtual stages as cpu does.
TEST(ConfigValidateVpp, CudaToo) {
  Config c = interleaved();
  c.device = "cuda";
  EXPECT_FALSE(reports(c, 2, {"parallel.virtual_stages"}));
  c.model.n_layer = 6;  // and its rules are the same
  EXPECT_TRUE(reports(c, 2, {"model.n_layer: 6 is not divisible"}));
}

}  // namespace
