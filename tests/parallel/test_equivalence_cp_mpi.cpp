// Context parallelism (parallel.cp) trains like the single rank, within the reorder tolerance
// class (tests/support/tolerance.h): cp2 and cp4 alone, and with tensor, sequence, pipeline
// (interleaved too) and data parallelism, ZeRO 1/2/3 and recompute, for gpt2 (learned
// positions) and llama (RoPE). Each run also checks that its buffers are the memory model's.
// Runs under mpirun -np 8; smaller layouts use the first dp*pp*tp*cp ranks.
#include <gtest/gtest.h>

#include "layout/run_layout.h"
#include "tests/parallel/equivalence_util.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

Config gpt2_config() { return test::tiny_parallel_config(); }

struct Layout {
  int cp, dp, pp, tp, micro;
  int zero = 0;
  const char* recompute = "none";
  bool sp = false;
  int v = 1;
};

void check_layout(const Layout& l, const Config& base, const std::string& what) {
  Config c = base;
  c.parallel.cp = l.cp, c.parallel.dp = l.dp, c.parallel.pp = l.pp, c.parallel.tp = l.tp;
  c.parallel.micro_batch_size = l.micro;
  c.parallel.sequence_parallel = l.sp;
  c.parallel.virtual_stages = l.v;
  c.optimizer.zero_stage = l.zero;
  c.train.recompute = l.recompute;
  const std::string name = what + " cp" + std::to_string(l.cp) + "xdp" + std::to_string(l.dp) +
                           "xpp" + std::to_string(l.pp) + (l.v > 1 ? "(v2)" : "") + "xtp" +
                           std::to_string(l.tp) + (l.sp ? " sp" : "") + " micro" +
                           std::to_string(l.micro) + " zero" + std::to_string(l.zero) +
                           " recompute " + l.recompute;
  const std::optional<test::RunResult> got = test::expect_equals_single_rank(c, base, name);
  if (!got) return;  // ranks other than 0
  SCOPED_TRACE(name);
  // Rank 0 (coordinate 0 on every axis) allocated what the memory model counts with cp.
  const GridDims grid{l.dp, l.pp, l.tp, l.cp};
  const RankMemory mem = RunLayout(c, grid, Coord{}).memory(DeviceTraits{});
  EXPECT_EQ(got->memory.activations, mem.activations + mem.scratch + mem.logits);
}

TEST(ContextParallel, Gpt2Alone) {
  check_layout({2, 1, 1, 1, 2}, gpt2_config(), "gpt2");
  check_layout({4, 1, 1, 1, 1}, gpt2_config(), "gpt2");  // chunks of one token
}

TEST(ContextParallel, LlamaAlone) {
  check_layout({2, 1, 1, 1, 2}, test::tiny_llama_config(), "llama");
  check_layout({4, 1, 1, 1, 1}, test::tiny_llama_config(), "llama");
}

TEST(ContextParallel, WithTensorAndSequenceParallel) {
  check_layout({2, 1, 1, 2, 2}, gpt2_config(), "gpt2");
  check_layout({2, 1, 1, 2, 2, 0, "none", true}, gpt2_config(), "gpt2");
  check_layout({2, 1, 1, 4, 1}, test::tiny_llama_config(), "llama");
  check_layout({2, 1, 1, 2, 1, 0, "none", true}, test::tiny_llama_config(), "llama");
}

// cp2 x tp2 with ZeRO 1-3 (sharded over the two cp replicas) and both recompute modes.
TEST(ContextParallel, WithTensorParallelZeroAndRecompute) {
  check_layout({2, 1, 1, 2, 2, 1, "selective", true}, gpt2_config(), "gpt2");
  check_layout({2, 1, 1, 2, 2, 2, "full"}, gpt2_config(), "gpt2");
  check_layout({2, 1, 1, 2, 2, 3, "full", true}, gpt2_config(), "gpt2");
  check_layout({2, 1, 1, 2, 1, 1, "full", true}, test::tiny_llama_config(), "llama");
  check_layout({2, 1, 1, 2, 1, 2, "selective"}, test::tiny_llama_config(), "llama");
  check_layout({2, 1, 1, 2, 1, 3, "selective", true}, test::tiny_llama_config(), "llama");
}

TEST(ContextParallel, WithPipelineZeroAndRecompute) {
  for (int zero = 1; zero <= 3; ++zero) {
    check_layout({2, 1, 2, 1, 1, zero}, gpt2_config(), "gpt2");  // tied across stages
    check_layout({2, 1, 2, 1, 1, zero}, test::tiny_llama_config(), "llama");
  }
  check_layout({2, 1, 2, 1, 1, 1, "selective"}, gpt2_config(), "gpt2");
  check_layout({2, 1, 2, 1, 1, 2, "full"}, test::tiny_llama_config(), "llama");
  check_layout({2, 1, 2, 2, 1, 3, "full"}, gpt2_config(), "gpt2");
}

TEST(ContextParallel, WithDataParallelAndInterleavedPipeline) {
  check_layout({2, 2, 2, 1, 1, 2}, gpt2_config(), "gpt2");
  check_layout({2, 2, 1, 2, 1, 3, "selective"}, test::tiny_llama_config(), "llama");
  check_layout({2, 1, 2, 2, 1, 1, "none", true, 2}, gpt2_config(), "gpt2");
  check_layout({2, 1, 2, 1, 1, 3, "full", false, 2}, test::tiny_llama_config(), "llama");
}

}  // namespace
}  // namespace loom
