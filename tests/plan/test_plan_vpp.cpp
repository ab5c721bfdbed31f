// loom plan's virtual stages: the memory of each stage is the run's own memory model (chunked
// slots and pipeline buffers), the bubble shrinks to (pp-1)/v micro-batch times, v is searched
// where pp*v chunks split the layers, and few micro-batches make v = 2 the faster pipeline.
#include <gtest/gtest.h>

#include <set>
#include <utility>
#include <vector>

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
  pm.model = cfg.model, pm.global_batch = 8;
  Candidate c;
  c.pp = 2, c.v = 2;
  const auto shapes = stage_shapes(cfg.model, 1, 2, 2);
  for (int s = 0; s < 2; ++s) {
    const RunLayout run(cfg, GridDims{1, 2, 1}, Coord{0, s, 0});
    const RankMemory mem = run.memory(pm.traits());
    const MemoryEstimate est = stage_memory(pm, c, shapes[size_t(s)], 8, 0);
    EXPECT_EQ(shapes[size_t(s)].chunks, 2);
    EXPECT_EQ(est.total(), mem.total()) << "stage " << s;
    EXPECT_EQ(est.activations, mem.activations + mem.scratch + mem.logits) << "stage " << s;
    EXPECT_EQ(est.pipeline, mem.pipeline + mem.step_inputs) << "stage " << s;
    EXPECT_EQ(est.params, mem.master_params) << "stage " << s;
    EXPECT_GT(mem.pipeline, 0u);  // both stages send and receive in both directions
  }
}

TEST(PlanVpp, BubbleShrinksByTheVirtualStages) {
  const ModelConfig m = test::gpt_model(8, 4, 32, 97, 8);
  ClusterSpec cl = test::cpu_cluster();
  PlanModel pm;
  pm.model = m, pm.global_batch = 16;
  Candidate c;
  c.pp = 4;
  for (int v : {1, 2}) {
    c.v = v;
    const StepTime t = step_time(pm, c, stage_shapes(m, 1, 4, v), 16, cl, place(cl, c, pm.order));
    const double pipelined = t.compute + t.tp + t.pp + t.bubble;
    // (pp-1)/v micro-batch times of fill and drain beside m = 16 of work: (pp-1)/(v*m+pp-1).
    EXPECT_NEAR(t.bubble / pipelined, 3.0 / (v * 16 + 3.0), 1e-9) << "v " << v;
  }
}

// v > 1 where the pp*v chunks split the layers, the schedule is 1f1b and the micro-batches per
// step come in groups of pp; v = 1 always (no grid is refused for its chunks).
TEST(PlanVpp, VirtualStagesAreSearchedWhereTheySplit) {
  PlanModel pm;
  pm.model = test::gpt_model(4, 4, 32, 97, 8);
  pm.global_batch = 8;
  EXPECT_EQ(virtual_stages_searched(pm, 1), std::vector<int>{1});
  EXPECT_EQ(virtual_stages_searched(pm, 2), (std::vector<int>{1, 2}));
  EXPECT_EQ(virtual_stages_searched(pm, 4), std::vector<int>{1});  // 8 chunks of 4 layers: no
  pm.schedule = ScheduleKind::GPipe;
  EXPECT_EQ(virtual_stages_searched(pm, 2), std::vector<int>{1});
  pm.schedule = ScheduleKind::OneFOneB;
  const Plan p = make_plan(pm, test::cpu_cluster());
  std::set<std::pair<int, int>> seen;  // (pp, v)
  for (const PlanEntry& e : p.valid) {
    seen.insert({e.c.pp, e.c.v});
    if (e.c.v > 1) {
      EXPECT_GT(e.c.pp, 1);
      EXPECT_EQ(pm.model.n_layer % (e.c.pp * e.c.v), 0);
      EXPECT_EQ(e.microbatches % e.c.pp, 0);
    }
  }
  EXPECT_TRUE(seen.count({2, 2}));
  EXPECT_TRUE(seen.count({4, 1}));
  EXPECT_FALSE(seen.count({4, 2}));
  for (const PlanEntry& e : p.rejected) EXPECT_EQ(e.reason.find("virtual"), std::string::npos);
}

// The configured virtual stages widen the search beyond its bound of 4; validation at pp 1
// would refuse 12 layers in 6 chunks per stage, the plan checks each pp x v instead.
TEST(PlanVpp, TheConfigsVirtualStagesWidenTheSearch) {
  Config cfg;
  cfg.model = test::gpt_model(12, 4, 32, 257, 8);
  cfg.train.global_batch_size = 6;
  cfg.parallel.virtual_stages = 6;
  const std::vector<std::string> errors = config_errors(cfg);  // nothing before a grid is chosen
  EXPECT_TRUE(errors.empty()) << errors.front();
  PlanModel pm = plan_model(cfg, test::cpu_cluster());
  EXPECT_EQ(pm.max_virtual_stages, 6);
  EXPECT_EQ(virtual_stages_searched(pm, 2), (std::vector<int>{1, 2, 3, 6}));
  cfg.parallel.virtual_stages = 2;
  pm = plan_model(cfg, test::cpu_cluster());
  EXPECT_EQ(pm.max_virtual_stages, 4);
  EXPECT_EQ(virtual_stages_searched(pm, 2), (std::vector<int>{1, 2, 3}));
}

// A pipeline of 4 stages with 4 micro-batches per step: v = 1 idles (pp-1)/(m+pp-1) = 3/7 of
// the pipelined time, v = 2 halves the fill to 3/11; the extra chunk sends cost less, so the
// plan ranks every pp-4 layout with v = 2 above its v = 1 twin.
TEST(PlanVpp, FewMicroBatchesPreferTwoVirtualStages) {
  PlanModel pm;
  pm.model = test::gpt_model(8, 4, 32, 97, 8);
  pm.global_batch = 8;
  ClusterSpec cl = test::cpu_cluster();  // 8 ranks
  const Plan p = make_plan(pm, cl);
  const PlanEntry* best4 = nullptr;
  int pairs = 0;
  for (const PlanEntry& e : p.valid) {
    if (e.c.pp != 4 || e.microbatches != 4) continue;
    if (!best4) best4 = &e;
    // ZeRO 0/1: no DP work inside the pipelined micro-batch slots, so the bubble's share of
    // them is the schedule's alone.
    if (e.c.v != 1 || e.c.zero > 1) continue;
    for (const PlanEntry& w : p.valid)
      if (w.c.v == 2 && w.c.pp == 4 && w.c.dp == e.c.dp && w.c.tp == e.c.tp &&
          w.c.micro_batch == e.c.micro_batch && w.c.zero == e.c.zero &&
          w.c.recompute == e.c.recompute && w.c.sp == e.c.sp) {
        ++pairs;
        const StepTime &a = e.time, &b = w.time;
        EXPECT_NEAR(a.bubble / (a.compute + a.tp + a.pp + a.cp + a.bubble), 3.0 / 7.0, 1e-9);
        EXPECT_NEAR(b.bubble / (b.compute + b.tp + b.pp + b.cp + b.bubble), 3.0 / 11.0, 1e-9);
        EXPECT_LT(b.total, a.total) << "v 2 slower for " << e.c.dp << " " << e.c.tp;
      }
  }
  EXPECT_GT(pairs, 0);
  ASSERT_NE(best4, nullptr);
  EXPECT_EQ(best4->c.v, 2);
}

}  // namespace
}  // namespace loom
