// Whole training steps on the cuda backend against the cpu backend (the reference), through the
// Trainer: fp32 within float tolerance, bf16/fp16 tracking the fp32 loss curve, recompute modes
// equal to none. Label cuda: skipped without a GPU.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/cuda_device.h"
#ifdef LOOM_CUDA_EMULATE
#include "loom_emu/emulator.h"
#endif
#include "backend/peak_flops.h"
#include "model/flops.h"
#include "parallel/grid.h"
#include "tests/parallel/equivalence_util.h"
#include "train/device_fit.h"

namespace loom {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda::cuda_available()) GTEST_SKIP() << cuda::cuda_unavailable_reason()

// The equivalence tests' tiny model with head size 16 (the cuda attention needs 16/32/64/128).
Config tiny(const char* device, const char* dtype) {
  Config c = test::tiny_parallel_config();
  c.model.n_head = 2;  // d_model 32 -> head size 16
  c.train.steps = 5;
  c.device = device;
  c.train.dtype = dtype;
  return c;
}

using test::max_rel;

// fp32 on cuda (no TF32) differs from the cpu backend only in summation order and FMA
// contraction (one rounding fewer per product): the reorder tolerance class of the layout
// tests (tests/support/tolerance.h) for step 1's loss and gradient, later losses and weights.
TEST(CudaTrain, Fp32StepsEqualCpu) {
  SKIP_WITHOUT_GPU();
  test::RunResult cpu = test::run_alone(tiny("cpu", "fp32")),
                  gpu = test::run_alone(tiny("cuda", "fp32"));
  test::expect_reorder_equal(gpu, cpu, 32, "cuda fp32 vs cpu");
}

// bf16 and fp16 compute with fp32 master weights: the loss curve follows fp32's within the
// precision of the activations (bf16: 8 significant bits -> 2e-2; fp16: 11 bits -> 5e-3).
TEST(CudaTrain, LowPrecisionTracksFp32) {
  SKIP_WITHOUT_GPU();
  test::RunResult cpu = test::run_alone(tiny("cpu", "fp32"));
  test::RunResult bf = test::run_alone(tiny("cuda", "bf16"));
  EXPECT_LT(max_rel(bf.losses, cpu.losses), 2e-2);
  Config h = tiny("cuda", "fp16");  // dynamic loss scaling (auto); 2^16 does not overflow here
  test::RunResult f16 = test::run_alone(h);
  EXPECT_LT(max_rel(f16.losses, cpu.losses), 5e-3);
}

// Recomputation re-runs the same deterministic kernels on the same inputs: the losses and
// weights equal the run that keeps every activation (selective keeps the attention's row
// statistics on cuda, so it is the same run as none).
TEST(CudaTrain, RecomputeEqualsNone) {
  SKIP_WITHOUT_GPU();
  Config none = tiny("cuda", "bf16");
  test::RunResult ref = test::run_alone(none);
  for (const char* mode : {"selective", "full"}) {
    Config c = none;
    c.train.recompute = mode;
    test::RunResult r = test::run_alone(c);
    EXPECT_EQ(r.losses, ref.losses) << mode;
    for (const auto& [name, t] : ref.weights)
      EXPECT_TRUE(r.weights.at(name).data == t.data) << mode << ": " << name;
  }
}

// train.cuda_graph replays the captured step: the same kernels on the same memory in the same
// order, so every loss and weight equals the plain run's bit for bit (bf16 and fp32).
TEST(CudaTrain, GraphStepsEqualPlainSteps) {
  SKIP_WITHOUT_GPU();
  for (const char* dtype : {"bf16", "fp32"}) {
    Config plain = tiny("cuda", dtype);
    plain.train.global_batch_size = 4;  // two micro-batches: the feed holds both
    Config graph = plain;
    graph.train.cuda_graph = true;
    test::RunResult a = test::run_alone(plain);
#ifdef LOOM_CUDA_EMULATE
    const uint64_t launches = loom_emu::stats().graph_launches;
#endif
    test::RunResult b = test::run_alone(graph);
#ifdef LOOM_CUDA_EMULATE
    // Step 1 runs plainly; step 2 is captured, then it and steps 3-5 replay the graph.
    EXPECT_EQ(loom_emu::stats().graph_launches - launches, uint64_t(plain.train.steps - 1));
#endif
    EXPECT_EQ(b.losses, a.losses) << dtype;
    for (const auto& [name, t] : a.weights)
      EXPECT_TRUE(b.weights.at(name).data == t.data) << dtype << ": " << name;
  }
}

