// Mixture of Experts (docs/moe.md) trains like the single rank, within the reorder tolerance
// class (tests/support/tolerance.h), on every layout that runs it today: tensor parallelism
// (experts split like the dense MLP, with and without sequence parallelism), pipeline
// (interleaved too) and data parallelism with ZeRO 1/2/3 and recompute, gpt2 and llama blocks,
// dropless and with a capacity that drops assignments, and expert parallelism (the experts
// split over ep ranks of the data-parallel group, rows exchanged all-to-all) with tp, pp,
// recompute and ZeRO 1-3 (the experts sharded over their own replicas). Routing and capacity are
// per sequence, so they do not depend on the micro-batch size or the data-parallel split. Runs
// under mpirun -np 8; smaller layouts use the first dp*pp*tp ranks.
#include <gtest/gtest.h>

#include "tests/parallel/equivalence_util.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

// The tiny model with 4 experts, top-2; capacity 1.25 over seq_len 8 keeps 5 of a sequence's
// 16 assignments per expert.
Config moe_config(bool llama, double capacity) {
  Config c = llama ? test::tiny_llama_config() : test::tiny_parallel_config();
  c.model.moe.num_experts = 4;
  c.model.moe.top_k = 2;
  c.model.moe.capacity_factor = capacity;
  c.model.moe.aux_loss_coef = 0.01;
  c.model.moe.z_loss_coef = 0.001;
  return c;
}

struct Layout {
  int dp, pp, tp, micro;
  int zero = 0;
  const char* recompute = "none";
  bool sp = false;
  int v = 1;
  int ep = 1;
};

void check_layout(const Layout& l, const Config& base, const std::string& what) {
  Config c = base;
  c.parallel.dp = l.dp, c.parallel.pp = l.pp, c.parallel.tp = l.tp;
  c.parallel.micro_batch_size = l.micro;
  c.parallel.sequence_parallel = l.sp;
  c.parallel.virtual_stages = l.v;
  c.optimizer.zero_stage = l.zero;
  c.train.recompute = l.recompute;
  c.parallel.ep = l.ep;
  const std::string name =
      what + " dp" + std::to_string(l.dp) + (l.ep > 1 ? "(ep" + std::to_string(l.ep) + ")" : "") +
      "xpp" + std::to_string(l.pp) + (l.v > 1 ? "(v2)" : "") + "xtp" + std::to_string(l.tp) +
      (l.sp ? " sp" : "") + " micro" + std::to_string(l.micro) + " zero" + std::to_string(l.zero) +
      " recompute " + l.recompute;
  test::expect_equals_single_rank(c, base, name);
}

TEST(MoeEquivalence, Gpt2Dropless) {
  const Config base = moe_config(false, 0.0);
  check_layout({1, 1, 2, 2}, base, "gpt2 moe");
  check_layout({1, 1, 4, 1, 0, "none", true}, base, "gpt2 moe");
  check_layout({2, 2, 2, 1, 1}, base, "gpt2 moe");  // tied embedding across stages
  check_layout({4, 1, 2, 1, 2, "selective"}, base, "gpt2 moe");
  check_layout({2, 2, 1, 2, 3, "full"}, base, "gpt2 moe");
  check_layout({1, 2, 2, 1, 1, "none", true, 2}, base, "gpt2 moe");
}

TEST(MoeEquivalence, Gpt2Capacity) {
  const Config base = moe_config(false, 1.25);
  check_layout({1, 1, 2, 1}, base, "gpt2 moe cap");
  check_layout({2, 2, 2, 1, 2}, base, "gpt2 moe cap");
  check_layout({8, 1, 1, 1, 3}, base, "gpt2 moe cap");
}

// Expert parallelism: each rank computes E/ep experts on the rows every rank of its ep group
// routed to them.
TEST(MoeEquivalence, ExpertParallel) {
  const Config dropless = moe_config(false, 0.0), capped = moe_config(false, 1.25);
  check_layout({2, 1, 1, 2, 0, "none", false, 1, 2}, dropless, "gpt2 moe");
  check_layout({4, 1, 1, 1, 0, "none", false, 1, 4}, dropless, "gpt2 moe");
  check_layout({4, 1, 2, 1, 0, "selective", true, 1, 2}, dropless, "gpt2 moe");
  check_layout({2, 2, 2, 1, 0, "full", false, 1, 2}, dropless, "gpt2 moe");
  check_layout({8, 1, 1, 1, 0, "none", false, 1, 4}, capped, "gpt2 moe cap");
  check_layout({2, 2, 2, 1, 0, "none", true, 2, 2}, capped, "gpt2 moe cap");
  check_layout({2, 1, 4, 1, 0, "none", true, 1, 2}, moe_config(true, 0.0), "llama moe");
  check_layout({4, 2, 1, 1, 0, "full", false, 1, 4}, moe_config(true, 1.25), "llama moe cap");
  // The experts' reductions (and ZeRO's reduces and gathers) start early, each on its group.
  Config overlap = dropless;
  overlap.parallel.overlap = true;
  for (int zero : {0, 1, 2, 3})
    check_layout({4, 1, 2, 1, zero, "none", false, 1, 2}, overlap, "gpt2 moe overlap");
}

// ZeRO with expert parallelism: the experts' gradients, moments (and ZeRO-3 parameters) shard
// over the dp / ep replicas of each expert, the other tensors over all dp ranks.
TEST(MoeEquivalence, ExpertParallelZero) {
  const Config dropless = moe_config(false, 0.0), capped = moe_config(false, 1.25);
  check_layout({2, 1, 1, 2, 1, "none", false, 1, 2}, dropless, "gpt2 moe");
  check_layout({4, 1, 1, 1, 2, "none", false, 1, 2}, dropless, "gpt2 moe");
  check_layout({4, 1, 2, 1, 3, "full", false, 1, 2}, dropless, "gpt2 moe");
  check_layout({8, 1, 1, 1, 3, "none", false, 1, 4}, capped, "gpt2 moe cap");
  check_layout({2, 2, 2, 1, 2, "none", true, 2, 2}, capped, "gpt2 moe cap");
  check_layout({4, 2, 1, 1, 1, "selective", false, 1, 4}, moe_config(true, 0.0), "llama moe");
  check_layout({2, 2, 2, 1, 3, "none", false, 1, 2}, moe_config(true, 1.25), "llama moe cap");
}

TEST(MoeEquivalence, Llama) {
  check_layout({1, 1, 4, 2}, moe_config(true, 0.0), "llama moe");
  check_layout({2, 2, 2, 1, 3, "full"}, moe_config(true, 0.0), "llama moe");
  check_layout({2, 1, 2, 2, 1, "selective", true}, moe_config(true, 1.25), "llama moe cap");
  check_layout({1, 4, 2, 1, 2}, moe_config(true, 1.25), "llama moe cap");
}

}  // namespace
}  // namespace loom
