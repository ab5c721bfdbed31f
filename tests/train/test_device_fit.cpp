// Device-memory estimate against hand arithmetic from model dimensions; the no-fit message.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "config/config.h"
#include "core/check.h"
#include "layout/run_layout.h"
#include "parallel/grid.h"
#include "plan/memory_model.h"
#include "tests/support/configs.h"
#include "train/device_fit.h"

namespace loom {
namespace {

constexpr uint64_t kGiB = uint64_t(1) << 30;
constexpr uint64_t kReserve = (uint64_t(32) << 20) + kGiB;  // workspace + runtime reserve

Config gpt2(int L, int H, int C, int mb, const std::string& dtype) {
  Config cfg;
  cfg.device = "cuda";
  cfg.model = test::gpt_model(L, H, C, 50257, 1024);
  cfg.parallel.micro_batch_size = mb;
  cfg.train.global_batch_size = mb;
  cfg.train.dtype = dtype;
  return cfg;
}

// Elements of one GPT-2 block: 2 LayerNorms (2C each), qkv C x 3C + 3C, proj C x C + C,
// fc C x 4C + 4C, fc-proj 4C x C + C.
// The estimate and the fit check for world rank `rank` of `grid`, as the trainer makes them.
DeviceEstimate estimate(const Config& cfg, const Grid& grid, int rank) {
  return estimate_device_memory(RunLayout(cfg, grid, rank));
}
DeviceEstimate fit(const Config& cfg, const Grid& grid, int rank, size_t free_b, size_t total_b,
                   const std::string& gpu) {
  return check_device_fit(cfg, RunLayout(cfg, grid, rank), rank, free_b, total_b, gpu);
}

uint64_t block(uint64_t C) {
  return 4 * C + (3 * C * C + 3 * C) + (C * C + C) + (4 * C * C + 4 * C) + (4 * C * C + C);
}

TEST(DeviceFit, Gpt2SmallBf16PartsByHand) {
  const Config cfg = gpt2(12, 12, 768, 16, "bf16");
  const DeviceEstimate e = estimate(cfg, Grid(1, 1, 1), 0);
  const uint64_t C = 768, T = 1024, L = 12, Vp = 50304;  // 50257 rounded up to 128
  const uint64_t P = Vp * C + T * C + L * block(C) + 2 * C;
  EXPECT_EQ(P, 124475904u);
  EXPECT_EQ(e.stage_params, P);
  EXPECT_EQ(e.master_params, 4 * P);
  EXPECT_EQ(e.compute_weights, 2 * P);
  EXPECT_EQ(e.grads, 4 * P);
  EXPECT_EQ(e.optimizer, 8 * P);
  EXPECT_EQ(e.param_gather, 0u);
  EXPECT_EQ(e.grad_buckets, 0u);

  const uint64_t N = 16 * T, NC = N * C;
  // One layer, bf16: ln1, res2, ln2 (3 NC), qkv (3 NC), atty (NC), fch + fchg (8 NC) = 15 NC
  // elements of 2 bytes; 4 fp32 row statistics; the log-sum-exp of 12 heads per token.
  const uint64_t layer = 15 * NC * 2 + 4 * N * 4 + 12 * N * 4;
  // 13 layer inputs/stage output, 12 layers, the tokens (int32), the output gradient.
  EXPECT_EQ(e.slots, 1);
  EXPECT_EQ(e.activations, 13 * NC * 2 + 12 * layer + 4 * N + NC * 2);
  // Block backward: proj, dres2, dln (3 NC), dfchg + dfch (8 NC), datty (NC), dqkv (3 NC) =
  // 15 NC; the attention delta (12 per token, fp32); 2 ping-pong + final LN out and grad (4 NC);
  // 7 fp32 row statistics; the device copy of the targets (int32).
  EXPECT_EQ(e.scratch, 15 * NC * 2 + 12 * N * 4 + 4 * NC * 2 + 7 * N * 4 + 4 * N);
  EXPECT_EQ(e.logits, N * Vp * 2);
  EXPECT_EQ(e.pipeline, 0u);
  // The step's uploaded inputs: 64 bytes of scalars, the one micro-batch's tokens and targets.
  EXPECT_EQ(e.step_inputs, 64 + 2 * N * 4);
  EXPECT_EQ(e.workspace + e.runtime, kReserve);
  EXPECT_EQ(e.total(), 18 * P + e.activations + e.scratch + e.logits + e.step_inputs + kReserve);
  // About 2.1 GiB of weights, gradients and moments, 4.6 GiB of activations, 1.5 GiB of
  // logits: it fits an 80 GB GPU with room to spare.
  EXPECT_LT(e.total(), 20 * kGiB);
  EXPECT_NO_THROW(fit(cfg, Grid(1, 1, 1), 0, 79 * kGiB, 80 * kGiB,
                      "device 0: NVIDIA H100 80GB HBM3, sm_90, 132 SMs, 79.1 GiB"));
}

TEST(DeviceFit, Fp32HasNoSeparateComputeCopyAndFourByteActivations) {
  const Config cfg = gpt2(2, 4, 128, 2, "fp32");
  const DeviceEstimate e = estimate(cfg, Grid(1, 1, 1), 0);
  const uint64_t C = 128, N = 2 * 1024, NC = N * C, Vp = 50304;
  const uint64_t P = Vp * C + 1024 * C + 2 * block(C) + 2 * C;
  EXPECT_EQ(e.compute_weights, 0u);
  EXPECT_EQ(e.master_params + e.grads + e.optimizer, 16 * P);
  const uint64_t layer = 15 * NC * 4 + 4 * N * 4 + 4 * N * 4;
  EXPECT_EQ(e.activations, 3 * NC * 4 + 2 * layer + 4 * N + NC * 4);  // tokens: 4 N
  EXPECT_EQ(e.logits, N * Vp * 4);
}

TEST(DeviceFit, SelectiveKeepsWhatNoneKeepsFullKeepsLayerInputs) {
  Config cfg = gpt2(4, 4, 256, 4, "bf16");
  const DeviceEstimate none = estimate(cfg, Grid(1, 1, 1), 0);
  cfg.train.recompute = "selective";
  EXPECT_EQ(estimate(cfg, Grid(1, 1, 1), 0).activations, none.activations);
  cfg.train.recompute = "full";
  const DeviceEstimate full = estimate(cfg, Grid(1, 1, 1), 0);
  const uint64_t N = 4 * 1024, C = 256, NC2 = N * C * 2;
  const uint64_t layer = 15 * NC2 + 4 * N * 4 + 4 * N * 4;
  // Inputs of 4 layers + output, tokens, output gradient; plus one re-run layer and its output.
  EXPECT_EQ(full.activations, 5 * NC2 + 4 * N + NC2 + layer + NC2);
  EXPECT_LT(full.activations, none.activations);
}

TEST(DeviceFit, ZeroStagesShardStateOverDp4) {
  // dp 4; P is not a multiple of 4 here, so shards are padded: shard = ceil(P / 4).
  const uint64_t C = 64, Vp = 50304, T = 1024;
  const uint64_t P = Vp * C + T * C + 2 * block(C) + 2 * C;
  const uint64_t shard = (P + 3) / 4;
  const uint64_t widest = block(C), other = Vp * C + T * C + 2 * C;
  Config cfg = gpt2(2, 2, 64, 1, "bf16");
  cfg.train.global_batch_size = 4;
  const Grid grid(4, 1, 1);
  for (int zero = 0; zero <= 2; ++zero) {
    cfg.optimizer.zero_stage = zero;
    const DeviceEstimate e = estimate(cfg, grid, 0);
    SCOPED_TRACE(zero);
    EXPECT_EQ(e.master_params, 4 * shard * 4);
    EXPECT_EQ(e.compute_weights, 4 * shard * 2);
    EXPECT_EQ(e.grads, (zero < 2 ? P : shard) * 4);
    EXPECT_EQ(e.optimizer, (zero == 0 ? P : shard) * 8);
    EXPECT_EQ(e.grad_buckets, zero >= 2 ? (widest + other) * 4 : 0u);
    EXPECT_EQ(e.param_gather, 0u);
  }
  // ZeRO-3 runs in fp32 (no compute copy): the parameter shard, and fp32 working copies of one
  // layer and of the other tensors; with overlap two layer copies for each of the two kinds.
  cfg.train.dtype = "fp32";
  cfg.optimizer.zero_stage = 3;
  DeviceEstimate z3 = estimate(cfg, grid, 0);
  EXPECT_EQ(z3.master_params, shard * 4);
  EXPECT_EQ(z3.compute_weights, 0u);
  EXPECT_EQ(z3.grads, shard * 4);
  EXPECT_EQ(z3.param_gather, (widest + other) * 4);
  EXPECT_EQ(z3.grad_buckets, (widest + other) * 4);
  cfg.parallel.overlap = true;
  z3 = estimate(cfg, grid, 0);
  EXPECT_EQ(z3.param_gather, (2 * widest + other) * 4);
  EXPECT_EQ(z3.grad_buckets, (2 * widest + other) * 4);
  cfg.parallel.overlap = false;
  cfg.train.dtype = "bf16";
  // The last data-parallel rank's shard is what is left: P - 3 * shard.
  cfg.optimizer.zero_stage = 1;
  EXPECT_EQ(estimate(cfg, grid, 3).optimizer, (P - 3 * shard) * 8);
}

TEST(DeviceFit, PipelineStagesAndTensorParallelShards) {
  // pp2 x tp2, 1F1B with 4 micro-batches: stage 0 holds 2 in flight, stage 1 holds 1.
  Config cfg = gpt2(4, 4, 256, 2, "bf16");
  cfg.train.global_batch_size = 8;
  const Grid grid(1, 2, 2);                                               // rank = tp + 2 * pp
  const uint64_t C = 256, Cl = 128, T = 1024, N = 2 * T, Vl = 50432 / 2;  // padded to 256
  const uint64_t layer_local =
      4 * C + (3 * C * Cl + 3 * Cl) + (Cl * C + C) + (C * 4 * Cl + 4 * Cl) + (4 * Cl * C + C);
  const DeviceEstimate s0 = estimate(cfg, grid, 1);  // pp0 tp1
  const DeviceEstimate s1 = estimate(cfg, grid, 2);  // pp1 tp0
  EXPECT_EQ(s0.stage, 0);
  EXPECT_EQ(s1.stage, 1);
  EXPECT_EQ(s0.slots, 2);
  EXPECT_EQ(s1.slots, 1);
  // Stage 0: wte shard, wpe, 2 layers; stage 1: 2 layers, ln_f, the tied copy of the wte shard.
  EXPECT_EQ(s0.stage_params, Vl * C + T * C + 2 * layer_local);
  EXPECT_EQ(s1.stage_params, 2 * layer_local + 2 * C + Vl * C);
  const uint64_t NC2 = N * C * 2;
  // Per layer: ln1, res2, ln2 full width (3 NC); qkv (3 N Cl), atty (N Cl), fch, fchg (8 N Cl).
  const uint64_t layer = (3 * N * C + 12 * N * Cl) * 2 + 4 * N * 4 + 2 * N * 4;
  EXPECT_EQ(s0.activations, 2 * (3 * NC2 + 2 * layer + 4 * N));  // + the tokens
  EXPECT_EQ(s1.activations, 1 * (3 * NC2 + 2 * layer + NC2));    // + the output gradient
  EXPECT_EQ(s0.logits, 0u);
  EXPECT_EQ(s1.logits, N * Vl * 2);
  // Device sends are staged: slots + 1 buffers in each direction a stage sends in.
  EXPECT_EQ(s0.pipeline, NC2 + 3 * NC2);      // the received output gradient; staging (up)
  EXPECT_EQ(s1.pipeline, 1 * NC2 + 2 * NC2);  // one gradient sent back per slot; staging (down)
  cfg.parallel.overlap = true;  // the executor receives the next output gradient early
  EXPECT_EQ(estimate(cfg, grid, 1).pipeline, 2 * NC2 + 3 * NC2);
}

TEST(DeviceFit, Gpt2XlMicroBatch64DoesNotFitOneH100AndSaysWhy) {
  // GPT-2 1.5B (48 layers, 25 heads, d_model 1600) at micro-batch 64 x 1024 tokens.
  const Config cfg = gpt2(48, 25, 1600, 64, "bf16");
  const uint64_t C = 1600, L = 48, T = 1024, Vp = 50304, N = 64 * T, NC = N * C;
  const uint64_t P = Vp * C + T * C + L * block(C) + 2 * C;
  const DeviceEstimate e = estimate(cfg, Grid(1, 1, 1), 0);
  EXPECT_EQ(e.master_params + e.compute_weights + e.grads + e.optimizer, 18 * P);
  const uint64_t layer = 15 * NC * 2 + 4 * N * 4 + 25 * N * 4;
  EXPECT_EQ(e.activations, 49 * NC * 2 + L * layer + 4 * N + NC * 2);
  EXPECT_GT(e.activations, 140 * kGiB);  // about 151 GiB: far beyond one GPU

  const uint64_t free_b = 78 * kGiB + kGiB / 2, total_b = 80 * kGiB;  // 78.50 / 80.00 GiB
  const std::string gpu = "device 0: NVIDIA H100 80GB HBM3, sm_90, 132 SMs, 79.1 GiB";
  try {
    fit(cfg, Grid(1, 1, 1), 0, free_b, total_b, gpu);
    FAIL() << "expected a UserError";
  } catch (const UserError& err) {
    const std::string msg = err.what();
    char need[32], short_by[32];
    std::snprintf(need, sizeof need, "%.2f GiB", double(e.total()) / double(kGiB));
    std::snprintf(short_by, sizeof short_by, "%.2f GiB", double(e.total() - free_b) / double(kGiB));
    EXPECT_NE(msg.find(std::string("needs about ") + need), std::string::npos) << msg;
    EXPECT_NE(msg.find("the GPU (" + gpu + ") has 78.50 GiB free of 80.00 GiB"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find(std::string("short by ") + short_by), std::string::npos) << msg;
    EXPECT_NE(msg.find("activations "), std::string::npos) << msg;
    EXPECT_NE(msg.find("AdamW moments "), std::string::npos) << msg;
    EXPECT_NE(msg.find("bf16 compute weights "), std::string::npos) << msg;
    EXPECT_NE(msg.find("64 x 1024 tokens per micro-batch"), std::string::npos) << msg;
    EXPECT_NE(msg.find("parallel.micro_batch_size: "), std::string::npos) << msg;
    EXPECT_NE(msg.find("train.recompute: full -> "), std::string::npos) << msg;
    EXPECT_NE(msg.find("optimizer.zero_stage"), std::string::npos) << msg;
    EXPECT_NE(msg.find("parallel.tp: 5"), std::string::npos)
        << msg;  // 25 heads: 2..4 do not divide
    EXPECT_NE(msg.find("parallel.pp: 2"), std::string::npos) << msg;
    // A micro-batch that fits is found: 28 GB of state leaves room for a few sequences.
    EXPECT_NE(msg.find("(fits)"), std::string::npos) << msg;
  }
}

TEST(DeviceFit, SuggestedMicroBatchIsTheLargestDivisorThatFits) {
  // GPT-2 124M with micro-batch 32 on a 16 GiB device: find the largest divisor of 32 that fits.
  Config cfg = gpt2(12, 12, 768, 32, "bf16");
  const uint64_t free_b = 16 * kGiB;
  int best = 0;
  for (int mb : {16, 8, 4, 2, 1}) {
    Config t = cfg;
    t.parallel.micro_batch_size = mb;
    if (estimate(t, Grid(1, 1, 1), 0).total() <= free_b) {
      best = mb;
      break;
    }
  }
  ASSERT_GT(best, 0);
  try {
    fit(cfg, Grid(1, 1, 1), 0, free_b, free_b, "test GPU");
    FAIL() << "expected a UserError";
  } catch (const UserError& err) {
    const std::string msg = err.what();
    EXPECT_NE(msg.find("parallel.micro_batch_size: " + std::to_string(best) + " -> "),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("with dp=1 it saves nothing"), std::string::npos) << msg;
  }
}

// loom plan's row for a cuda layout and the device-fit check of each of its ranks count the same
// bytes (both come from layout/rank_memory.h; plan builds its input from a candidate, the check
// from a RunLayout).
TEST(DeviceFit, PlanCountsTheSameBytesAsTheCheck) {
  Config cfg = gpt2(4, 4, 256, 2, "bf16");
  cfg.train.global_batch_size = 16;
  plan::PlanModel pm;
  pm.model = cfg.model;
  pm.global_batch = cfg.train.global_batch_size;
  pm.device = "cuda";
  pm.prec = plan::precision_of("bf16");
  for (bool overlap : {false, true})
    for (int zero = 0; zero <= 2; ++zero)
      for (const char* rc : {"none", "selective", "full"}) {
        cfg.parallel.overlap = pm.overlap = overlap;
        cfg.optimizer.zero_stage = zero;
        cfg.train.recompute = rc;
        const Grid grid(2, 2, 2);
        plan::Candidate c;
        c.dp = 2, c.pp = 2, c.tp = 2, c.micro_batch = 2, c.zero = zero;
        c.recompute = parse_recompute(rc);
        const auto shapes = plan::stage_shapes(cfg.model, 2, 2);
        for (int rank = 0; rank < grid.size(); ++rank) {
          const Coord at = grid.coord_of(rank);
          const DeviceEstimate e = estimate(cfg, grid, rank);
          const plan::MemoryEstimate p =
              plan::stage_memory(pm, c, shapes[size_t(at.pp)], e.microbatches, 0, at.dp);
          EXPECT_EQ(p.total(), e.total() - e.workspace - e.runtime)
              << "rank " << rank << " zero " << zero << " " << rc << " overlap " << overlap;
        }
      }
}

}  // namespace
}  // namespace loom
