// Checkpoints under MPI: 10 steps + save + resume + 10 steps equals 20 straight steps bitwise
// on the same layout; resuming a dp2xpp2xtp2 ZeRO-1 checkpoint on other layouts continues the
// same loss curve; the 3-D checkpoint holds the same canonical weights as the single rank's.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "ckpt/checkpoint.h"
#include "core/check.h"
#include "tests/parallel/equivalence_util.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

// A resume onto another layout continues the uninterrupted run within the reorder tolerance
// class (tests/support/tolerance.h): the two runs summed in different orders since step 1.

struct TrainRun {
  std::vector<double> losses;  // one per step run by this call
  std::vector<double> lrs;     // the learning rate of each of those steps
  std::map<std::string, CanonicalTensor> weights;
};

// Runs on the first dp*pp*tp ranks: optionally resumes, trains until `until`, optionally
// saving after `save_at`. Other ranks return an empty TrainRun.
TrainRun train(Config c, int until, bool resume, int save_at = -1) {
  const int size = c.parallel.dp * c.parallel.pp * c.parallel.tp, rank = test::world_rank();
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, rank < size ? 0 : MPI_UNDEFINED, rank, &sub);
  TrainRun out;
  if (rank >= size) return out;
  c.checkpoint.resume = resume ? "auto" : "none";
  {
    auto pc = make_parallel_ctx(Grid(c.parallel.dp, c.parallel.pp, c.parallel.tp), sub);
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

Config with_layout(Config c, int dp, int pp, int tp, int zero, const std::string& dir) {
  c.parallel.dp = dp, c.parallel.pp = pp, c.parallel.tp = tp;
  c.parallel.micro_batch_size = 1;
  c.optimizer.zero_stage = zero;
  c.train.steps = 20;
  c.checkpoint.dir = dir;
  return c;
}

std::string fresh_dir(const std::string& name) {
  std::string dir = std::string(LOOM_BINARY_DIR) + "/test_checkpoint/" + name;
  if (test::world_rank() == 0) std::filesystem::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

void expect_bitwise(const TrainRun& a, const TrainRun& b, const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size()) << what;
  for (size_t i = 0; i < a.losses.size(); ++i)
    EXPECT_EQ(a.losses[i], b.losses[i]) << what << " step " << i;
  ASSERT_EQ(a.weights.size(), b.weights.size()) << what;
  for (const auto& [name, t] : a.weights)
    EXPECT_TRUE(t.data == b.weights.at(name).data) << what << ": " << name << " differs";
}

void exact_resume(int dp, int pp, int tp, int zero, const std::string& name) {
  Config c = with_layout(test::tiny_parallel_config(), dp, pp, tp, zero, fresh_dir(name));
  TrainRun straight = train(c, 20, false);
  TrainRun first = train(c, 10, false, 10);
  TrainRun second = train(c, 20, true);
  if (test::world_rank() != 0) return;
  TrainRun joined{first.losses, {}, second.weights};
  joined.losses.insert(joined.losses.end(), second.losses.begin(), second.losses.end());
  expect_bitwise(joined, straight, name);
}

TEST(Checkpoint, ExactResumeSingleRank) { exact_resume(1, 1, 1, 0, "single"); }
TEST(Checkpoint, ExactResume3DZero1) { exact_resume(2, 2, 2, 1, "3d_zero1"); }
TEST(Checkpoint, ExactResume3DZero2) { exact_resume(2, 2, 2, 2, "3d_zero2"); }
TEST(Checkpoint, ExactResume3DZero3) { exact_resume(2, 2, 2, 3, "3d_zero3"); }

// The llama family with grouped-query attention: 8 query heads over 4 kv heads, so tp 2 and 4
// split whole kv heads.
Config tiny_llama() {
  Config c = test::tiny_parallel_config();
  c.model.arch = "llama";
  c.model.n_head = 8, c.model.n_kv_head = 4, c.model.ffn_hidden = 48;
  c.model.rope_theta = 100.0;
  c.model.tie_embeddings = false;
  return c;
}

TEST(Checkpoint, LlamaExactResume3DZero3) {
  Config c = with_layout(tiny_llama(), 2, 2, 2, 3, fresh_dir("llama_3d_zero3"));
  TrainRun straight = train(c, 20, false);
  TrainRun first = train(c, 10, false, 10);
  TrainRun second = train(c, 20, true);
  if (test::world_rank() != 0) return;
  TrainRun joined{first.losses, {}, second.weights};
  joined.losses.insert(joined.losses.end(), second.losses.begin(), second.losses.end());
  expect_bitwise(joined, straight, "llama 3d zero3");
}

// Steps 11-20 of a resumed run r continue the uninterrupted single-rank run within the reorder
// tolerance class (losses, and the weights, which have drifted apart since step 1).
void expect_continues(const TrainRun& r, const TrainRun& straight, int d_model,
                      const std::string& what) {
  ASSERT_EQ(r.losses.size(), 10u) << what;
  for (size_t i = 0; i < 10; ++i)
    EXPECT_NEAR(r.losses[i], straight.losses[10 + i], test::kReorderLoss * straight.losses[10 + i])
        << what << " step " << 11 + i;
  double steps_lr = 0;
  for (double lr : straight.lrs) steps_lr += lr;
  const test::WorstTensor w = test::worst_in_steps(r.weights, straight.weights, d_model, steps_lr);
  EXPECT_LE(w.value, test::kReorderWeightSteps) << what << ": " << w.name;
}

// Save at dp2xpp2xtp2 with ZeRO-1, resume on other layouts: the loss curve continues.
void resharded_resume(const Config& base, const std::string& name) {
  const std::string dir = fresh_dir(name);
  TrainRun straight = train(with_layout(base, 1, 1, 1, 0, dir + "_ref"), 20, false);
  train(with_layout(base, 2, 2, 2, 1, dir), 10, false, 10);
  struct L {
    int dp, pp, tp, zero;
  } targets[] = {{1, 2, 4, 0}, {4, 1, 2, 1}, {1, 1, 1, 0}, {2, 2, 2, 2}, {4, 2, 1, 3}};
  for (const L& l : targets) {
    // Each target resumes from the same step-10 checkpoint (none of them saves).
    TrainRun r = train(with_layout(base, l.dp, l.pp, l.tp, l.zero, dir), 20, true);
    if (test::world_rank() != 0) continue;
    expect_continues(r, straight, base.model.d_model,
                     str("dp", l.dp, " pp", l.pp, " tp", l.tp, " zero", l.zero));
  }
}

// Sequence parallelism moves activations, not parameters or optimizer state: a run saved with it
// (dp2 x pp2 x tp2, ZeRO 1) resumes bitwise on its own layout, and continues the single-rank
// curve when resumed with SP on another tp, without SP on the same tp, and on one rank.
TEST(Checkpoint, SequenceParallelResumes) {
  const Config base = test::tiny_parallel_config();
  const std::string dir = fresh_dir("sequence_parallel");
  Config sp = with_layout(base, 2, 2, 2, 1, dir);
  sp.parallel.sequence_parallel = true;
  TrainRun straight_sp = train(sp, 20, false);
  TrainRun first = train(sp, 10, false, 10);
  TrainRun second = train(sp, 20, true);
  if (test::world_rank() == 0) {
    TrainRun joined{first.losses, {}, second.weights};
    joined.losses.insert(joined.losses.end(), second.losses.begin(), second.losses.end());
    expect_bitwise(joined, straight_sp, "sp exact resume");
  }
  TrainRun straight = train(with_layout(base, 1, 1, 1, 0, dir + "_ref"), 20, false);
  struct L {
    int dp, pp, tp, zero;
    bool sp;
  } targets[] = {{1, 1, 4, 0, true}, {2, 2, 2, 2, false}, {1, 1, 1, 0, false}};
  for (const L& l : targets) {
    Config c = with_layout(base, l.dp, l.pp, l.tp, l.zero, dir);
    c.parallel.sequence_parallel = l.sp;
    TrainRun r = train(c, 20, true);  // from the step-10 checkpoint saved with SP
    if (test::world_rank() != 0) continue;
    expect_continues(r, straight, base.model.d_model,
                     str("dp", l.dp, " pp", l.pp, " tp", l.tp, l.sp ? " sp" : "", " zero", l.zero));
  }
}

TEST(Checkpoint, ReshardedResume) { resharded_resume(test::tiny_parallel_config(), "reshard"); }
TEST(Checkpoint, LlamaReshardedResume) { resharded_resume(tiny_llama(), "llama_reshard"); }

// The canonical weights in a dp2xpp2xtp2 checkpoint equal those of the single-rank run's
// checkpoint at the same step (within the reorder tolerance class: the runs round differently).
TEST(Checkpoint, ExportOf3DEqualsSingleRank) {
  const std::string d3 = fresh_dir("export3d"), d1 = fresh_dir("export1");
  Config base = test::tiny_parallel_config();
  train(with_layout(base, 2, 2, 2, 1, d3), 10, false, 10);
  const TrainRun single_run = train(with_layout(base, 1, 1, 1, 0, d1), 10, false, 10);
  if (test::world_rank() != 0) return;
  ParamLayout single(base.model, 1, 0, 1, 0);
  std::vector<float> a(single.total()), b(single.total());
  read_checkpoint_tensors(d3 + "/step_0000010", single, a.data(), nullptr, nullptr);
  read_checkpoint_tensors(d1 + "/step_0000010", single, b.data(), nullptr, nullptr);
  double steps_lr = 0;
  for (double lr : single_run.lrs) steps_lr += lr;
  double worst = 0;
  std::string worst_name;
  for (const ParamSpec& p : single.params()) {
    const double d =
        test::max_abs_diff(p.name, &a[p.offset], &b[p.offset], p.numel(), base.model.d_model) /
        steps_lr;
    if (test::worse(d, worst)) worst = d, worst_name = p.name;
  }
  EXPECT_LE(worst, test::kReorderWeightSteps) << worst_name;
}

TEST(Checkpoint, WrongModelIsRejectedWithTheMismatch) {
  const std::string dir = fresh_dir("mismatch");
  Config base = test::tiny_parallel_config();
  train(with_layout(base, 1, 1, 1, 0, dir), 2, false, 2);
  if (test::world_rank() != 0) return;
  ModelConfig other = base.model;
  other.d_model = 64;
  try {
    verify_checkpoint(dir + "/step_0000002", other);
    ADD_FAILURE() << "a checkpoint of another model was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("d_model=32"), std::string::npos) << e.what();
  }
  // The family and its function-only keys are checked too.
  other = base.model;
  other.arch = "llama";
  try {
    verify_checkpoint(dir + "/step_0000002", other);
    ADD_FAILURE() << "a gpt2 checkpoint was accepted for a llama model";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("arch=gpt2, but this config has llama"), std::string::npos)
        << e.what();
  }
  other = base.model;
  other.norm_eps = 1e-6;
  try {
    verify_checkpoint(dir + "/step_0000002", other);
    ADD_FAILURE() << "a checkpoint of another norm_eps was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("norm_eps=1e-05"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace loom
