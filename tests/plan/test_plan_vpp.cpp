// loom plan with parallel.virtual_stages: the memory of each stage is the run's own memory model
// (chunked slots and pipeline buffers), the bubble shrinks to (pp-1)/v micro-batch times, and
// grids whose layers do not split into pp*v chunks are rejected with the reason.
#include <gtest/gtest.h>

#include "layout/run_layout.h"
#include "plan/planner.h"
#include "tests/plan/plan_test_util.h"
#include "tests/support/configs.h"

namespace loom {
namespace {

using namespace plan;

TEST(PlanVpp, StageMemoryIsTheRunsMemoryModel) {
  Config cfg;
  cfg.model = test::gpt_model(8, 4, 32, 97, 8);
  cfg.parallel.pp = 2, cfg.parallel.virtual_stages = 2, cfg.parallel.micro_batch_size = 1;
  cfg.train.global_batch_size = 8;
  PlanModel pm;
  pm.model = cfg.model, pm.global_batch = 8, pm.virtual_stages = 2;
  Candidate c;
  c.pp = 2;
  const auto shapes = stage_shapes(cfg.model, 1, 2, 2);
  for (int s = 0; s < 2; ++s) {
    const RunLayout run(cfg, GridDims{1, 2, 1}, Coord{0, s, 0});
    const RankMemory mem = run.memory(pm.traits());
    const MemoryEstimate est = stage_memory(pm, c, shapes[size_t(s)], 8, 0);
    EXPECT_EQ(shapes[size_t(s)].chunks, 2);
    EXPECT_EQ(est.activations, mem.activations + mem.scratch + mem.logits) << "stage " << s;
    EXPECT_EQ(est.pipeline, mem.pipeline + mem.step_inputs) << "stage " << s;
    EXPECT_EQ(est.params, mem.master_params) << "stage " << s;
    EXPECT_GT(mem.pipeline, 0u);  // both stages send and receive in both directions
  }
}

TEST(PlanVpp, BubbleShrinksByTheVirtualStages) {
  const ModelConfig m = test::gpt_model(8, 4, 32, 97, 8);
  ClusterSpec cl = test::cpu_cluster();
  Candidate c;
  c.pp = 4;
  for (int v : {1, 2}) {
    PlanModel pm;
    pm.model = m, pm.global_batch = 16, pm.virtual_stages = v;
    const StepTime t = step_time(pm, c, stage_shapes(m, 1, 4, v), 16, cl, place(cl, c, pm.order));
    const double pipelined = t.compute + t.tp + t.pp + t.bubble;
    // (pp-1)/v micro-batch times of fill and drain beside m = 16 of work.
    EXPECT_NEAR(t.bubble / pipelined, (3.0 / v) / (16 + 3.0 / v), 1e-9) << "v " << v;
  }
}

TEST(PlanVpp, GridsThatDoNotSplitIntoChunksAreRejected) {
  PlanModel pm;
  pm.model = test::gpt_model(4, 4, 32, 97, 8);
  pm.global_batch = 8, pm.virtual_stages = 2;
  const Plan p = make_plan(pm, test::cpu_cluster());
  bool pp4 = false;
  for (const PlanEntry& e : p.rejected)
    if (e.grid_only && e.c.pp == 4)
      pp4 = e.reason.find("pp 4 x virtual_stages 2 does not divide n_layer 4") != std::string::npos;
  EXPECT_TRUE(pp4);
  for (const PlanEntry& e : p.valid) {
    EXPECT_NE(e.c.pp, 4);
    if (e.c.pp > 1) {
      EXPECT_EQ(e.microbatches % e.c.pp, 0);
    }
  }
}

TEST(PlanVpp, TheConfigsVirtualStagesApplyPerGrid) {
  Config cfg;
  // 6 layers and v 4: validation at pp 1 would refuse the split (6 % 4); the plan checks each
  // grid's pp x v instead.
  cfg.model = test::gpt_model(6, 4, 32, 257, 8);
  cfg.parallel.virtual_stages = 4;
  cfg.train.global_batch_size = 6;
  const std::vector<std::string> errors = config_errors(cfg);  // nothing before a grid is chosen
  EXPECT_TRUE(errors.empty()) << errors.front();
  const PlanModel pm = plan_model(cfg, test::cpu_cluster());
  EXPECT_EQ(pm.virtual_stages, 4);
  EXPECT_EQ(pm.chunks(1), 1);
  EXPECT_EQ(pm.chunks(3), 4);
}

}  // namespace
}  // namespace loom
