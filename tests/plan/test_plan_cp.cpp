// loom plan with context parallelism: which cp the search takes, the ring's bytes and times,
// the placement of the cp group, per-rank attention FLOPs, and the plans of a 32k-token Llama
// (cp wins) and of GPT-2 at 1024 tokens (cp 1 wins) on one 8 x H100 node; and a 70B-shaped Llama
// at 8192 tokens on 1024 H100s, where sequence parallelism wins.
#include <gtest/gtest.h>

#include <cstdio>

#include "config/config.h"
#include "plan/planner.h"
#include "tests/plan/plan_test_util.h"
#include "tests/support/configs.h"
#include "tests/support/fixture.h"

namespace loom {
namespace {

using namespace plan;

ClusterSpec h100_node() {
  return load_cluster(test::source_path("configs/clusters/h100_80g_8x.yaml"));
}

// A shipped config, overridden, as loom plan reads it, modelled on one 8 x H100 node in bf16.
Plan plan_of(const std::string& config, const std::vector<std::string>& overrides) {
  std::vector<std::string> o = overrides;
  o.push_back("device=cuda");
  o.push_back("train.dtype=bf16");
  const Config cfg = load_config(test::source_path(config), o);
  EXPECT_TRUE(config_errors(cfg).empty());
  return make_plan(plan_model(cfg, h100_node()), h100_node());
}

void print_top(const Plan& p, const char* title, int n) {
  std::printf("%s\n", title);
  for (int i = 0; i < n && i < int(p.valid.size()); ++i) {
    const PlanEntry& e = p.valid[size_t(i)];
    std::printf(
        "  dp %d pp %d v %d tp %d cp %d mb %d zero %d %s%s: %.2f GiB, %.4g s (compute "
        "%.4g, tp %.4g, cp %.4g, dp %.4g), MFU %.1f%%\n",
        e.c.dp, e.c.pp, e.c.v, e.c.tp, e.c.cp, e.c.micro_batch, e.c.zero,
        recompute_name(e.c.recompute), e.c.sp ? " sp" : "", double(e.memory.total()) / 1073741824.0,
        e.time.total, e.time.compute, e.time.tp, e.time.cp, e.time.dp, 100 * e.time.mfu);
  }
}

TEST(PlanCp, SearchTakesCpWhereSeqLenSplitsIntoChunksOfTheMinimum) {
  PlanModel pm;
  pm.model = test::tiny_llama();  // seq_len 8
  EXPECT_TRUE(cp_searched(pm, 1));
  EXPECT_FALSE(cp_searched(pm, 2));  // chunks of 2 tokens < the default 256
  pm.min_cp_chunk = 1;
  EXPECT_TRUE(cp_searched(pm, 2));
  EXPECT_FALSE(cp_searched(pm, 3));  // 8 % 6
  EXPECT_TRUE(cp_searched(pm, 4));
  EXPECT_FALSE(cp_searched(pm, 8));  // 8 % 16
  pm.model.seq_len = 32768, pm.min_cp_chunk = 256;
  EXPECT_TRUE(cp_searched(pm, 64));  // chunks of 256
  EXPECT_FALSE(cp_searched(pm, 128));

  // On 8 ranks: (tp, pp, cp) with cp in {1, 2, 4} and tp*pp*cp | 8: 10 + 6 + 3 grids.
  pm.model.seq_len = 8, pm.min_cp_chunk = 1, pm.global_batch = 8;
  const Plan p = make_plan(pm, test::cpu_cluster());
  EXPECT_EQ(p.grids, 19);
  bool cp4 = false, zero_over_cp = false, selective = false;
  for (const PlanEntry& e : p.valid) {
    EXPECT_EQ(e.c.world(), 8);
    // Selective recompute only where the cpu attention keeps its probabilities: without cp.
    if (e.c.recompute == Recompute::Selective) {
      EXPECT_EQ(e.c.cp, 1);
    }
    selective = selective || e.c.recompute == Recompute::Selective;
    cp4 = cp4 || e.c.cp == 4;
    // dp 1 and cp > 1: the cp ranks share ZeRO's shards.
    zero_over_cp = zero_over_cp || (e.c.dp == 1 && e.c.cp > 1 && e.c.zero == 3);
  }
  EXPECT_TRUE(cp4);
  EXPECT_TRUE(zero_over_cp);
  EXPECT_TRUE(selective);
}

// The ring's bytes by hand: tp 1, cp 2, micro-batches of 2 sequences of 8 / 2 = 4 tokens: the
// [k | v] block is 8 rows x 2 x 2 kv heads x 8 = 256 fp32 elements, 1024 bytes, and so is its
// gradient. Per layer: forward cp-1 = 1 block, backward 1 block + 2 gradients; 4 layers x 4
// micro-batches.
TEST(PlanCp, RingBytesPerLayerAndMicroBatch) {
  PlanModel pm;
  pm.model = test::tiny_llama();
  Candidate c;
  c.cp = 2, c.micro_batch = 2;
  const StageShape sh = stage_shapes(pm.model, 1, 1)[0];
  const RingBlock b = ring_block(pm, c);
  EXPECT_EQ(b.kv, 1024u);
  EXPECT_EQ(b.dkv, 1024u);
  CommVolume v = step_comm_volume(pm, c, sh, 4);
  EXPECT_EQ(v.cp.bytes, 4u * 4u * (1024u + 1024u + 2u * 1024u));
  EXPECT_EQ(v.cp.calls, 4 * 4 * (1 + 1 + 2));
  c.recompute = Recompute::Full;  // the forward ring again
  v = step_comm_volume(pm, c, sh, 4);
  EXPECT_EQ(v.cp.bytes, 4u * 4u * (2u * 1024u + 1024u + 2u * 1024u));
  // bf16 on cuda: the blocks in 2 bytes, their gradients in fp32.
  pm.device = "cuda", pm.prec = precision_of("bf16");
  EXPECT_EQ(ring_block(pm, c).kv, 512u);
  EXPECT_EQ(ring_block(pm, c).dkv, 1024u);
  // tp 2 halves the kv heads of a rank, cp 4 its rows.
  c.tp = 2, c.cp = 4;
  EXPECT_EQ(ring_block(pm, c).dkv, 1024u / 4u);
}

// cp follows tp unless the order names it; the gradient replicas are the dp x cp ranks.
TEST(PlanCp, PlacementOfTheRingAndTheReplicas) {
  ClusterSpec cl = h100_node();
  cl.nodes = 2;
  Candidate c;
  c.tp = 4, c.cp = 2, c.dp = 2;
  Placement p = place(cl, c, "tp-dp-pp");  // tp-cp-dp-pp: a cp ring inside a node
  EXPECT_EQ(p.cp.size, 2);
  EXPECT_FALSE(p.cp.spans_nodes);
  EXPECT_EQ(p.dp.size, 4);
  EXPECT_TRUE(p.dp.spans_nodes);    // dp strides over the 8 ranks of a node
  p = place(cl, c, "tp-dp-cp-pp");  // cp outermost but pp: ranks 8 apart
  EXPECT_TRUE(p.cp.spans_nodes);
  // A ring waits for its slowest hop: one NIC, not the node's.
  EXPECT_DOUBLE_EQ(p.cp.bytes_per_s, cl.inter_node.bytes_per_s());
  EXPECT_FALSE(place(cl, c, "cp-tp-dp-pp").cp.spans_nodes);
}

// Each rank runs seq_len/cp queries against all seq_len keys (the ring's cp blocks, masked ones
// computed too) and everything else on its seq_len/cp rows: 1/cp of one rank's FLOPs. Selective
// recompute keeps the log-sum-exp with cp and recomputes nothing.
TEST(PlanCp, RankFlopsAreOneCpthAndSelectiveRecomputesNothing) {
  PlanModel pm;
  pm.model = test::tiny_llama();
  const StageShape sh = stage_shapes(pm.model, 1, 1)[0];
  Candidate one;
  one.micro_batch = 2;
  for (int cp : {2, 4}) {
    Candidate c = one;
    c.cp = cp;
    EXPECT_DOUBLE_EQ(stage_flops_per_micro_batch(pm, c, sh) * cp,
                     stage_flops_per_micro_batch(pm, one, sh));
    Candidate sel = c;
    sel.recompute = Recompute::Selective;
    EXPECT_DOUBLE_EQ(stage_flops_per_micro_batch(pm, sel, sh),
                     stage_flops_per_micro_batch(pm, c, sh));
    EXPECT_EQ(stage_memory(pm, sel, sh, 4, 0).total(), stage_memory(pm, c, sh, 4, 0).total());
  }
  one.recompute = Recompute::Selective;  // cpu without cp: the probabilities are rebuilt
  Candidate none = one;
  none.recompute = Recompute::None;
  EXPECT_GT(stage_flops_per_micro_batch(pm, one, sh), stage_flops_per_micro_batch(pm, none, sh));
}

// The cpu backend overlaps nothing: the ring's time is its bytes over the link plus a latency
// per send. cuda: the [k | v] sends hide behind each ring step's attention, the gradients not.
TEST(PlanCp, RingTimeOverlapsOnlyTheBlocksOnCuda) {
  PlanModel pm;
  pm.model = test::tiny_llama();
  Candidate c;
  c.cp = 2, c.micro_batch = 2;
  const StageShape sh = stage_shapes(pm.model, 1, 1)[0];
  AxisLink link;
  link.size = 2, link.bytes_per_s = 1e9, link.latency_s = 1e-6;
  const double send = 1e-6 + 1024 / 1e9;  // one 1024-byte block or gradient
  EXPECT_NEAR(ring_exposed_s(pm, c, sh, link, 1e12), 4 * 4 * send, 1e-15);
  pm.device = "cuda", pm.prec = precision_of("bf16");
  const double grad = 1e-6 + 1024 / 1e9;
  // Infinitely fast sends but for the gradients: at 1 FLOP/s the attention hides every block.
  EXPECT_NEAR(ring_exposed_s(pm, c, sh, link, 1.0), 4 * 2 * grad, 1e-15);
  // At 1e30 FLOP/s nothing hides: blocks (512 bytes) and gradients exposed.
  EXPECT_NEAR(ring_exposed_s(pm, c, sh, link, 1e30), 4 * (2 * (1e-6 + 512 / 1e9) + 2 * grad),
              1e-15);
}

// Llama-3.2-1B at 32768 tokens, 4 sequences per step, on one 8 x H100 node in bf16: dp stops
// at 4, and the other factor of 2 costs tp its (N, C) all-reduces (128 MiB each, four per block
// and micro-batch, exposed), pp a bubble of (pp-1)/(m+pp-1) with one micro-batch per replica,
// and cp only the ring's gradient sends (its [k | v] blocks hide behind the attention). The plan
// counts the same attention FLOPs per token with and without cp (docs/plan.md, Time).
TEST(PlanCp, LongSequencesPickContextParallelism) {
  const Plan p =
      plan_of("configs/llama3.2_1b.yaml", {"model.seq_len=32768", "train.global_batch_size=4"});
  ASSERT_FALSE(p.valid.empty());
  print_top(p, "llama3.2-1b seq 32768 on 8 x H100:", 6);
  const PlanEntry& best = p.valid.front();
  EXPECT_GT(best.c.cp, 1);
  // The fastest cp = 1 layout is slower, and it is not the memory that decides.
  const PlanEntry* cp1 = nullptr;
  for (const PlanEntry& e : p.valid)
    if (e.c.cp == 1) {
      cp1 = &e;
      break;
    }
  ASSERT_NE(cp1, nullptr);
  EXPECT_GT(cp1->time.total, best.time.total);
  EXPECT_GT(best.time.cp, 0.0);
}

// GPT-2 124M at its 1024 tokens: cp 2 is searched (chunks of 256), but with 512 sequences per
// step dp 8 needs nothing else, and cp would only add the ring.
TEST(PlanCp, ShortSequencesKeepCpOne) {
  const Plan p = plan_of("configs/gpt2_124m.yaml", {});
  ASSERT_FALSE(p.valid.empty());
  print_top(p, "gpt2-124m seq 1024 on 8 x H100:", 4);
  bool searched = false;
  for (const PlanEntry& e : p.valid) searched = searched || e.c.cp == 2;
  EXPECT_TRUE(searched);
  EXPECT_EQ(p.valid.front().c.cp, 1);
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {
using namespace plan;

// Sequence parallelism is chosen where it pays (PlanScale: a 1024-GPU search, left out of the
// sanitizer run as the other searches of that size are): a Llama-70B-shaped model (80 layers,
// d_model 8192, 64 query over 8 kv heads, SwiGLU 28672) at 8192 tokens on 128 nodes of 8 H100s. The
// best layout splits tensors over tp > 1 with SP (the norm and residual activations shrink by tp,
// and the all-gather and reduce-scatter move what the all-reduce moved); the same layout without SP
// either does not fit or is slower.
TEST(PlanScale, LongSequencesOfALargeModelPickSequenceParallelism) {
  std::vector<std::string> o = {"model.n_layer=80",
                                "model.d_model=8192",
                                "model.n_head=64",
                                "model.n_kv_head=8",
                                "model.ffn_hidden=28672",
                                "model.seq_len=8192",
                                "train.global_batch_size=512",
                                "device=cuda",
                                "train.dtype=bf16"};
  const Config cfg = load_config(test::source_path("configs/llama3.2_1b.yaml"), o);
  ASSERT_TRUE(config_errors(cfg).empty());
  const ClusterSpec cl = load_cluster(test::source_path("configs/clusters/h100_80g_8x_128n.yaml"));
  const Plan p = make_plan(plan_model(cfg, cl), cl);
  ASSERT_FALSE(p.valid.empty());
  print_top(p, "llama 70B shape, seq 8192, on 128 x 8 H100:", 4);
  const Candidate& best = p.valid.front().c;
  EXPECT_GT(best.tp, 1);
  EXPECT_TRUE(best.sp);
  auto same_without_sp = [&](const PlanEntry& e) {
    return e.c.dp == best.dp && e.c.pp == best.pp && e.c.v == best.v && e.c.tp == best.tp &&
           e.c.cp == best.cp && e.c.micro_batch == best.micro_batch && e.c.zero == best.zero &&
           e.c.recompute == best.recompute && !e.c.sp;
  };
  bool found = false;
  for (const PlanEntry& e : p.valid)
    if (same_without_sp(e)) {
      found = true;
      EXPECT_GT(e.time.total, p.valid.front().time.total);
    }
  for (const PlanEntry& e : p.rejected) found = found || same_without_sp(e);
  EXPECT_TRUE(found) << "the layout without SP was not searched";
}

}  // namespace
}  // namespace loom
