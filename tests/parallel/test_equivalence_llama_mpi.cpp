// The central invariant for the llama family (RMSNorm, RoPE, SwiGLU, grouped-query attention):
// every layout trains like the single rank, within the reorder tolerance class
// (tests/support/tolerance.h), including tensor parallelism that splits the kv heads. Runs
// under mpirun -np 8; smaller layouts use the first dp*pp*tp ranks.
#include <gtest/gtest.h>

#include "tests/parallel/equivalence_util.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

// 8 query heads over 4 kv heads (two per group) of size 4, so tp 2 and tp 4 both split whole
// kv heads; SwiGLU width 48 (gate and up 12 per rank on tp4); a RoPE base small enough that
// the rotations at T = 8 are far from identity.

struct Layout {
  int dp, pp, tp, micro;
  int zero = 0;
  const char* recompute = "none";
};

void check_layout(const Layout& l, const Config& base, const std::string& what) {
  Config c = base;
  c.parallel.dp = l.dp, c.parallel.pp = l.pp, c.parallel.tp = l.tp;
  c.parallel.micro_batch_size = l.micro;
  c.optimizer.zero_stage = l.zero;
  c.train.recompute = l.recompute;
  const std::string name = what + " dp" + std::to_string(l.dp) + "xpp" + std::to_string(l.pp) +
                           "xtp" + std::to_string(l.tp) + " micro" + std::to_string(l.micro) +
                           " zero" + std::to_string(l.zero) + " recompute " + l.recompute;
  test::expect_equals_single_rank(c, base, name);
}

TEST(LlamaEquivalence, ReferenceLossFalls) {
  if (test::world_rank() != 0) return;
  const auto& ref = test::single_rank_run(test::tiny_llama_config());
  EXPECT_LT(ref.losses.back(), ref.losses.front() - 0.1);
  // No biases and no position table: the gathered model has exactly the llama tensors.
  EXPECT_EQ(ref.weights.count("wpe.weight"), 0u);
  EXPECT_EQ(ref.weights.count("h.0.attn.c_attn.bias"), 0u);
  EXPECT_EQ(ref.weights.at("h.0.attn.c_attn.weight").cols, (8 + 2 * 4) * 4);
  EXPECT_EQ(ref.weights.at("h.0.mlp.c_fc.weight").cols, 2 * 48);
  EXPECT_EQ(ref.weights.size(), size_t(1 + 6 * 4 + 2));
}

TEST(LlamaEquivalence, TensorParallelSplitsKvHeads) {
  check_layout({1, 1, 2, 2}, test::tiny_llama_config(),
               "gqa");  // 2 kv heads, 4 query heads per rank
  check_layout({1, 1, 4, 2}, test::tiny_llama_config(),
               "gqa");  // 1 kv head, 2 query heads per rank
  check_layout({1, 1, 2, 2}, test::tiny_llama_config(2), "gqa 4:1");
}

TEST(LlamaEquivalence, PipelineAndDataParallel) {
  check_layout({1, 2, 1, 2}, test::tiny_llama_config(), "gqa");
  check_layout({2, 1, 1, 2}, test::tiny_llama_config(), "gqa");
  check_layout({1, 2, 1, 1}, test::tiny_llama_config(4, true), "tied");  // the tie crosses stages
  check_layout({2, 2, 1, 1}, test::tiny_llama_config(1), "mqa");         // one kv head
}

TEST(LlamaEquivalence, ThreeDimensionalWithZeroAndRecompute) {
  check_layout({2, 2, 2, 1}, test::tiny_llama_config(), "gqa");
  check_layout({2, 2, 2, 1, 1}, test::tiny_llama_config(), "gqa");
  check_layout({2, 2, 2, 1, 2}, test::tiny_llama_config(), "gqa");
  check_layout({2, 2, 2, 1, 3}, test::tiny_llama_config(), "gqa");
  check_layout({1, 2, 4, 1, 0, "full"}, test::tiny_llama_config(), "gqa");
  check_layout({2, 2, 2, 2, 1, "selective"}, test::tiny_llama_config(4, true), "tied");
}

}  // namespace
}  // namespace loom
