// The speed-of-light kernel model (loom plan --kernels): FLOPs against hand counts from the
// dimensions, the roofline, the step sum as printed, MFU, tp, and the command's errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/plan_command.h"
#include "core/check.h"
#include "plan/kernel_model.h"
#include "tests/plan/kernel_step_util.h"
#include "tests/plan/run_plan_command.h"
#include "tests/support/configs.h"
#include "tests/support/fixture.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

using plan::GpuRoof;
using plan::KernelShape;
using plan::KernelStep;
using plan::Unit;
using test::sum_flops;

// 2 layers, d_model 64, 4 heads of 16, vocabulary 256 (already a multiple of 128), T 16;
// micro-batch 2 x 3 micro-batches = 96 tokens per step.
KernelShape small_shape(int tp = 1) {
  KernelShape s;
  s.model = test::gpt_model(2, 4, 64, 256, 16);
  s.micro_batch = 2;
  s.micro_batches = 3;
  s.tp = tp;
  return s;
}

KernelShape gpt2_124m_shape() {
  KernelShape s;  // ModelConfig's defaults are GPT-2 124M at T = 1024
  s.micro_batch = 16;
  s.micro_batches = 4;
  return s;
}

TEST(KernelModel, GemmFlopsAreSixPerWeightPerToken) {
  // Every weight matrix is used by one forward, one dX and one dW GEMM of 2 FLOPs per weight
  // per token. Weights per layer: qkv 64x192 + proj 64x64 + fc 64x256 + fc proj 256x64 = 49,152;
  // 2 layers = 98,304; the tied classifier 256 x 64 = 16,384; total 114,688.
  // 6 x 96 tokens x 114,688 = 66,060,288.
  const KernelStep k = plan::kernel_step(small_shape(), GpuRoof{});
  EXPECT_EQ(sum_flops(k, Unit::Tensor), 66060288.0);
  // Attention per layer and micro-batch, B H T^2 hd = 2 x 4 x 256 x 16 = 32,768: forward 2x
  // (QK^T and PV, causal half), dQ 3x, dK dV 4x; 2 layers x 3 micro-batches: 9 x 6 x 32,768.
  EXPECT_EQ(sum_flops(k, Unit::Attention), 1769472.0);
  // Parameters: 2 x (12 x 64^2 + 13 x 64) + 256 x 64 + 16 x 64 + 2 x 64 = 117,504.
  EXPECT_EQ(k.params, 117504.0);
  EXPECT_EQ(k.tokens, 96.0);
}

TEST(KernelModel, TensorParallelHalvesTheMatmulsNotTheNorms) {
  // tp 2: the block weights 98,304 / 2; the vocabulary padded to 256 (a multiple of 128 x 2)
  // split into 128 rows: 128 x 64 = 8,192. 6 x 96 x 57,344 = 33,030,144.
  const KernelStep one = plan::kernel_step(small_shape(1), GpuRoof{});
  const KernelStep two = plan::kernel_step(small_shape(2), GpuRoof{});
  EXPECT_EQ(sum_flops(two, Unit::Tensor), 33030144.0);
  EXPECT_EQ(sum_flops(two, Unit::Attention), sum_flops(one, Unit::Attention) / 2);
  for (size_t i = 0; i < one.kernels.size(); ++i)
    if (one.kernels[i].name.rfind("LayerNorm", 0) == 0) {
      EXPECT_EQ(two.kernels[i].name, one.kernels[i].name);
      EXPECT_EQ(two.kernels[i].bytes, one.kernels[i].bytes) << one.kernels[i].name;
    }
}

TEST(KernelModel, RooflineTakesTheSlowerOfComputeAndMemory) {
  EXPECT_EQ(plan::roofline_seconds(2e12, 1e9, 1e12, 1e12), 2.0);  // compute-bound
  EXPECT_EQ(plan::roofline_seconds(1.0, 5e12, 1e12, 1e12), 5.0);  // memory-bound
  const GpuRoof g;
  const KernelStep k = plan::kernel_step(gpt2_124m_shape(), g);
  bool saw_adamw = false, saw_fc = false;
  for (const auto& c : k.kernels) {
    EXPECT_EQ(c.time_s, std::max(c.compute_s, c.memory_s)) << c.name;
    if (c.name == "AdamW") {  // 7 fp32 accesses per parameter: memory-bound
      saw_adamw = true;
      EXPECT_FALSE(c.compute_bound());
      EXPECT_DOUBLE_EQ(c.time_s, 28.0 * k.params / g.bandwidth);
    }
    if (c.name == "fc GEMM fwd") {  // 16,384 x 768 x 3,072: compute-bound on an H100
      saw_fc = true;
      EXPECT_TRUE(c.compute_bound());
      EXPECT_DOUBLE_EQ(c.time_s, 12 * 2.0 * 16384 * 768 * 3072 * 4 / g.tensor_flops);
    }
  }
  EXPECT_TRUE(saw_adamw && saw_fc);
}