// The metrics of a cuda run describe the device. MFU uses the datasheet peak of the GPU the run
// is on, looked up by the device's name (the training banner once looked up an empty name, so
// no cuda run logged MFU); the emulator takes an H100's name from LOOM_EMU_DEVICE_NAME, and a
// real GPU outside the table is skipped. mem_peak_bytes is the device memory in use (it was
// the host's RSS): at least the fp32 master weights, gradients and AdamW moments (16 bytes a
// parameter), and in the emulation, which has no context or library allocations, at most the
// fit check's estimate (an upper bound by construction: its reserve covers the libraries).
TEST(CudaTrain, MetricsReportTheDevice) {
  SKIP_WITHOUT_GPU();
#ifdef LOOM_CUDA_EMULATE
  setenv("LOOM_EMU_DEVICE_NAME", "NVIDIA H100 80GB HBM3", 1);
#endif
  Config c = tiny("cuda", "bf16");
  c.train.steps = 2;
  c.train.log_interval = 1;
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("loom_metrics_" + std::to_string(getpid())))
          .string();
  std::filesystem::remove_all(dir);
  c.run.dir = dir;
  c.checkpoint.dir = dir + "/ckpt";
  Grid grid(1, 1, 1, c.parallel.order);
  auto pc = make_parallel_ctx(grid, MPI_COMM_SELF);
  Trainer t(c, *pc, test::synthetic_samples(c.model.vocab_size, c.model.seq_len));
  const std::string name = t.backend().device_name();
  const double peak = cuda_peak_flops(name, "bf16");
  if (peak <= 0) GTEST_SKIP() << "'" << name << "' is not in the peak table";
#ifdef LOOM_CUDA_EMULATE
  const double estimate = double(estimate_device_memory(t.run_layout()).total());
#endif
  t.init_weights();
  t.run();
#ifdef LOOM_CUDA_EMULATE
  unsetenv("LOOM_EMU_DEVICE_NAME");
#endif
  std::ifstream f(dir + "/metrics.jsonl");
  int steps = 0;
  for (std::string line; std::getline(f, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (!j.contains("step") || !j.contains("tokens_per_s")) continue;
    ++steps;
    ASSERT_TRUE(j["mfu"].is_number()) << line;
    // MFU = flops/token x tokens/s / peak (one device).
    const double want = j["tokens_per_s"].get<double>() * flops_per_token(c.model) / peak;
    EXPECT_NEAR(j["mfu"].get<double>(), want, 1e-6 * want) << line;
    const double mem = j["mem_peak_bytes"].get<double>();
    EXPECT_GE(mem, 16.0 * double(count_params(c.model))) << line;
#ifdef LOOM_CUDA_EMULATE
    EXPECT_LE(mem, estimate) << line;
#endif
  }
  EXPECT_EQ(steps, 2);
  std::filesystem::remove_all(dir);
}

#ifdef LOOM_CUDA_EMULATE
// After the first step nothing allocates device memory: a step reuses its GEMM plans, scratch
// and buffers (the emulator counts cudaMalloc calls). The captured run proves more: inside a
// capture any synchronizing or allocating call fails, and GraphStepsEqualPlainSteps captured.
TEST(CudaTrain, StepsAfterTheFirstAllocateNothing) {
  Config c = tiny("cuda", "bf16");
  Grid grid(1, 1, 1, c.parallel.order);
  auto pc = make_parallel_ctx(grid, MPI_COMM_SELF);
  Trainer t(c, *pc, test::synthetic_samples(c.model.vocab_size, c.model.seq_len));
  t.init_weights();
  t.run_step(1);
  t.step_stats();
  const uint64_t allocations = loom_emu::stats().allocations;
  for (int s = 2; s <= 4; ++s) t.run_step(s);
  t.step_stats();
  EXPECT_EQ(loom_emu::stats().allocations, allocations);
}
#endif

}  // namespace
}  // namespace loom
