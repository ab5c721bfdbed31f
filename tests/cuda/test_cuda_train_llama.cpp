// Whole llama training steps (RMSNorm, RoPE, grouped-query attention, SwiGLU) on the cuda
// backend against the cpu backend through the Trainer, with the bounds of test_cuda_train.cpp.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>

#include "kernels/cuda_device.h"
#include "tests/parallel/equivalence_util.h"

namespace loom {
namespace {

// Two query heads over one kv head; head size 16 (fallback attention kernel) or 64 (tensor
// cores for bf16/fp16).
Config llama(const char* device, const char* dtype, int head_size) {
  Config c = test::tiny_parallel_config();
  c.model.arch = "llama";
  c.model.n_layer = 2;
  c.model.n_head = 2;
  c.model.n_kv_head = 1;
  c.model.d_model = 2 * head_size;
  c.model.ffn_hidden = 3 * head_size;
  c.model.rope_theta = 100.0;
  c.model.tie_embeddings = false;
  c.train.steps = 4;
  c.device = device;
  c.train.dtype = dtype;
  return c;
}

using test::max_rel;

// fp32: summation order and FMA contraction only, the reorder class (tests/support/tolerance.h).
TEST(CudaTrainLlama, Fp32StepsEqualCpu) {
  if (!cuda::cuda_available()) GTEST_SKIP() << cuda::cuda_unavailable_reason();
  for (int hs : {16, 64}) {
    test::RunResult cpu = test::run_alone(llama("cpu", "fp32", hs)),
                    gpu = test::run_alone(llama("cuda", "fp32", hs));
    test::expect_reorder_equal(gpu, cpu, 2 * hs,
                               "llama cuda fp32 vs cpu, head size " + std::to_string(hs));
  }
}

// bf16/fp16 activations with fp32 master weights follow the fp32 loss curve within the
// precision of the activations (bf16: 8 significant bits -> 2e-2; fp16: 11 bits -> 5e-3).
TEST(CudaTrainLlama, LowPrecisionTracksFp32) {
  if (!cuda::cuda_available()) GTEST_SKIP() << cuda::cuda_unavailable_reason();
  test::RunResult cpu = test::run_alone(llama("cpu", "fp32", 64));
  EXPECT_LT(max_rel(test::run_alone(llama("cuda", "bf16", 64)).losses, cpu.losses), 2e-2);
  EXPECT_LT(max_rel(test::run_alone(llama("cuda", "fp16", 64)).losses, cpu.losses), 5e-3);
}

// The captured step replays the same kernels on the same memory: bitwise the plain run.
TEST(CudaTrainLlama, GraphStepsEqualPlainSteps) {
  if (!cuda::cuda_available()) GTEST_SKIP() << cuda::cuda_unavailable_reason();
  Config plain = llama("cuda", "bf16", 64);
  Config graph = plain;
  graph.train.cuda_graph = true;
  test::RunResult a = test::run_alone(plain), b = test::run_alone(graph);
  EXPECT_EQ(a.losses, b.losses);
  for (const auto& [name, t] : a.weights) EXPECT_TRUE(b.weights.at(name).data == t.data) << name;
}

}  // namespace
}  // namespace loom
