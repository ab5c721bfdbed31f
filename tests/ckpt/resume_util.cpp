// Checkpoint resume test support: runs on a sub-communicator, fresh directories, the checks.
#include "tests/ckpt/resume_util.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "tests/parallel/equivalence_util.h"
#include "tests/support/mpi_test_env.h"

namespace loom::test {

TrainRun train_resumable(Config c, int until, bool resume, int save_at) {
  const ParallelConfig& p = c.parallel;
  const int size = p.dp * p.pp * p.tp * p.cp, rank = world_rank();
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, rank < size ? 0 : MPI_UNDEFINED, rank, &sub);
  TrainRun out;
  if (rank >= size) return out;
  c.checkpoint.resume = resume ? "auto" : "none";
  {
    auto pc = make_parallel_ctx(Grid(p.dp, p.pp, p.tp, p.order, p.cp), sub);
    Trainer t(c, *pc, synthetic_samples(c.model.vocab_size, c.model.seq_len));
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

std::string fresh_dir(const std::string& group, const std::string& name) {
  std::string dir = std::string(LOOM_BINARY_DIR) + "/" + group + "/" + name;
  if (world_rank() == 0) std::filesystem::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

void expect_continues(const TrainRun& r, const TrainRun& straight, const std::string& what) {
  ASSERT_EQ(r.losses.size(), 10u) << what;
  for (size_t i = 0; i < 10; ++i)
    EXPECT_NEAR(r.losses[i], straight.losses[10 + i], kReorderLoss * straight.losses[10 + i])
        << what << " step " << 11 + i;
  double steps_lr = 0;
  for (double lr : straight.lrs) steps_lr += lr;
  const WorstTensor w = worst_in_steps(r.weights, straight.weights, 32, steps_lr);
  EXPECT_LE(w.value, kReorderWeightSteps) << what << ": " << w.name;
}

void expect_bitwise_resume(const TrainRun& first, const TrainRun& second,
                           const TrainRun& straight) {
  std::vector<double> joined = first.losses;
  joined.insert(joined.end(), second.losses.begin(), second.losses.end());
  ASSERT_EQ(joined.size(), straight.losses.size());
  for (size_t i = 0; i < joined.size(); ++i) EXPECT_EQ(joined[i], straight.losses[i]) << i;
  for (const auto& [n, t] : straight.weights)
    EXPECT_TRUE(t.data == second.weights.at(n).data) << n << " differs";
}

}  // namespace loom::test
