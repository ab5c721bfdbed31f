// Loss scaling in the training loop (cpu backend, fp32): a power-of-two scale changes no bit of
// the run, and dynamic scaling skips overflowing steps without touching weights or AdamW state.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "parallel/grid.h"
#include "tests/parallel/equivalence_util.h"
#include "tests/support/compare.h"

namespace loom {
namespace {

struct TrainRun {
  std::vector<StepStats> steps;
  std::vector<float> params;  // this rank's flat parameters after the last step
};

TrainRun train(const Config& cfg, MPI_Comm world, SampleFn samples) {
  Grid grid(cfg.parallel.dp, cfg.parallel.pp, cfg.parallel.tp, cfg.parallel.order);
  auto pc = make_parallel_ctx(grid, world);
  Trainer t(cfg, *pc, std::move(samples));
  t.init_weights();
  TrainRun r;
  for (int s = 1; s <= cfg.train.steps; ++s) r.steps.push_back(t.train_step(s));
  r.params = t.full_params();
  return r;
}

Config base() {
  Config c = test::tiny_parallel_config();
  c.train.steps = 6;
  return c;
}

// Multiplying the loss by 2^k scales every gradient exactly (the backward is linear in the
// loss weight and fp32 products by powers of two are exact), and the update divides it out
// exactly: same losses, norms and weights, bit for bit. 1 rank and dp2 x ZeRO-1.
TEST(LossScaling, PowerOfTwoScaleIsBitwiseInvisible) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  for (int dp : {1, 2}) {
    if (dp > world) continue;
    Config none = base();
    none.parallel.dp = dp;
    none.optimizer.zero_stage = dp > 1 ? 1 : 0;
    Config scaled = none;
    scaled.train.loss_scale = "1024";
    MPI_Comm comm = MPI_COMM_SELF;
    if (dp > 1) MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    SampleFn data = test::synthetic_samples(none.model.vocab_size, none.model.seq_len);
    TrainRun a = train(none, comm, data), b = train(scaled, comm, data);
    for (size_t i = 0; i < a.steps.size(); ++i) {
      EXPECT_EQ(a.steps[i].loss, b.steps[i].loss) << "dp" << dp << " step " << i + 1;
      EXPECT_EQ(a.steps[i].grad_norm, b.steps[i].grad_norm) << "dp" << dp << " step " << i + 1;
      EXPECT_FALSE(b.steps[i].skipped);
      EXPECT_EQ(b.steps[i].loss_scale, 1024.0);
      EXPECT_EQ(a.steps[i].loss_scale, 0.0);
    }
    EXPECT_TRUE(test::bitwise_equal(a.params, b.params)) << "dp" << dp;
    if (dp > 1) MPI_Comm_free(&comm);
  }
}

// Dynamic scaling with overflowing gradients on steps 1-3 (injected: LOOM_FAULT_NAN_GRADS; a
// tiny fp32 model does not overflow by itself): those steps are skipped and the scale halves
// each time. Every batch is the same and the LR constant, so after the k = 3 skipped steps the
// run must continue exactly as an unscaled run from its first step: step k + j equals the
// unscaled step j bit for bit (skips leave weights and moments untouched, the scale 2^13 is
// exact, and AdamW's bias correction counts applied updates only).
TEST(LossScaling, DynamicSkipsOverflowsAndResumesExactly) {
  Config none = base();
  none.optimizer.schedule = "constant";
  none.optimizer.warmup_steps = 0;
  none.train.steps = 4;
  Config dyn = none;
  dyn.train.loss_scale = "dynamic";
  dyn.train.initial_loss_scale = 65536;
  dyn.train.loss_scale_window = 1000;
  dyn.train.steps = 7;
  SampleFn every = test::synthetic_samples(none.model.vocab_size, none.model.seq_len);
  SampleFn same = [every](int64_t, int rows, int32_t* in, int32_t* tg) { every(0, rows, in, tg); };

  setenv("LOOM_FAULT_NAN_GRADS", "1,2,3", 1);
  TrainRun ds = train(dyn, MPI_COMM_SELF, same);
  unsetenv("LOOM_FAULT_NAN_GRADS");
  const int k = 3;
  for (int i = 0; i < dyn.train.steps; ++i) {
    const StepStats& s = ds.steps[size_t(i)];
    EXPECT_EQ(s.skipped, i < k) << "step " << i + 1;
    EXPECT_EQ(s.loss_scale, std::ldexp(1.0, 16 - std::min(i, k))) << "step " << i + 1;
    EXPECT_EQ(std::isfinite(s.grad_norm), i >= k) << "step " << i + 1;
  }
  TrainRun u = train(none, MPI_COMM_SELF, same);
  for (int j = 0; j < none.train.steps; ++j) {
    EXPECT_EQ(ds.steps[size_t(k + j)].loss, u.steps[size_t(j)].loss) << "step " << j + 1;
    EXPECT_EQ(ds.steps[size_t(k + j)].grad_norm, u.steps[size_t(j)].grad_norm) << j + 1;
  }
  EXPECT_TRUE(test::bitwise_equal(ds.params, u.params));
}

// The scaler's state and the skipped-step count live in checkpoints: a run saved after step 3
// and resumed equals the uninterrupted run, including when the scale next doubles (window 2:
// the clean-step count must survive the restart) and AdamW's applied-update count.
TEST(LossScaling, ResumeKeepsTheScalerState) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Config c = base();
  c.train.loss_scale = "dynamic";
  c.train.initial_loss_scale = 65536;
  c.train.loss_scale_window = 2;
  c.train.steps = 6;
  c.checkpoint.dir =
      std::string(LOOM_BINARY_DIR) + "/test_loss_scaling/rank" + std::to_string(rank);
  std::filesystem::remove_all(c.checkpoint.dir);
  SampleFn data = test::synthetic_samples(c.model.vocab_size, c.model.seq_len);
  setenv("LOOM_FAULT_NAN_GRADS", "1,2", 1);
  auto run = [&](int from_resume, int until, int save_at) {
    Config r = c;
    r.checkpoint.resume = from_resume ? "auto" : "none";
    auto pc = make_parallel_ctx(Grid(1, 1, 1), MPI_COMM_SELF);
    Trainer t(r, *pc, data);
    t.init_weights();
    t.resume();
    TrainRun out;
    for (int s = t.start_step() + 1; s <= until; ++s) {
      out.steps.push_back(t.train_step(s));
      if (s == save_at) t.save(s);
    }
    out.params = t.full_params();
    return out;
  };
  TrainRun straight = run(false, 6, -1);
  TrainRun first = run(false, 3, 3);
  TrainRun second = run(true, 6, -1);
  unsetenv("LOOM_FAULT_NAN_GRADS");
  ASSERT_EQ(first.steps.size(), 3u);
  ASSERT_EQ(second.steps.size(), 3u);
  EXPECT_TRUE(straight.steps[0].skipped && straight.steps[1].skipped);
  EXPECT_EQ(straight.steps[4].loss_scale, 32768.0);  // 2^16 -> 2^14 (skips), doubled after step 4
  for (size_t i = 0; i < 3; ++i) {
    const StepStats &a = second.steps[i], &b = straight.steps[i + 3];
    EXPECT_EQ(a.loss, b.loss) << "step " << i + 4;
    EXPECT_EQ(a.loss_scale, b.loss_scale) << "step " << i + 4;
    EXPECT_EQ(a.grad_norm, b.grad_norm) << "step " << i + 4;
  }
  EXPECT_TRUE(test::bitwise_equal(second.params, straight.params));
}

}  // namespace
}  // namespace loom
