// The central invariant: every (dp, pp, tp, micro-batch, schedule) layout trains exactly like
// the single rank — the loss of each of 10 steps and the final weights, within fp32 tolerance.
// Runs under mpirun -np 8; smaller layouts use the first dp*pp*tp ranks.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/parallel/equivalence_util.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

// fp32 runs that differ only in summation order (TP partial sums, DP all-reduce, micro-batch
// accumulation) drift apart by a few 1e-7 per step; 10 AdamW steps stay well below these.
constexpr double kLossTol = 1e-5;    // relative, per step
constexpr double kWeightTol = 2e-5;  // norm-wise relative, per tensor

struct Layout {
  int dp, pp, tp, micro;
  const char* schedule;
  std::vector<int> stage_layers;
};

std::string name_of(const Layout& l) {
  std::string s = "dp" + std::to_string(l.dp) + "xpp" + std::to_string(l.pp) + "xtp" +
                  std::to_string(l.tp) + " micro" + std::to_string(l.micro) + " " + l.schedule;
  if (!l.stage_layers.empty()) {
    s += " split";
    for (int n : l.stage_layers) s += " " + std::to_string(n);
  }
  return s;
}

const test::RunResult& reference() {
  static test::RunResult ref = [] {
    Config c = test::tiny_parallel_config();
    return test::run_layout(c, MPI_COMM_SELF);
  }();
  return ref;
}

void check_layout(const Layout& l) {
  Config c = test::tiny_parallel_config();
  c.parallel.dp = l.dp, c.parallel.pp = l.pp, c.parallel.tp = l.tp;
  c.parallel.micro_batch_size = l.micro;
  c.parallel.schedule = l.schedule;
  c.parallel.stage_layers = l.stage_layers;
  const int size = l.dp * l.pp * l.tp, rank = test::world_rank();
  ASSERT_LE(size, test::world_size());
  const test::RunResult* ref = rank == 0 ? &reference() : nullptr;
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, rank < size ? 0 : MPI_UNDEFINED, rank, &sub);
  if (rank >= size) return;
  test::RunResult got = test::run_layout(c, sub);
  MPI_Comm_free(&sub);
  if (rank != 0) return;
  const std::string name = name_of(l);
  ASSERT_EQ(got.losses.size(), ref->losses.size());
  for (size_t s = 0; s < got.losses.size(); ++s)
    EXPECT_NEAR(got.losses[s], ref->losses[s], kLossTol * ref->losses[s])
        << name << " step " << s + 1;
  auto [err, tensor] = test::worst_weight_error(got.weights, ref->weights, c.model.d_model);
  EXPECT_LT(err, kWeightTol) << name << ": worst tensor " << tensor;
  std::printf("%-34s loss step10 %.6f (single %.6f)  worst weight rel err %.2e (%s)\n",
              name.c_str(), got.losses.back(), ref->losses.back(), err, tensor.c_str());
}

TEST(Equivalence, ReferenceLossFalls) {
  if (test::world_rank() != 0) return;
  const auto& ref = reference();
  // The compared trajectories must actually move: 10 steps take the loss down by > 0.1.
  EXPECT_LT(ref.losses.back(), ref.losses.front() - 0.1);
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