TEST(KernelModel, MfuIsModelFlopsOverStepTimesPeak) {
  // With free memory traffic, free elementwise work and no launch cost, the step is the
  // matmuls at the peak: (66,060,288 + 1,769,472) / peak. Model FLOPs per token (loom's
  // formula): 6 x (117,504 - 16 x 64) + 12 x 2 x 64 x 16 = 723,456; x 96 = 69,451,776.
  GpuRoof g;
  g.bandwidth = 1e300;
  g.vector_flops = 1e300;
  g.attention_flops = g.tensor_flops;  // head size 16 would run on CUDA cores (vector_flops)
  g.launch_s = 0;
  const KernelStep k = plan::kernel_step(small_shape(), g);
  EXPECT_EQ(k.model_flops, 69451776.0);
  EXPECT_DOUBLE_EQ(k.step_s, (66060288.0 + 1769472.0) / g.tensor_flops);
  EXPECT_DOUBLE_EQ(k.mfu, 69451776.0 / (66060288.0 + 1769472.0));
  // And in general, with launches.
  const GpuRoof h;
  const KernelStep r = plan::kernel_step(gpt2_124m_shape(), h);
  EXPECT_DOUBLE_EQ(r.mfu, 855166464.0 * 65536 / (r.step_s * 989e12));
  EXPECT_LT(r.mfu, r.mfu_roofline);
}

// Attention runs on tensor cores for 16-bit activations with head size 64 or 128
// (kernels/attention_tc.cu) and on the fp32 CUDA-core kernel otherwise, unless a roof is given.
TEST(KernelModel, AttentionRoofFollowsTheKernelLoomRuns) {
  GpuRoof g;
  KernelShape s = gpt2_124m_shape();
  EXPECT_EQ(g.attention(s), g.tensor_flops) << "bf16, head size 64";
  s.act_bytes = 4;
  EXPECT_EQ(g.attention(s), g.vector_flops) << "fp32";
  EXPECT_EQ(g.attention(small_shape()), g.vector_flops) << "head size 16";
  g.attention_flops = 123e12;
  EXPECT_EQ(g.attention(small_shape()), 123e12);
}

TEST(KernelModel, StepIsTheSumOfTheKernelsAndTheLaunches) {
  const GpuRoof g;
  const KernelStep k = plan::kernel_step(gpt2_124m_shape(), g);
  double t = 0, n = 0;
  for (const auto& c : k.kernels) t += c.time_s, n += c.calls;
  EXPECT_DOUBLE_EQ(k.roofline_s, t);
  EXPECT_EQ(k.launches, n);
  EXPECT_DOUBLE_EQ(k.step_s, t + n * g.launch_s);
}

// The printed table: its ms column sums to the printed "sum of kernels" and, with the printed
// launch overhead, to the printed step. Each printed figure is rounded to 0.001 ms, so the sum
// of R rounded rows differs from the rounded total by at most (R + 1) x 0.0005 ms.
TEST(KernelModel, PrintedRowsSumToThePrintedStep) {
  const GpuRoof g;
  const KernelShape s = gpt2_124m_shape();
  const std::string text = plan::format_kernel_step(plan::kernel_step(s, g), s, g, "x.yaml");
  std::istringstream in(text);
  std::string line;
  double rows_ms = 0, sum_ms = -1, launch_ms = -1, step_ms = -1;
  int rows = 0;
  bool table = false;
  while (std::getline(in, line)) {
    if (line.rfind("  kernel", 0) == 0) {
      table = true;
      continue;
    }
    if (table && line.empty()) table = false;
    if (table) {  // ... ms share%
      std::istringstream w(line);
      std::vector<std::string> f;
      for (std::string x; w >> x;) f.push_back(x);
      ASSERT_GE(f.size(), 2u) << line;
      rows_ms += std::stod(f[f.size() - 2]);
      ++rows;
    }
    if (line.rfind("sum of kernels: ", 0) == 0) sum_ms = std::stod(line.substr(16));
    if (line.rfind("launch overhead: ", 0) == 0)
      launch_ms = std::stod(line.substr(line.find(" = ") + 3));
    if (line.rfind("predicted step: ", 0) == 0) step_ms = std::stod(line.substr(16));
  }
  ASSERT_GT(rows, 30) << text;
  ASSERT_GT(sum_ms, 0) << text;
  ASSERT_GT(step_ms, 0) << text;
  EXPECT_NEAR(rows_ms, sum_ms, (rows + 1) * 0.0005) << text;
  EXPECT_NEAR(sum_ms + launch_ms, step_ms, 3 * 0.0005) << text;
  EXPECT_NE(text.find("predicted MFU: "), std::string::npos);
}

