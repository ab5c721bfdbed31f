// Plan vs real cpu runs (4 ranks): buffers and per-axis Comm bytes equal, byte for byte, with
// context parallelism's ring and dp x cp gradient replicas included.
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>

#include "plan/comm_model.h"
#include "plan/memory_model.h"
#include "tests/parallel/equivalence_util.h"
#include "tests/plan/plan_test_util.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

struct Layout {
  int dp, pp, tp, micro, zero;
  const char* schedule = "1f1b";
  const char* recompute = "none";
  bool tied = true;
  bool odd = false;      // 3 layers, 3 heads, d_model 30: 37710 elements, not a multiple of dp 4
  bool overlap = false;  // parallel.overlap: second layer buffers, per-layer reductions
  int kv_heads = 0;      // > 0: a llama with this many kv heads (SwiGLU width 96)
  bool sp = false;       // parallel.sequence_parallel
  int cp = 1;            // parallel.cp
  int v = 1;             // parallel.virtual_stages
};

// One train_step of c measured on the first dp x pp x tp x cp world ranks: `out` is set there
// and left empty on the other ranks (and when the world is too small, a failure).
void measure_on_first_ranks(const Config& c, std::optional<test::Measured>* out) {
  const int size = c.parallel.dp * c.parallel.pp * c.parallel.tp * c.parallel.cp;
  const int rank = test::world_rank();
  ASSERT_LE(size, test::world_size());
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, rank < size ? 0 : MPI_UNDEFINED, rank, &sub);
  if (rank >= size) return;
  *out = test::measure_step(c, sub);
  MPI_Comm_free(&sub);
}

void check(const Layout& l) {
  Config c = test::tiny_parallel_config();
  c.parallel.dp = l.dp, c.parallel.pp = l.pp, c.parallel.tp = l.tp;
  c.parallel.micro_batch_size = l.micro;
  c.parallel.schedule = l.schedule;
  c.optimizer.zero_stage = l.zero;
  c.train.recompute = l.recompute;
  c.model.tie_embeddings = l.tied;
  c.train.steps = 1;
  c.parallel.overlap = l.overlap;
  c.parallel.sequence_parallel = l.sp;
  c.parallel.cp = l.cp;
  c.parallel.virtual_stages = l.v;
  if (l.odd) c.model.n_layer = 3, c.model.n_head = 3, c.model.d_model = 30;
  if (l.kv_heads > 0) {
    c.model.arch = "llama";
    c.model.n_kv_head = l.kv_heads, c.model.ffn_hidden = 96;
  }
  std::optional<test::Measured> measured;
  measure_on_first_ranks(c, &measured);
  if (!measured) return;
  const test::Measured& got = *measured;
  const int rank = test::world_rank();

  const std::string name = test::layout_name(c) + (l.overlap ? " overlap" : "") +
                           (l.kv_heads > 0 ? " llama kv " + std::to_string(l.kv_heads) : "") +
                           (l.sp ? " sp" : "") + " stage " + std::to_string(got.stage) +
                           " dp rank " + std::to_string(got.dp_rank);
  const plan::PlanModel pm = plan::plan_model(c, test::cpu_cluster());
  const plan::Candidate cand = test::candidate_of(c);
  const auto shapes = plan::stage_shapes(c.model, l.tp, l.pp, l.v);
  const plan::StageShape& sh = shapes[size_t(got.stage)];
  const plan::MemoryEstimate want =
      plan::stage_memory(pm, cand, sh, got.microbatches, 0, got.dp_rank);
  EXPECT_TRUE(want.exact) << name;
  EXPECT_EQ(got.memory.params, want.params) << name;
  EXPECT_EQ(got.memory.grads, want.grads) << name;
  EXPECT_EQ(got.memory.grad_buckets, want.grad_buckets) << name;
  EXPECT_EQ(got.memory.optimizer, want.optimizer) << name;
  EXPECT_EQ(got.memory.activations, want.activations) << name;
  EXPECT_EQ(got.memory.param_buckets, want.param_gather) << name;
  EXPECT_EQ(got.activation_bytes, want.activations) << name;

  const plan::CommVolume v = plan::step_comm_volume(pm, cand, sh, got.microbatches, got.dp_rank);
  EXPECT_TRUE(v.exact) << name;
  EXPECT_EQ(got.tp, v.tp.bytes) << name << ": tp";
  EXPECT_EQ(got.pp, v.pp.bytes) << name << ": pp";
  EXPECT_EQ(got.cp, v.cp.bytes) << name << ": cp";
  if (l.cp > 1) {
    EXPECT_GT(got.cp, 0u) << name;  // the ring ran
  }
  EXPECT_EQ(got.dp, v.dp.bytes) << name << ": dp";
  EXPECT_EQ(got.embed, v.embed.bytes) << name << ": embed";
  EXPECT_EQ(got.world, v.world.bytes) << name << ": world";
  if (rank == 0)
    std::printf(
        "%-32s rank 0: memory %zu B (params %zu grads %zu buckets %zu optimizer %zu "
        "activations %zu) | bytes sent tp %llu pp %llu cp %llu dp %llu embed %llu world %llu\n",
        test::layout_name(c).c_str(),
        got.memory.params + got.memory.grads + got.memory.grad_buckets + got.memory.optimizer +
            got.memory.activations,
        got.memory.params, got.memory.grads, got.memory.grad_buckets, got.memory.optimizer,
        got.memory.activations, (unsigned long long)got.tp, (unsigned long long)got.pp,
        (unsigned long long)got.cp, (unsigned long long)got.dp, (unsigned long long)got.embed,
        (unsigned long long)got.world);
}

