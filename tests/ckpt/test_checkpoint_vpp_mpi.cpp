// Checkpoints across virtual pipeline stages: tensors keep their global layer names, so a run
// saved with interleaved 1F1B (parallel.virtual_stages 2) resumes bitwise on its own layout
// and continues the same loss curve on layouts with other pp and v; a v=1 checkpoint resumes
// with v=2.
#include <gtest/gtest.h>

#include <filesystem>

#include "ckpt/checkpoint.h"
#include "tests/parallel/equivalence_util.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

struct TrainRun {
  std::vector<double> losses;  // one per step run by this call
  std::vector<double> lrs;
  std::map<std::string, CanonicalTensor> weights;
};

struct Layout {
  int dp, pp, tp, v, zero;
};

// 4 layers, 8 sequences a step, micro-batches of 1: every layout below splits them.
Config with_layout(const Layout& l, const std::string& dir) {
  Config c = test::tiny_parallel_config();
  c.parallel.dp = l.dp, c.parallel.pp = l.pp, c.parallel.tp = l.tp;
  c.parallel.virtual_stages = l.v;
  c.parallel.micro_batch_size = 1;
  c.optimizer.zero_stage = l.zero;
  c.train.steps = 20;
  c.checkpoint.dir = dir;
  return c;
}

// Runs on the first dp*pp*tp ranks: optionally resumes, trains until `until`, optionally
// saving after `save_at`. Other ranks return an empty TrainRun.
TrainRun train(const Layout& l, const std::string& dir, int until, bool resume, int save_at = -1) {
  Config c = with_layout(l, dir);
  const int size = l.dp * l.pp * l.tp, rank = test::world_rank();
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, rank < size ? 0 : MPI_UNDEFINED, rank, &sub);
  TrainRun out;
  if (rank >= size) return out;
  c.checkpoint.resume = resume ? "auto" : "none";
  {
    auto pc = make_parallel_ctx(Grid(l.dp, l.pp, l.tp), sub);
    Trainer t(c, *pc, test::synthetic_samples(c.model.vocab_size, c.model.seq_len));
    t.init_weights();
    t.resume();
    for (int s = t.start_step() + 1; s <= until; ++s) {
      const StepStats st = t.train_step(s);
      out.losses.push_back(st.loss);
      out.lrs.push_back(st.lr);
      if (s == save_at) t.save(s);
    }
    out.weights = gather_canonical(t.layout(), t.full_params().data(), *pc);
  }
  MPI_Comm_free(&sub);
  return out;
}

std::string fresh_dir(const std::string& name) {
  std::string dir = std::string(LOOM_BINARY_DIR) + "/test_checkpoint_vpp/" + name;
  if (test::world_rank() == 0) std::filesystem::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

std::string name(const Layout& l) {
  return "dp" + std::to_string(l.dp) + " pp" + std::to_string(l.pp) + " v" + std::to_string(l.v) +
         " tp" + std::to_string(l.tp) + " zero" + std::to_string(l.zero);
}

TEST(CheckpointVpp, ExactResumeInterleaved) {
  const Layout l{2, 2, 2, 2, 1};
  const std::string dir = fresh_dir("exact");
  const TrainRun straight = train(l, dir + "_straight", 20, false);
  const TrainRun first = train(l, dir, 10, false, 10);
  const TrainRun second = train(l, dir, 20, true);
  if (test::world_rank() != 0) return;
  std::vector<double> joined = first.losses;
  joined.insert(joined.end(), second.losses.begin(), second.losses.end());
  ASSERT_EQ(joined.size(), straight.losses.size());
  for (size_t i = 0; i < joined.size(); ++i) EXPECT_EQ(joined[i], straight.losses[i]) << i;
  for (const auto& [n, t] : straight.weights)
    EXPECT_TRUE(t.data == second.weights.at(n).data) << n << " differs";
}

// The resumed steps 11-20 equal the uninterrupted single rank's within the reorder tolerance
// class (tests/support/tolerance.h): the runs summed in different orders since step 1.
void expect_continues(const TrainRun& r, const TrainRun& straight, const std::string& what) {
  ASSERT_EQ(r.losses.size(), 10u) << what;
  for (size_t i = 0; i < 10; ++i)
    EXPECT_NEAR(r.losses[i], straight.losses[10 + i], test::kReorderLoss * straight.losses[10 + i])
        << what << " step " << 11 + i;
  double steps_lr = 0;
  for (double lr : straight.lrs) steps_lr += lr;
  const test::WorstTensor w = test::worst_in_steps(r.weights, straight.weights, 32, steps_lr);
  EXPECT_LE(w.value, test::kReorderWeightSteps) << what << ": " << w.name;
}

TEST(CheckpointVpp, ReshardAcrossVirtualStages) {
  const std::string dir = fresh_dir("reshard");
  const TrainRun straight = train({1, 1, 1, 1, 0}, dir + "_ref", 20, false);
  // Saved with v=2 (chunk c of stage s holds layer 2c + s), resumed with v=1 and other pp.
  train({2, 2, 2, 2, 1}, dir, 10, false, 10);
  for (const Layout& l : {Layout{1, 1, 1, 1, 0}, Layout{1, 4, 2, 1, 0}, Layout{2, 2, 2, 1, 2},
                          Layout{1, 2, 1, 2, 0}, Layout{4, 2, 1, 2, 3}}) {
    const TrainRun r = train(l, dir, 20, true);
    if (test::world_rank() == 0) expect_continues(r, straight, "v2 -> " + name(l));
  }
  // Saved with v=1 on 4 stages, resumed interleaved on 2 stages of 2 chunks.
  const std::string dir1 = fresh_dir("reshard_v1");
  train({1, 4, 2, 1, 0}, dir1, 10, false, 10);
  const TrainRun r = train({2, 2, 2, 2, 2}, dir1, 20, true);
  if (test::world_rank() == 0) expect_continues(r, straight, "v1 pp4 -> v2 pp2");
}

}  // namespace
}  // namespace loom
