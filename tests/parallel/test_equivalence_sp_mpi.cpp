// Sequence parallelism (parallel.sequence_parallel) trains like the single rank, within the
// reorder tolerance class (tests/support/tolerance.h): tp2 and tp4, with pipeline and data
// parallelism, ZeRO 1/2/3 and recompute, for gpt2 and llama. Each run also checks that its
// buffers are the memory model's with SP and smaller than without it (the SP path ran). Runs
// under mpirun -np 8; smaller layouts use the first dp*pp*tp ranks.
#include <gtest/gtest.h>

#include "layout/run_layout.h"
#include "tests/parallel/equivalence_util.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

Config gpt2_config() { return test::tiny_parallel_config(); }

struct Layout {
  int dp, pp, tp, micro;
  int zero = 0;
  const char* recompute = "none";
};

void check_layout(const Layout& l, const Config& base, const std::string& what) {
  Config c = base;
  c.parallel.dp = l.dp, c.parallel.pp = l.pp, c.parallel.tp = l.tp;
  c.parallel.micro_batch_size = l.micro;
  c.parallel.sequence_parallel = true;
  c.optimizer.zero_stage = l.zero;
  c.train.recompute = l.recompute;
  const std::string name = what + " sp dp" + std::to_string(l.dp) + "xpp" + std::to_string(l.pp) +
                           "xtp" + std::to_string(l.tp) + " micro" + std::to_string(l.micro) +
                           " zero" + std::to_string(l.zero) + " recompute " + l.recompute;
  const std::optional<test::RunResult> got = test::expect_equals_single_rank(c, base, name);
  if (!got) return;  // ranks other than 0
  SCOPED_TRACE(name);
  // Rank 0 (coordinate 0 on every axis): what it allocated is the memory model's with SP, and
  // less than the model counts without SP.
  const GridDims grid{l.dp, l.pp, l.tp};
  const DeviceTraits cpu{};
  const RankMemory sp = RunLayout(c, grid, Coord{}).memory(cpu);
  EXPECT_EQ(got->memory.activations, sp.activations + sp.scratch + sp.logits);
  Config off = c;
  off.parallel.sequence_parallel = false;
  const RankMemory full = RunLayout(off, grid, Coord{}).memory(cpu);
  EXPECT_LT(sp.activations, full.activations);
}

TEST(SequenceParallel, Gpt2TensorParallel) {
  check_layout({1, 1, 2, 1}, gpt2_config(), "gpt2");
  check_layout({1, 1, 2, 2}, gpt2_config(), "gpt2");
  check_layout({1, 1, 4, 1}, gpt2_config(), "gpt2");  // 2 token rows per rank
}

TEST(SequenceParallel, Gpt2ThreeDimensionalWithZeroAndRecompute) {
  check_layout({2, 2, 2, 1}, gpt2_config(), "gpt2");  // tied embedding across stages
  check_layout({2, 2, 2, 1, 1}, gpt2_config(), "gpt2");
  check_layout({2, 2, 2, 1, 2}, gpt2_config(), "gpt2");
  check_layout({2, 2, 2, 1, 3}, gpt2_config(), "gpt2");
  check_layout({2, 2, 2, 2, 1, "selective"}, gpt2_config(), "gpt2");
  check_layout({1, 2, 4, 1, 0, "full"}, gpt2_config(), "gpt2");
}

TEST(SequenceParallel, LlamaTensorParallel) {
  check_layout({1, 1, 2, 2}, test::tiny_llama_config(), "llama");
  check_layout({1, 1, 4, 1}, test::tiny_llama_config(), "llama");
}

TEST(SequenceParallel, LlamaThreeDimensionalWithZeroAndRecompute) {
  check_layout({2, 2, 2, 1}, test::tiny_llama_config(), "llama");
  check_layout({2, 2, 2, 1, 1}, test::tiny_llama_config(), "llama");
  check_layout({2, 2, 2, 1, 2}, test::tiny_llama_config(), "llama");
  check_layout({2, 2, 2, 1, 3, "selective"}, test::tiny_llama_config(), "llama");
  check_layout({2, 2, 2, 2, 2, "full"}, test::tiny_llama_config(), "llama");
}

}  // namespace
}  // namespace loom
