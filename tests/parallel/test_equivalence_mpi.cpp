// The central invariant: every (dp, pp, tp, micro-batch, schedule, ZeRO stage) layout trains
// like the single rank: step 1's loss and gradient, the loss of each of 10 steps and the final
// weights, within the reorder tolerance class (tests/support/tolerance.h). Runs under
// mpirun -np 8; smaller layouts use the first dp*pp*tp ranks.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "tests/parallel/equivalence_util.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

struct Layout {
  int dp, pp, tp, micro;
  const char* schedule;
  std::vector<int> stage_layers;
  int zero = 0;
};

std::string name_of(const Layout& l) {
  std::string s = "dp" + std::to_string(l.dp) + "xpp" + std::to_string(l.pp) + "xtp" +
                  std::to_string(l.tp) + " micro" + std::to_string(l.micro) + " " + l.schedule +
                  " zero" + std::to_string(l.zero);
  if (!l.stage_layers.empty()) {
    s += " split";
    for (int n : l.stage_layers) s += " " + std::to_string(n);
  }
  return s;
}

void check_layout(const Layout& l, const Config& base = test::tiny_parallel_config()) {
  Config c = base;
  c.parallel.dp = l.dp, c.parallel.pp = l.pp, c.parallel.tp = l.tp;
  c.parallel.micro_batch_size = l.micro;
  c.parallel.schedule = l.schedule;
  c.parallel.stage_layers = l.stage_layers;
  c.optimizer.zero_stage = l.zero;
  const int size = l.dp * l.pp * l.tp, rank = test::world_rank();
  ASSERT_LE(size, test::world_size());
  const test::RunResult* ref = rank == 0 ? &test::single_rank_run(base) : nullptr;
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, rank < size ? 0 : MPI_UNDEFINED, rank, &sub);
  if (rank >= size) return;
  test::RunResult got = test::run_layout(c, sub);
  MPI_Comm_free(&sub);
  if (rank != 0) return;
  test::expect_reorder_equal(got, *ref, c.model.d_model, name_of(l));
}

TEST(Equivalence, ReferenceLossFalls) {
  if (test::world_rank() != 0) return;
  const auto& ref = test::single_rank_run(test::tiny_parallel_config());
  // The compared trajectories must actually move: 10 steps take the loss down by > 0.1.
  EXPECT_LT(ref.losses.back(), ref.losses.front() - 0.1);
}

// The bounds can fail: one of the 80 samples of the run with wrong targets (as a layout that
// routed a sample wrongly would have) exceeds them. Sample 2 is in step 1 (the gradient and
// every later check see it), sample 21 in step 3 (losses and weights see it).
TEST(Equivalence, BoundsCatchOneWrongSample) {
  if (test::world_rank() != 0) return;
  const Config c = test::tiny_parallel_config();
  const test::RunResult& ref = test::single_rank_run(c);
  for (int64_t bad : {int64_t(2), int64_t(21)}) {
    SampleFn good = test::synthetic_samples(c.model.vocab_size, c.model.seq_len);
    const int T = c.model.seq_len, V = c.model.vocab_size;
    SampleFn planted = [=](int64_t first, int rows, int32_t* in, int32_t* tg) {
      good(first, rows, in, tg);
      for (int r = 0; r < rows; ++r)
        if (first + r == bad)
          for (int t = 0; t < T; ++t) tg[r * T + t] = (tg[r * T + t] + 1) % V;
    };
    const test::RunDiff d =
        test::compare_runs(test::run_layout(c, MPI_COMM_SELF, planted), ref, c.model.d_model);
    std::printf("sample %d wrong: loss %.1e, step-1 grad %.1e, weights %.1e lr\n", int(bad),
                d.later_loss, d.grad1.value, d.weights.value);
    EXPECT_GT(d.later_loss, 3 * test::kReorderLoss) << "sample " << bad;
    EXPECT_GT(d.weights.value, 5 * test::kReorderWeightSteps) << "sample " << bad;
    if (bad < c.train.global_batch_size) {
      EXPECT_GT(d.grad1.value, 1e3 * test::kReorderGrad) << "sample " << bad;
    }
  }
}