TEST(PlanAgreement, DataParallelZeroStages) {
  for (int zero : {0, 1, 2, 3}) {
    check({4, 1, 1, 1, zero});
    check({4, 1, 1, 2, zero});
  }
  check({2, 1, 1, 4, 2});       // one micro-batch per step
  for (int zero : {1, 2, 3}) {  // padded shards: the last DP rank's shard is shorter
    Layout l{4, 1, 1, 1, zero};
    l.odd = true;
    check(l);
  }
}

TEST(PlanAgreement, PipelineTiedEmbeddingsAndSchedules) {
  for (int zero : {0, 1, 2, 3}) check({2, 2, 1, 2, zero});
  check({2, 2, 1, 1, 2, "gpipe"});
  check({2, 2, 1, 1, 1, "1f1b", "none", false});  // untied head on the last stage
  check({1, 4, 1, 1, 0});                         // 8 micro-batches through 4 stages
  check({1, 3, 1, 2, 0, "gpipe"});                // uneven split: 2, 1, 1 layers
}

TEST(PlanAgreement, Recompute) {
  for (const char* mode : {"selective", "full"}) {
    check({1, 1, 4, 2, 0, "1f1b", mode});  // full repeats the blocks' forward TP all-reduces
    check({2, 2, 1, 1, 2, "1f1b", mode});
    check({1, 2, 2, 1, 3, "gpipe", mode});
  }
}

// Overlap moves reductions and gathers in time, not bytes; it adds a second layer buffer to the
// ZeRO 2/3 staging and ZeRO 3 gathers, which the model counts.
TEST(PlanAgreement, Overlap) {
  for (int zero : {0, 1, 2, 3}) {
    Layout l{4, 1, 1, 1, zero};
    l.odd = true, l.overlap = true;
    check(l);
  }
  for (int zero : {2, 3}) {
    Layout l{2, 2, 1, 2, zero};
    l.overlap = true;
    check(l);
  }
}

TEST(PlanAgreement, TensorParallel) {
  check({1, 1, 4, 4, 0});
  check({2, 1, 2, 2, 3});
  check({2, 1, 2, 2, 1});
  check({2, 1, 2, 1, 2});
  check({1, 2, 2, 2, 0});
  check({1, 2, 2, 1, 0, "gpipe"});
}

// A llama (RMSNorm, RoPE, SwiGLU of width 96, no biases, no wpe) with 4 query heads sharing 2
// kv heads (4 with tp 4: each rank needs whole kv heads; 1 without tp), tied and untied.
TEST(PlanAgreement, Llama) {
  auto llama = [](Layout l, int kv, bool tied = true) {
    l.kv_heads = kv, l.tied = tied;
    return l;
  };
  check(llama({1, 1, 2, 2, 0}, 2));
  check(llama({1, 1, 4, 2, 0, "1f1b", "full"}, 4));
  check(llama({2, 1, 2, 2, 3}, 2));
  check(llama({2, 1, 2, 1, 1, "1f1b", "selective"}, 2, false));
  check(llama({2, 2, 1, 2, 2}, 2));
  check(llama({1, 2, 2, 1, 0, "gpipe"}, 2, false));
  check(llama({4, 1, 1, 1, 1}, 1, false));  // one kv head for all 4 query heads
}

// Sequence parallelism: (Ns, C) activations and pipeline buffers; all-gathers counted by their
// own rows, reduce-scatters by their whole input, the norm weight gradients' fp32 all-reduces.
TEST(PlanAgreement, SequenceParallel) {
  auto sp = [](Layout l) {
    l.sp = true;
    return l;
  };
  check(sp({1, 1, 4, 2, 0}));
  check(sp({2, 1, 2, 2, 3}));
  check(sp({1, 2, 2, 1, 0, "1f1b", "full"}));
  check(sp({1, 2, 2, 2, 2, "gpipe", "selective", false}));
  check(sp({1, 1, 2, 2, 0, "1f1b", "none", false, false, false, 2}));  // llama
  check(sp({1, 2, 2, 1, 1, "gpipe", "full", false, false, false, 2}));
}

