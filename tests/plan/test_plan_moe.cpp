// loom plan with a Mixture of Experts: which expert-parallel sizes it searches, the memory of an
// ep layout against the memory model of the run loom would make, the all-to-all bytes by hand,
// and a model whose experts fit only when split.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "config/config.h"
#include "core/check.h"
#include "layout/run_layout.h"
#include "plan/planner.h"
#include "tests/plan/plan_test_util.h"
#include "tests/support/configs.h"
#include "tests/support/fixture.h"

namespace loom {
namespace {
using namespace plan;

// 2 layers, 4 heads, d_model 32, vocab 97, T 8; 8 experts of width 64, top-2.
ModelConfig tiny_moe() {
  ModelConfig m = test::gpt_model(2, 4, 32, 97, 8);
  m.ffn_hidden = 64;
  m.moe.num_experts = 8;
  m.moe.top_k = 2;
  return m;
}

TEST(PlanMoe, SearchTakesEpDividingDpAndTheExperts) {
  PlanModel pm;
  pm.model = tiny_moe();
  EXPECT_EQ(experts_searched(pm, 4), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(experts_searched(pm, 6), (std::vector<int>{1, 2}));
  EXPECT_EQ(experts_searched(pm, 16), (std::vector<int>{1, 2, 4, 8}));
  pm.model.moe.num_experts = 0;  // dense: nothing to split
  EXPECT_EQ(experts_searched(pm, 4), (std::vector<int>{1}));
}

// The plan's memory of every rank of an ep layout is what RunLayout says loom allocates there
// (each rank holds E/ep experts, and rows from every rank of its ep group).
TEST(PlanMoe, MemoryEqualsTheMemoryModelOfARunLayout) {
  int compared = 0;
  for (int tp : {1, 2})
    for (int ep : {1, 2, 4})
      for (Recompute r : {Recompute::None, Recompute::Full})
        for (double capacity : {0.0, 1.25}) {
          const int dp = 4, pp = 2, mb = 2;
          Config cfg;
          cfg.model = tiny_moe();
          cfg.model.moe.capacity_factor = capacity;
          cfg.parallel.dp = dp, cfg.parallel.pp = pp, cfg.parallel.tp = tp, cfg.parallel.ep = ep;
          cfg.parallel.micro_batch_size = mb;
          cfg.train.global_batch_size = 16;
          cfg.train.recompute = recompute_name(r);
          PlanModel pm;
          pm.model = cfg.model;
          pm.global_batch = cfg.train.global_batch_size;
          Candidate c = test::candidate_of(cfg);
          const auto shapes = stage_shapes(cfg.model, tp, pp, 1, ep);
          for (int s = 0; s < pp; ++s)
            for (int d = 0; d < dp; ++d) {
              const RunLayout run(cfg, GridDims{dp, pp, tp, 1}, Coord{d, s, tp - 1, 0});
              const RankMemory want = run.memory(pm.traits());
              const MemoryEstimate got =
                  stage_memory(pm, c, shapes[size_t(s)], run.microbatches(), 0, d);
              ++compared;
              const std::string at = str("tp ", tp, " ep ", ep, " ", recompute_name(r),
                                         " capacity ", capacity, " stage ", s, " dp ", d);
              EXPECT_EQ(got.total(), want.total()) << at;
              EXPECT_EQ(got.params, want.master_params + want.compute_weights) << at;
              EXPECT_EQ(got.activations, want.activations + want.scratch + want.logits) << at;
            }
        }
  EXPECT_EQ(compared, 2 * 3 * 2 * 2 * 2 * 4);
}

// Per MoE layer and micro-batch a rank sends (ep-1)/ep of its N x top_k rows, C fp32 values
// each, four times (rows out and back forward, their gradients backward), six with full
// recompute. N = 2 x 8 = 16 rows, top-2: 32 assignments, 24 leave with ep 4: 24 x 32 x 4 bytes.
TEST(PlanMoe, AllToAllBytesByHand) {
  PlanModel pm;
  pm.model = tiny_moe();
  pm.global_batch = 16;
  Candidate c;
  c.dp = 4, c.ep = 4, c.micro_batch = 2;
  EXPECT_EQ(expert_exchange_bytes(pm, c), uint64_t(24 * 32 * 4));
  const StageShape sh = stage_shapes(pm.model, 1, 1, 1, 4)[0];
  const int m = 2;  // micro-batches per step
  CommVolume v = step_comm_volume(pm, c, sh, m);
  EXPECT_EQ(v.ep.bytes, uint64_t(m * 2 * 4 * 24 * 32 * 4));
  EXPECT_EQ(v.ep.calls, m * 2 * 4);
  EXPECT_FALSE(v.exact);  // routing decides the real bytes
  c.recompute = Recompute::Full;
  EXPECT_EQ(step_comm_volume(pm, c, sh, m).ep.bytes, uint64_t(m * 2 * 6 * 24 * 32 * 4));
  c.ep = 1;
  EXPECT_EQ(step_comm_volume(pm, c, sh, m).ep.bytes, 0u);
}

// A Mixture of 64 experts of GPT-2 medium width (24 layers, d_model 1024, experts 1024 -> 4096,
// 13.0B parameters) on one 8 x H100 node in fp32 (the MoE compute dtype): 16 bytes of state per
// parameter (208 GB) fit no rank whole, so without expert parallelism a layout needs ZeRO's
// gathers or tp/pp's activations traffic and bubble; with ep 8 each rank holds 8 experts per
// layer and the all-to-all is the cheaper exchange. The plan picks ep > 1; ep > 1 layouts also
// come with ZeRO 1-3 (the experts shard over their dp / ep replicas, so their state per rank is
// less than with ZeRO 0), and none uses context parallelism (loom refuses it with MoE).
TEST(PlanMoe, LargeExpertsPickExpertParallelism) {
  const Config cfg =
      load_config(test::source_path("configs/moe_small.yaml"),
                  {"model.n_layer=24", "model.n_head=16", "model.d_model=1024",
                   "model.ffn_hidden=4096", "model.moe.num_experts=64", "model.seq_len=1024",
                   "train.global_batch_size=64", "device=cuda", "train.dtype=fp32"});
  ASSERT_TRUE(config_errors(cfg).empty());
  const ClusterSpec cl = load_cluster(test::source_path("configs/clusters/h100_80g_8x.yaml"));
  const Plan p = make_plan(plan_model(cfg, cl), cl);
  ASSERT_FALSE(p.valid.empty()) << no_fit_message(p);
  EXPECT_GT(p.valid.front().c.ep, 1);
  EXPECT_GT(p.valid.front().time.ep, 0.0);
  std::map<std::string, uint64_t> zero0_state;  // optimizer bytes of each ep > 1 layout at ZeRO 0
  auto key = [](const Candidate& c) {
    return std::to_string(c.dp) + " " + std::to_string(c.ep) + " " + std::to_string(c.tp) + " " +
           std::to_string(c.pp) + " " + std::to_string(c.micro_batch) + " " +
           std::to_string(int(c.recompute)) + " " + std::to_string(c.v) + std::to_string(c.sp);
  };
  for (const PlanEntry& e : p.valid)
    if (e.c.ep > 1 && e.c.zero == 0) zero0_state[key(e.c)] = e.memory.optimizer;
  int sharded = 0;
  for (const PlanEntry& e : p.valid) {
    EXPECT_EQ(e.c.cp, 1);
    if (e.c.ep > 1) {
      if (e.c.zero == 0) continue;
      ++sharded;
      auto it = zero0_state.find(key(e.c));
      if (it != zero0_state.end()) {
        EXPECT_LT(e.memory.optimizer, it->second) << key(e.c);
      }
    } else {  // ep 1: the state is split some other way
      EXPECT_TRUE(e.c.zero >= 1 || e.c.tp * e.c.pp > 1) << "the whole model's state fits a rank";
    }
  }
  EXPECT_GT(sharded, 0) << "no ep > 1 layout with ZeRO 1-3";
}

}  // namespace
}  // namespace loom