TEST(Equivalence, TensorParallel) {
  check_layout({1, 1, 2, 2, "1f1b", {}});
  check_layout({1, 1, 4, 2, "1f1b", {}});
}

TEST(Equivalence, PipelineParallel) {
  check_layout({1, 2, 1, 2, "1f1b", {}});      // 4 micro-batches > 2 stages
  check_layout({1, 4, 1, 1, "1f1b", {}});      // 8 micro-batches > 4 stages
  check_layout({1, 4, 1, 4, "1f1b", {}});      // 2 micro-batches < 4 stages
  check_layout({1, 2, 1, 2, "1f1b", {1, 3}});  // uneven split
}

TEST(Equivalence, GPipeEqualsOneFOneB) {
  check_layout({1, 4, 1, 1, "gpipe", {}});
  check_layout({1, 2, 2, 2, "gpipe", {}});
}

TEST(Equivalence, DataParallel) {
  check_layout({2, 1, 1, 2, "1f1b", {}});
  check_layout({4, 1, 1, 1, "1f1b", {}});
}

TEST(Equivalence, ThreeDimensional) {
  check_layout({2, 2, 2, 1, "1f1b", {}});  // 4 micro-batches per dp rank, 2 stages
  check_layout({2, 2, 2, 4, "1f1b", {}});  // 1 micro-batch < 2 stages
  check_layout({1, 2, 4, 1, "1f1b", {}});  // pp2 x tp4
  check_layout({2, 4, 1, 1, "1f1b", {}});  // dp2 x pp4
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// ZeRO: d_model 34 and 9 positions make 61982 parameters per rank on dp4 (not a multiple of 4),
// so shards straddle tensors and the last one is padded.
Config zero_config() {
  Config c = test::tiny_parallel_config();
  c.model.n_head = 2;
  c.model.d_model = 34;
  c.model.max_positions = 9;
  return c;
}

TEST(EquivalenceZero, StageOne) {
  for (int zero : {0, 1}) {
    check_layout({2, 1, 1, 2, "1f1b", {}, zero}, zero_config());
    check_layout({4, 1, 1, 1, "1f1b", {}, zero}, zero_config());
    check_layout({2, 2, 2, 1, "1f1b", {}, zero}, zero_config());
  }
}

TEST(EquivalenceZero, StageThree) {
  check_layout({2, 1, 1, 2, "1f1b", {}, 3}, zero_config());
  check_layout({4, 1, 1, 1, "1f1b", {}, 3}, zero_config());
  check_layout({2, 2, 2, 1, "1f1b", {}, 3}, zero_config());
  check_layout({2, 4, 1, 1, "gpipe", {}, 3}, zero_config());
}

TEST(EquivalenceZero, StageTwo) {
  check_layout({2, 1, 1, 2, "1f1b", {}, 2}, zero_config());
  check_layout({4, 1, 1, 1, "1f1b", {}, 2}, zero_config());
  check_layout({2, 2, 2, 1, "1f1b", {}, 2}, zero_config());
  check_layout({2, 2, 2, 1, "gpipe", {}, 2}, zero_config());
  check_layout({2, 4, 1, 1, "1f1b", {}, 2}, zero_config());
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// ZeRO's promise on dp4: stage 1 holds a quarter of the optimizer state, stage 2 also a quarter
// of the gradients, stage 3 also a quarter of the parameters (staging and gather buffers are
// reported apart, as communication buckets).
TEST(EquivalenceZero, MemoryShrinksWithDp4) {
  const int rank = test::world_rank();
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, rank < 4 ? 0 : MPI_UNDEFINED, rank, &sub);
  if (rank >= 4) return;
  MemoryReport mem[4];
  for (int zero = 0; zero < 4; ++zero) {
    Config c = zero_config();
    c.parallel.dp = 4;
    c.parallel.micro_batch_size = 1;
    c.train.steps = 1;
    c.optimizer.zero_stage = zero;
    mem[zero] = test::run_layout(c, sub).memory;
  }
  MPI_Comm_free(&sub);
  auto within5 = [](size_t got, double want) {
    return std::fabs(double(got) - want) <= 0.05 * want;
  };
  EXPECT_TRUE(within5(mem[1].optimizer, mem[0].optimizer / 4.0))
      << mem[1].optimizer << " vs " << mem[0].optimizer;
  EXPECT_EQ(mem[1].grads, mem[0].grads);
  EXPECT_TRUE(within5(mem[2].optimizer, mem[0].optimizer / 4.0));
  EXPECT_TRUE(within5(mem[2].grads, mem[0].grads / 4.0)) << mem[2].grads << " vs " << mem[0].grads;
  EXPECT_GT(mem[2].grad_buckets, 0u);
  EXPECT_EQ(mem[0].grad_buckets, 0u);
  EXPECT_EQ(mem[2].params, mem[0].params);
  EXPECT_TRUE(within5(mem[3].params, mem[0].params / 4.0))
      << mem[3].params << " vs " << mem[0].params;
  EXPECT_TRUE(within5(mem[3].grads, mem[0].grads / 4.0));
  EXPECT_TRUE(within5(mem[3].optimizer, mem[0].optimizer / 4.0));
  EXPECT_GT(mem[3].param_buckets, 0u);
  if (rank == 0)
    for (int z = 0; z < 4; ++z)
      std::printf(
          "dp4 zero%d per rank: params %zu B (+ %zu B gather), grads %zu B (+ %zu B "
          "buckets), optimizer %zu B\n",
          z, mem[z].params, mem[z].param_buckets, mem[z].grads, mem[z].grad_buckets,
          mem[z].optimizer);
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// Activation recomputation changes memory, not numbers: selective and full give exactly the
// losses and weights of none (the recomputed forward repeats the same deterministic arithmetic),
// with less activation memory, on one rank and on dp2 x pp2 x tp2.
TEST(EquivalenceRecompute, SelectiveAndFullEqualNone) {
  for (int layout = 0; layout < 2; ++layout) {
    const int dp = layout ? 2 : 1, pp = layout ? 2 : 1, tp = layout ? 2 : 1;
    const int size = dp * pp * tp, rank = test::world_rank();
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, rank < size ? 0 : MPI_UNDEFINED, rank, &sub);
    if (rank >= size) continue;
    test::RunResult r[3];
    const char* modes[3] = {"none", "selective", "full"};
    for (int i = 0; i < 3; ++i) {
      Config c = test::tiny_parallel_config();
      c.parallel.dp = dp, c.parallel.pp = pp, c.parallel.tp = tp;
      c.parallel.micro_batch_size = 1;
      c.optimizer.zero_stage = layout;  // ZeRO-1 on the 3-D layout
      c.train.recompute = modes[i];
      r[i] = test::run_layout(c, sub);
    }
    MPI_Comm_free(&sub);
    for (int i = 1; i < 3; ++i) {
      EXPECT_LT(r[i].memory.activations, r[i - 1].memory.activations) << modes[i];
      if (rank != 0) continue;
      EXPECT_EQ(r[i].losses, r[0].losses) << modes[i] << " on " << size << " ranks";
      for (const auto& [tensor, t] : r[0].weights)
        EXPECT_TRUE(r[i].weights.at(tensor).data == t.data) << modes[i] << ": " << tensor;
    }
    if (rank == 0)
      std::printf("recompute on %d ranks: activations none %zu B, selective %zu B, full %zu B\n",
                  size, r[0].memory.activations, r[1].memory.activations, r[2].memory.activations);
  }
}

}  // namespace
}  // namespace loom
