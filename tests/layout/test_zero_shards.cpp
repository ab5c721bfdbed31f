// ZeRO's sharding groups (layout/zero_shard.h), checked by counting: every element of a group is
// owned by exactly one rank of it, each owner's pieces fill its slots without overlap, and the
// sizes are the ones the memory model allocates. With expert parallelism the experts' tensors
// shard over the dp / ep expert replicas and the others over all dp ranks.
#include <gtest/gtest.h>

#include <vector>

#include "layout/param_layout.h"
#include "layout/rank_memory.h"
#include "layout/zero_shard.h"
#include "tests/support/configs.h"

namespace loom {
namespace {

ModelConfig moe_model() {
  ModelConfig m = test::gpt_model(3, 4, 16, 97, 8);
  m.moe.num_experts = 4;
  m.moe.top_k = 2;
  return m;
}

// One rank's shards: the sizes the memory model computes from counts alone, pieces in flat
// order that fill distinct slots of its state, and with two groups no piece mixing dense and
// expert elements.
void check_rank(const ParamLayout& l, const ZeroShards& z, int dp, int dp_rank, int zero) {
  const ZeroSizes want = zero_sizes(l.total(), stage_params(l).expert, dp, dp_rank, l.ep(), zero);
  EXPECT_EQ(z.sizes().state_elems, want.state_elems);
  EXPECT_EQ(z.sizes().shard_elems, want.shard_elems);
  EXPECT_EQ(z.sizes().split, zero > 0 && l.ep() > 1);
  std::vector<int> slot(z.sizes().shard_elems, 0);
  size_t prev = 0;
  for (const ShardPiece& p : z.mine()) {
    EXPECT_LE(prev, p.lo);
    prev = p.hi;
    ASSERT_LE(p.local + (p.hi - p.lo), z.sizes().state_elems) << "past the moments";
    for (size_t k = p.local; k < p.local + (p.hi - p.lo); ++k) ASSERT_EQ(slot[k]++, 0) << k;
    if (z.sizes().split) {
      EXPECT_EQ(l.expert_runs(p.lo, p.hi).size(), 1u);
    }
  }
  for (const ShardGroup& g : z.groups()) {
    size_t held = 0;
    for (const ShardRange& run : g.runs) held += run.hi - run.lo;
    EXPECT_EQ(held, g.elems);
  }
}

TEST(ZeroShards, OneGroupIsTheContiguousShard) {
  const ParamLayout l(test::gpt_model(3, 4, 16, 97, 8), 1, 0, 1, 0);
  for (int dp : {1, 2, 3, 8})
    for (int r = 0; r < dp; ++r) {
      const ZeroShards z(l, dp, r, 1);
      ASSERT_TRUE(z.contiguous());
      const ShardRange want = zero_shard(l.total(), dp, r);
      ASSERT_EQ(z.mine().size(), want.hi > want.lo ? 1u : 0u);
      if (want.hi > want.lo) {
        EXPECT_EQ(z.mine()[0].lo, want.lo);
        EXPECT_EQ(z.mine()[0].hi, want.hi);
        EXPECT_EQ(z.mine()[0].local, 0u);
      }
      EXPECT_EQ(z.sizes().state_elems, want.hi - want.lo);
    }
  const ZeroShards z0(l, 4, 3, 0);  // stage 0: every rank holds everything
  ASSERT_EQ(z0.mine().size(), 1u);
  EXPECT_EQ(z0.mine()[0].hi, l.total());
  EXPECT_EQ(z0.sizes().state_elems, l.total());
}

// Each element is owned by exactly one rank of the group that sums its gradient: the dense
// ones by one of the dp ranks, an expert's by one of the dp / ep ranks holding that expert.
TEST(ZeroShards, ExpertsAndDenseTensorsEachCoveredOnceByTheirGroup) {
  const ModelConfig m = moe_model();
  for (int tp : {1, 2})
    for (auto [dp, ep] : {std::pair{2, 2}, {4, 2}, {8, 4}, {6, 2}, {4, 4}})
      for (int zero : {1, 2, 3}) {
        // Owners of each flat element of the layout of ep rank e, over the ranks r with
        // r % ep == e (they hold the same experts) and, for dense elements, over all dp ranks.
        for (int e = 0; e < ep; ++e) {
          const ParamLayout l(m, tp, 0, 1, 0, 1, {}, ep, e);
          std::vector<int> dense_owners(l.total(), 0), expert_owners(l.total(), 0);
          std::vector<bool> is_expert(l.total(), false);
          for (const auto& run : l.expert_runs(0, l.total()))
            for (size_t i = run.lo; i < run.hi; ++i) is_expert[i] = run.expert;
          for (int r = 0; r < dp; ++r) {
            // Another ep rank's layout has the same dense offsets (its experts differ only).
            const ParamLayout lr(m, tp, 0, 1, 0, 1, {}, ep, r % ep);
            ASSERT_EQ(lr.total(), l.total());
            const ZeroShards z(lr, dp, r, zero);
            check_rank(lr, z, dp, r, zero);
            for (const ShardPiece& p : z.mine())
              for (size_t i = p.lo; i < p.hi; ++i) {
                if (!is_expert[i])
                  dense_owners[i]++;
                else if (r % ep == e)
                  expert_owners[i]++;
              }
          }
          for (size_t i = 0; i < l.total(); ++i)
            ASSERT_EQ(is_expert[i] ? expert_owners[i] : dense_owners[i], 1)
                << "element " << i << (is_expert[i] ? " (expert)" : " (dense)") << " dp" << dp
                << " ep" << ep << " tp" << tp << " zero" << zero;
        }
      }
}

// The memory model sizes the optimizer's buffers from the stage's counts alone; they equal the
// shards the optimizer builds from the layout.
TEST(ZeroShards, MemoryModelAllocatesTheShards) {
  const ModelConfig m = moe_model();
  for (int zero : {0, 1, 2, 3})
    for (int r = 0; r < 4; ++r) {
      const ParamLayout l(m, 1, 0, 1, 0, 1, {}, 2, r % 2);
      MemorySpec s;
      s.params = stage_params(l);
      s.dp = 4, s.dp_rank = r, s.ep = 2, s.zero = zero;
      const RankMemory mem = plan_rank_memory(s, DeviceTraits{});
      const ZeroShards z(l, 4, r, zero);
      EXPECT_EQ(mem.optimizer, 2 * z.sizes().state_elems * sizeof(float));
      EXPECT_EQ(mem.grad_elems, zero < 2 ? l.total() : z.sizes().shard_elems);
      EXPECT_EQ(mem.param_elems, zero == 3   ? z.sizes().shard_elems
                                 : zero == 0 ? 4 * zero_shard_size(l.total(), 4)
                                             : l.total());
      // The two groups' shards: dense elements over 4 ranks, the experts' over 2.
      if (zero > 0) {
        const uint64_t expert = s.params.expert;
        EXPECT_EQ(z.sizes().dense_shard, (l.total() - expert + 3) / 4);
        EXPECT_EQ(z.sizes().expert_shard, (expert + 1) / 2);
      }
    }
}

}  // namespace
}  // namespace loom
