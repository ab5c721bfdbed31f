// parallel.overlap: overlapped runs equal the non-overlapped ones and the single-rank run.
#include <gtest/gtest.h>

#include <cstdio>

#include "tests/parallel/equivalence_util.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

struct Case {
  int dp, pp, tp, micro, zero;
  const char* schedule = "1f1b";
  std::vector<int> split = {};  // parallel.stage_layers
};

// Overlap changes when reductions run, not what they add, except for the association of sums of
// more than two addends: every DP reduction of a dp2 run (and the tied-embedding sum over the
// first and last stage) adds two numbers, which IEEE addition does commutatively, so the
// blocking and non-blocking algorithms and any bucketing give the same bits. Gradient shards
// (ZeRO 2/3) accumulate the micro-batches in the same order either way, gathers and pipeline
// transfers copy. With dp4 each element is a sum of four, associated as the MPI algorithm (its
// blocking or non-blocking variant, the bucket size) chooses: equal within the tolerance.
bool bitwise(const Case& k) { return k.dp <= 2; }

// The equivalence test's ZeRO model: 61982 parameters per rank on dp4, so shards straddle
// tensors and layers and the last one is padded.
Config overlap_config() {
  Config c = test::tiny_parallel_config();
  c.model.n_head = 2;
  c.model.d_model = 34;
  c.model.max_positions = 9;
  return c;
}

std::string name_of(const Case& k) {
  char b[96];
  std::snprintf(b, sizeof b, "dp%d pp%d tp%d micro%d zero%d %s", k.dp, k.pp, k.tp, k.micro, k.zero,
                k.schedule);
  std::string s = b;
  for (size_t i = 0; i < k.split.size(); ++i)
    s += (i ? "," : " split ") + std::to_string(k.split[i]);
  return s;
}

void check(const Case& k) {
  static const Config base = overlap_config();
  static test::RunResult ref;  // the single-rank run, rank 0 only
  const int rank = test::world_rank();
  if (rank == 0 && ref.losses.empty()) ref = test::run_layout(base, MPI_COMM_SELF);
  Config c = base;
  c.parallel.dp = k.dp, c.parallel.pp = k.pp, c.parallel.tp = k.tp;
  c.parallel.micro_batch_size = k.micro;
  c.parallel.schedule = k.schedule;
  c.parallel.stage_layers = k.split;
  c.optimizer.zero_stage = k.zero;
  const int size = k.dp * k.pp * k.tp;
  ASSERT_LE(size, test::world_size());
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, rank < size ? 0 : MPI_UNDEFINED, rank, &sub);
  if (rank >= size) return;
  c.parallel.overlap = false;
  const test::RunResult off = test::run_layout(c, sub);
  c.parallel.overlap = true;
  const test::RunResult on = test::run_layout(c, sub);
  MPI_Comm_free(&sub);
  const std::string name = name_of(k);
  // Overlap keeps a second layer buffer for ZeRO 2 staging and ZeRO 3 gathers, nothing else.
  EXPECT_EQ(on.memory.grads, off.memory.grads) << name;
  EXPECT_EQ(on.memory.optimizer, off.memory.optimizer) << name;
  EXPECT_EQ(on.memory.grad_buckets > off.memory.grad_buckets, k.zero >= 2) << name;
  EXPECT_EQ(on.memory.param_buckets > off.memory.param_buckets, k.zero == 3) << name;
  if (rank != 0) return;
  // Against the single rank: the reorder tolerance class (tests/support/tolerance.h).
  test::expect_reorder_equal(on, ref, c.model.d_model, name + " on vs single rank");
  if (bitwise(k)) {
    EXPECT_EQ(on.losses, off.losses) << name;
    for (const auto& [tensor, t] : off.weights)
      EXPECT_TRUE(on.weights.at(tensor).data == t.data) << name << ": " << tensor;
  } else {
    test::expect_reorder_equal(on, off, c.model.d_model, name + " on vs off");
  }
}

TEST(Overlap, DataParallelZeroStages) {
  for (int zero : {0, 1, 2, 3}) check({2, 1, 1, 2, zero});
  for (int zero : {0, 1, 2, 3}) check({4, 1, 1, 1, zero});
}

TEST(Overlap, ThreeDimensionalZeroStages) {
  for (int zero : {0, 1, 2, 3}) check({2, 2, 2, 1, zero});
}

TEST(Overlap, PipelineReceivesPostedEarly) {
  check({1, 2, 1, 2, 0});  // 1F1B, 4 micro-batches through 2 stages
  check({1, 3, 1, 1, 0});  // middle stage: receives both ways, 8 micro-batches
  // Every forward before any backward; 3 layers on stage 0, so the two staging and working
  // buffers of ZeRO 3 end a pass on either one.
  check({2, 2, 1, 1, 3, "gpipe", {3, 1}});
}

}  // namespace
}  // namespace loom
