// Mixture-of-Experts training steps (docs/moe.md) on the cuda backend in fp32 against the cpu
// backend through the Trainer, gpt2 and llama blocks, dropless and with a capacity that drops.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>

#include "kernels/cuda_device.h"
#include "tests/parallel/equivalence_util.h"

namespace loom {
namespace {

// The tiny model with head size 16 (the cuda attention's smallest), 4 experts, top-2; capacity
// 1.25 over seq_len 8 keeps 5 of a sequence's 16 assignments per expert.
Config moe(const char* device, bool llama, double capacity) {
  Config c = test::tiny_parallel_config();
  c.model.n_head = 2;
  if (llama) {
    c.model.arch = "llama";
    c.model.n_kv_head = 1;
    c.model.ffn_hidden = 48;
    c.model.rope_theta = 100.0;
    c.model.tie_embeddings = false;
  }
  c.model.moe.num_experts = 4;
  c.model.moe.top_k = 2;
  c.model.moe.capacity_factor = capacity;
  c.model.moe.aux_loss_coef = 0.01;
  c.model.moe.z_loss_coef = 0.001;
  c.train.steps = 4;
  c.device = device;
  c.train.dtype = "fp32";
  return c;
}

// fp32 on cuda: the routing makes the same choices and plans (the kernels' tests check the
// integers exactly), the rest differs only in summation order and FMA contraction: the reorder
// tolerance class of the layout tests (tests/support/tolerance.h), as for the dense model.
TEST(CudaTrainMoe, Fp32StepsEqualCpu) {
  if (!cuda::cuda_available()) GTEST_SKIP() << cuda::cuda_unavailable_reason();
  for (bool llama : {false, true})
    for (double capacity : {0.0, 1.25}) {
      const std::string what = std::string(llama ? "llama" : "gpt2") + " moe " +
                               (capacity > 0 ? "capacity" : "dropless") + " cuda fp32 vs cpu";
      const Config cpu = moe("cpu", llama, capacity), gpu = moe("cuda", llama, capacity);
      test::expect_reorder_equal(test::run_alone(gpu), test::run_alone(cpu), cpu.model.d_model,
                                 what);
    }
}

}  // namespace
}  // namespace loom
