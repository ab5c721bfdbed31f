// MFU arithmetic against hand-computed GPT-2 124M figures, and the GPU peak table.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

#include "backend/peak_flops.h"
#include "config/config.h"
#include "model/flops.h"
#include "tests/support/configs.h"
#include "train/mfu.h"

namespace loom {
namespace {

ModelConfig gpt2_124m() { return test::gpt_model(12, 12, 768, 50257, 1024); }

TEST(Mfu, Gpt2SmallParameterCountIsTheKnownOne) {
  // Hugging Face's GPT2LMHeadModel "gpt2" has 124,439,808 parameters (tied embeddings).
  EXPECT_EQ(count_params(gpt2_124m()), 124439808);
}

TEST(Mfu, Gpt2SmallFlopsPerTokenByHand) {
  // Written out independently: wte 50257*768, per layer 2 LayerNorms, qkv, proj, fc, fc-proj.
  const double wte = 50257.0 * 768;
  const double layer = 2 * 2 * 768 + (768.0 * 2304 + 2304) + (768.0 * 768 + 768) +
                       (768.0 * 3072 + 3072) + (3072.0 * 768 + 768);
  const double n_no_pos = wte + 12 * layer + 2 * 768;  // position embeddings excluded
  const double attention = 12.0 * 12 * 768 * 1024;     // 12 * L * C * T
  EXPECT_DOUBLE_EQ(n_no_pos, 123653376.0);
  EXPECT_DOUBLE_EQ(flops_per_token(gpt2_124m()), 6 * n_no_pos + attention);
  EXPECT_DOUBLE_EQ(flops_per_token(gpt2_124m()), 855166464.0);
  // The usual rule of thumb: about 6 * 124M plus the attention term.
  EXPECT_NEAR(flops_per_token(gpt2_124m()) / (6 * 124e6 + attention), 1.0, 0.01);
}

TEST(Mfu, FormulaMatchesHandValues) {
  // 100k tokens/s over 8 H100s at 989 TFLOP/s bf16: 855166464 * 1e5 / (989e12 * 8).
  EXPECT_NEAR(model_flops_utilization(855166464.0, 1e5, 989e12, 8), 0.010808474014155713, 1e-15);
  EXPECT_NEAR(model_flops_utilization(855166464.0, 1e5, 312e12, 8), 0.034261476923076926, 1e-15);
  // A perfect device: 1 GFLOP/token at 1000 tokens/s on one 1 TFLOP/s device is 100%.
  EXPECT_DOUBLE_EQ(model_flops_utilization(1e9, 1000, 1e12, 1), 1.0);
  EXPECT_LT(model_flops_utilization(1e9, 1000, 0, 8), 0);  // unknown peak
}

TEST(Mfu, CudaTableByDeviceName) {
  EXPECT_EQ(cuda_peak_flops("NVIDIA A100-SXM4-80GB", "bf16"), 312e12);
  EXPECT_EQ(cuda_peak_flops("NVIDIA A100-PCIE-40GB", "fp16"), 312e12);
  EXPECT_EQ(cuda_peak_flops("NVIDIA A100-SXM4-40GB", "fp32"), 19.5e12);
  EXPECT_EQ(cuda_peak_flops("NVIDIA H100 80GB HBM3", "bf16"), 989e12);
  EXPECT_EQ(cuda_peak_flops("NVIDIA H100 PCIe", "bf16"), 756e12);
  EXPECT_EQ(cuda_peak_flops("NVIDIA H100 NVL", "bf16"), 835e12);
  EXPECT_EQ(cuda_peak_flops("NVIDIA H200", "bf16"), 989e12);
  EXPECT_EQ(cuda_peak_flops("nvidia h200 nvl", "bf16"), 989e12);  // case-insensitive
  EXPECT_EQ(cuda_peak_flops("Tesla V100-SXM2-16GB", "bf16"), 0);
  EXPECT_EQ(cuda_peak_flops("", "bf16"), 0);
}

TEST(Mfu, PeakPerDeviceFromConfigOrTable) {
  Config cfg;
  cfg.log.peak_flops = 123e12;
  PeakFlops p = peak_flops_per_device(cfg, MPI_COMM_NULL, "cpu");  // no MPI off the cpu path
  EXPECT_EQ(p.per_device, 123e12);
  EXPECT_EQ(p.source, "log.peak_flops");

  cfg.log.peak_flops = 0;
  cfg.device = "cuda";
  cfg.train.dtype = "bf16";
  p = peak_flops_per_device(cfg, MPI_COMM_NULL, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(p.per_device, 989e12);
  EXPECT_NE(p.source.find("H100 SXM"), std::string::npos);
  p = peak_flops_per_device(cfg, MPI_COMM_NULL, "Some Future GPU");
  EXPECT_EQ(p.per_device, 0);
  EXPECT_NE(p.source.find("log.peak_flops"), std::string::npos);  // tells the fix
}

TEST(Mfu, CpuCoresPerRank) {
  EXPECT_DOUBLE_EQ(cpu_cores_per_rank(1, 2, 8), 0.25);   // 8 ranks x 1 thread on 2 cores
  EXPECT_DOUBLE_EQ(cpu_cores_per_rank(1, 2, 2), 1.0);    // fits
  EXPECT_DOUBLE_EQ(cpu_cores_per_rank(2, 2, 1), 2.0);    // one rank, both cores
  EXPECT_DOUBLE_EQ(cpu_cores_per_rank(8, 64, 8), 8.0);   // 8 x 8 threads on 64 cores
  EXPECT_DOUBLE_EQ(cpu_cores_per_rank(16, 64, 8), 8.0);  // hyper-threads: 16 threads, 8 cores
  EXPECT_DOUBLE_EQ(cpu_cores_per_rank(4, 0, 1), 4.0);    // topology unknown: the threads
}

TEST(Mfu, PhysicalCoresOfThisMachine) {
  const int n = int(std::thread::hardware_concurrency());
  std::vector<int> cpus;
  for (int i = 0; i < n; ++i) cpus.push_back(i);
  const int cores = physical_cores(cpus);
  EXPECT_GE(cores, 1);
  EXPECT_LE(cores, n);  // hyper-threads share a core
  EXPECT_EQ(physical_cores({}), 0);
}

TEST(Mfu, MeasuredSgemmIsPlausible) {
  double f = measure_sgemm_flops(128, 0.01);
  EXPECT_GT(f, 1e8);   // any cpu of this century
  EXPECT_LT(f, 1e14);  // no single process on a cpu
}

}  // namespace
}  // namespace loom
