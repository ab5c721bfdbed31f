// Checkpoints across context parallelism: the ZeRO shards of a cp run span dp x cp, and the
// checkpoint holds whole canonical tensors and moments, so a run saved with parallel.cp 2
// resumes bitwise on its own layout and continues the same loss curve on layouts with other
// cp, dp, pp, tp and ZeRO stages; a cp=1 checkpoint resumes with cp 2. The same for a Mixture
// of Experts model (its experts' c_proj rows split per expert over tp) across tp, pp and dp.
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
  int dp, pp, tp, cp, zero;
  bool moe = false;  // 4 experts, top-2, capacity 1.25
  int size() const { return dp * pp * tp * cp; }
};

// The llama variant of the tiny model (RoPE positions follow the cp chunks), 8 sequences a
// step in micro-batches of 1.
Config with_layout(const Layout& l, const std::string& dir) {
  Config c = test::tiny_parallel_config();
  c.model.arch = "llama";
  c.model.n_head = 8;
  c.model.n_kv_head = 4;
  c.model.ffn_hidden = 48;
  c.model.rope_theta = 100.0;
  c.model.tie_embeddings = false;
  c.parallel.dp = l.dp, c.parallel.pp = l.pp, c.parallel.tp = l.tp, c.parallel.cp = l.cp;
  c.parallel.micro_batch_size = 1;
  if (l.moe) {
    c.model.moe.num_experts = 4;
    c.model.moe.top_k = 2;
    c.model.moe.capacity_factor = 1.25;
  }
  c.optimizer.zero_stage = l.zero;
  c.train.steps = 20;
  c.checkpoint.dir = dir;
  return c;
}

// Runs on the first dp*pp*tp*cp ranks: optionally resumes, trains until `until`, optionally
// saving after `save_at`. Other ranks return an empty TrainRun.
TrainRun train(const Layout& l, const std::string& dir, int until, bool resume, int save_at = -1) {
  Config c = with_layout(l, dir);
  const int rank = test::world_rank();
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, rank < l.size() ? 0 : MPI_UNDEFINED, rank, &sub);
  TrainRun out;
  if (rank >= l.size()) return out;
  c.checkpoint.resume = resume ? "auto" : "none";
  {
    auto pc = make_parallel_ctx(Grid(l.dp, l.pp, l.tp, "tp-dp-pp", l.cp), sub);
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
  std::string dir = std::string(LOOM_BINARY_DIR) + "/test_checkpoint_cp/" + name;
  if (test::world_rank() == 0) std::filesystem::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

std::string name(const Layout& l) {
  return "dp" + std::to_string(l.dp) + " pp" + std::to_string(l.pp) + " tp" +
         std::to_string(l.tp) + " cp" + std::to_string(l.cp) + " zero" + std::to_string(l.zero);
}

TEST(CheckpointCp, ExactResume) {
  const Layout l{2, 1, 2, 2, 2};
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

TEST(CheckpointCp, ReshardAcrossContextParallelism) {
  const std::string dir = fresh_dir("reshard");
  const TrainRun straight = train({1, 1, 1, 1, 0}, dir + "_ref", 20, false);
  // Saved with cp 2 and ZeRO-3 over dp x cp = 4, resumed with other cp, layouts and stages.
  train({2, 2, 1, 2, 3}, dir, 10, false, 10);
  for (const Layout& l : {Layout{1, 1, 1, 1, 0}, Layout{2, 1, 1, 4, 1}, Layout{1, 2, 2, 2, 2},
                          Layout{2, 2, 2, 1, 3}}) {
    const TrainRun r = train(l, dir, 20, true);
    if (test::world_rank() == 0) expect_continues(r, straight, "cp2 -> " + name(l));
  }
  // Saved without context parallelism (ZeRO-1 over dp 4), resumed with cp 4.
  const std::string dir1 = fresh_dir("reshard_cp1");
  train({4, 1, 2, 1, 1}, dir1, 10, false, 10);
  const TrainRun r = train({1, 1, 2, 4, 2}, dir1, 20, true);
  if (test::world_rank() == 0) expect_continues(r, straight, "cp1 dp4 -> cp4");
}

TEST(CheckpointCp, MoeReshardAcrossLayouts) {
  const std::string dir = fresh_dir("moe");
  const TrainRun straight = train({1, 1, 1, 1, 0, true}, dir + "_ref", 20, false);
  train({2, 2, 2, 1, 2, true}, dir, 10, false, 10);
  for (const Layout& l : {Layout{1, 1, 1, 1, 0, true}, Layout{1, 2, 4, 1, 3, true},
                          Layout{8, 1, 1, 1, 1, true}}) {
    const TrainRun r = train(l, dir, 20, true);
    if (test::world_rank() == 0) expect_continues(r, straight, "moe dp2 pp2 tp2 -> " + name(l));
  }
}

}  // namespace
}  // namespace loom