TEST(KernelModel, ShapeErrorsNameTheProblem) {
  KernelShape s = small_shape(3);  // 3 does not divide 4 heads
  auto e = plan::kernel_shape_errors(s, GpuRoof{});
  ASSERT_EQ(e.size(), 1u);
  EXPECT_NE(e[0].find("tp 3 does not divide n_head 4"), std::string::npos) << e[0];
  GpuRoof g;
  g.bandwidth = 0;
  EXPECT_FALSE(plan::kernel_shape_errors(small_shape(), g).empty());
  EXPECT_THROW(plan::kernel_step(small_shape(3), GpuRoof{}), std::exception);
}

// ---- the command -------------------------------------------------------------------------

cli::Args kernels_args(std::vector<std::string> sets) {
  cli::Args a;
  a.command = "plan";
  a.operands = {test::source_path("configs/gpt2_124m.yaml")};
  a.options["--kernels"] = "1";
  a.overrides = std::move(sets);
  return a;
}

// cmd_plan's stdout; a UserError's message in *error.
std::string run_plan(const cli::Args& a, std::string* error) {
  int code = 0;
  return test::run_plan_command(a, &code, error);
}

TEST(KernelModelCli, PrintsTheTableForTheConfigsShape) {
  std::string err;
  const std::string out =
      run_plan(kernels_args({"parallel.micro_batch_size=16", "train.global_batch_size=64"}), &err);
  EXPECT_EQ(err, "");
  EXPECT_NE(out.find("micro-batch 16 x 4 micro-batches = 65536 tokens"), std::string::npos) << out;
  EXPECT_NE(out.find("16-bit activations"), std::string::npos) << out;  // cpu config -> bf16
  EXPECT_NE(out.find("classifier logits GEMM fwd"), std::string::npos) << out;
  EXPECT_NE(out.find("predicted MFU: "), std::string::npos) << out;
}

// fp32 activations run attention on CUDA cores unless --attention-flops says otherwise.
TEST(KernelModelCli, AttentionRoofDefaultsToTheKernelThatRuns) {
  std::string err;
  const auto sets = std::vector<std::string>{"device=cuda", "train.dtype=fp32"};
  EXPECT_NE(run_plan(kernels_args(sets), &err).find("67 TFLOP/s attention matmuls"),
            std::string::npos);
  cli::Args a = kernels_args(sets);
  a.options["--attention-flops"] = "500e12";
  EXPECT_NE(run_plan(a, &err).find("500 TFLOP/s attention matmuls"), std::string::npos);
  EXPECT_NE(run_plan(kernels_args({}), &err).find("989 TFLOP/s attention matmuls"),
            std::string::npos)
      << "bf16, head size 64: tensor cores";
  EXPECT_EQ(err, "");
}

TEST(KernelModelCli, BadInputIsOneClearError) {
  std::string err;
  cli::Args a = kernels_args({});
  a.options["--gpu-flops"] = "0";
  EXPECT_EQ(run_plan(a, &err), "");
  EXPECT_NE(err.find("--gpu-flops: expected a number > 0, got '0'"), std::string::npos) << err;
  run_plan(kernels_args({"parallel.pp=2"}), &err);
  EXPECT_NE(err.find("parallel.pp is 2"), std::string::npos) << err;
  run_plan(kernels_args({"parallel.micro_batch_size=16", "train.global_batch_size=40"}), &err);
  EXPECT_NE(err.find("train.global_batch_size 40 must be a multiple of"), std::string::npos) << err;
  a = kernels_args({});
  a.options["--cluster"] = test::source_path("configs/clusters/h100_80g_8x.yaml");
  run_plan(a, &err);
  EXPECT_NE(err.find("drop --cluster"), std::string::npos) << err;
}

}  // namespace
}  // namespace loom