// Context parallelism: (T/cp)-row activations, the ring's [k | v] blocks and their fp32
// gradients (cp-1 + cp-1 + cp sends per layer, the forward's again with full recompute), and
// gradients reduced (ZeRO: sharded) over the dp x cp replicas.
TEST(PlanAgreement, ContextParallel) {
  auto cp = [](Layout l, int n) {
    l.cp = n;
    return l;
  };
  check(cp({1, 1, 1, 2, 0}, 4));                  // chunks of one token
  check(cp({1, 1, 1, 1, 0, "1f1b", "full"}, 4));  // the forward ring again
  for (int zero : {0, 1, 2, 3}) check(cp({2, 1, 1, 2, zero}, 2));
  check(cp({1, 1, 1, 2, 2, "1f1b", "selective"}, 2));  // ZeRO-2 over the cp replicas alone
  check(cp({1, 1, 2, 2, 3}, 2));
  Layout sp = cp({1, 1, 2, 2, 1, "1f1b", "full"}, 2);
  sp.sp = true;
  check(sp);
  check(cp({1, 2, 1, 1, 2}, 2));
  check(cp({1, 2, 1, 2, 0, "gpipe", "full", false}, 2));
  Layout vpp = cp({1, 2, 1, 1, 1}, 2);  // 8 micro-batches through 2 stages of 2 chunks
  vpp.v = 2;
  check(vpp);
  Layout llama = cp({1, 1, 2, 2, 2, "1f1b", "selective"}, 2);
  llama.kv_heads = 2;
  check(llama);
  llama = cp({2, 1, 1, 1, 3}, 2);
  llama.kv_heads = 1;
  check(llama);
}

// Mixture of Experts with expert parallelism: the gradient replicas' bytes (the dense tensors
// over the dp replicas, the experts' over the dp / ep expert replicas; a group of one rank, dp
// == ep, moves nothing) equal the plan's byte for byte at every ZeRO stage, and so do the other
// axes but the all-to-all, whose bytes follow the router (the plan's are those of uniform
// routing: only required to be of the measured size within a factor of 2 here).
void check_moe(int dp, int pp, int tp, int ep, int zero, bool sp = false) {
  Config c = test::tiny_parallel_config();
  c.parallel.sequence_parallel = sp;
  c.model.moe.num_experts = 4, c.model.moe.top_k = 2;
  c.parallel.dp = dp, c.parallel.pp = pp, c.parallel.tp = tp, c.parallel.ep = ep;
  c.parallel.micro_batch_size = 2;
  c.optimizer.zero_stage = zero;
  c.train.steps = 1;
  std::optional<test::Measured> measured;
  measure_on_first_ranks(c, &measured);
  if (!measured) return;
  const test::Measured& got = *measured;
  const int rank = test::world_rank();

  const std::string name = test::layout_name(c) + " ep" + std::to_string(ep) + " stage " +
                           std::to_string(got.stage) + " dp rank " + std::to_string(got.dp_rank);
  const plan::PlanModel pm = plan::plan_model(c, test::cpu_cluster());
  const plan::Candidate cand = test::candidate_of(c);
  const auto shapes = plan::stage_shapes(c.model, tp, pp, 1, ep);
  const plan::CommVolume v =
      plan::step_comm_volume(pm, cand, shapes[size_t(got.stage)], got.microbatches, got.dp_rank);
  EXPECT_EQ(got.dp, v.dp.bytes) << name << ": dp";
  EXPECT_EQ(got.tp, v.tp.bytes) << name << ": tp";
  EXPECT_EQ(got.pp, v.pp.bytes) << name << ": pp";
  EXPECT_EQ(got.embed, v.embed.bytes) << name << ": embed";
  EXPECT_EQ(got.world, v.world.bytes) << name << ": world";
  EXPECT_GT(got.ep, v.ep.bytes / 2) << name << ": ep";
  EXPECT_LT(got.ep, v.ep.bytes * 2) << name << ": ep";
  if (rank == 0)
    std::printf("%-32s ep%d rank 0: bytes sent dp %llu (plan %llu) ep %llu (plan %llu)\n",
                test::layout_name(c).c_str(), ep, (unsigned long long)got.dp,
                (unsigned long long)v.dp.bytes, (unsigned long long)got.ep,
                (unsigned long long)v.ep.bytes);
}

TEST(PlanAgreement, ExpertParallelGradientReplicas) {
  for (int zero : {0, 1, 2, 3}) {
    check_moe(4, 1, 1, 2, zero);  // expert replicas of 2 ranks
    check_moe(4, 1, 1, 4, zero);  // each expert on one rank: its group moves nothing
  }
  check_moe(2, 2, 1, 2, 3);        // two stages, the tied embedding
  check_moe(2, 1, 2, 2, 2);        // tp2: each TP rank shards its part
  check_moe(2, 1, 2, 2, 1, true);  // tp2 with sequence parallelism
}

}  // namespace
}  // namespace loom
