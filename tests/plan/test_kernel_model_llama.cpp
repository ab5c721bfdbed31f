// The kernel model of a Llama block (RMSNorm, RoPE, SwiGLU, grouped-query attention, no
// biases, no wpe) and of a GPT-2 with ffn_hidden, against hand counts from the dimensions.
#include <gtest/gtest.h>

#include <string>

#include "model/flops.h"
#include "plan/kernel_model.h"
#include "tests/plan/kernel_step_util.h"
#include "tests/support/configs.h"

namespace loom {
namespace {

using plan::GpuRoof;
using plan::KernelShape;
using plan::KernelStep;
using plan::Unit;
using test::sum_flops;

// 2 layers, d_model 64, 4 query heads of 16 sharing 2 kv heads, SwiGLU width 128, vocabulary
// 256 (a multiple of 128 x 2), T 16; micro-batch 2 x 3 micro-batches = 96 tokens per step.
KernelShape llama_shape(int tp = 1, bool tied = true) {
  KernelShape s;
  s.model = test::gpt_model(2, 4, 64, 256, 16);
  s.model.arch = "llama";
  s.model.n_kv_head = 2, s.model.ffn_hidden = 128, s.model.tie_embeddings = tied;
  s.micro_batch = 2, s.micro_batches = 3, s.tp = tp;
  return s;
}

bool has_kernel(const KernelStep& k, const std::string& prefix) {
  for (const auto& c : k.kernels)
    if (c.name.rfind(prefix, 0) == 0) return true;
  return false;
}

TEST(KernelModelLlama, GemmFlopsAreSixPerWeightPerToken) {
  // Weights per layer: q|k|v 64 x (4 + 2 x 2) x 16 = 8,192, o 64 x 64 = 4,096, gate|up
  // 64 x 256 = 16,384, down 128 x 64 = 8,192: 36,864; 2 layers 73,728; the classifier 256 x 64 =
  // 16,384; total 90,112. 6 x 96 tokens x 90,112 = 51,904,512.
  const KernelStep k = plan::kernel_step(llama_shape(), GpuRoof{});
  EXPECT_EQ(sum_flops(k, Unit::Tensor), 51904512.0);
  // The attention matmuls run per query head: the same 9 x 6 x 32,768 as a GPT-2 of 4 heads
  // of 16 (test_kernel_model.cpp), whatever the kv heads.
  EXPECT_EQ(sum_flops(k, Unit::Attention), 1769472.0);
  // Parameters: 2 x (36,864 + 2 x 64 gains) + 16,384 + 64 (final gain) = 90,432; untied adds
  // the lm_head's 16,384.
  EXPECT_EQ(k.params, 90432.0);
  EXPECT_EQ(plan::kernel_step(llama_shape(1, false), GpuRoof{}).params, 90432.0 + 16384);
  EXPECT_EQ(double(count_params(llama_shape().model)), 90432.0);  // no vocabulary padding here
}

TEST(KernelModelLlama, TheBlockHasNoBiasesLayerNormsGeluOrWpe) {
  const KernelStep k = plan::kernel_step(llama_shape(), GpuRoof{});
  for (const char* absent : {"LayerNorm", "GELU", "bias", "embedding bwd (wpe)", "bias + residual"})
    EXPECT_FALSE(has_kernel(k, absent)) << absent;
  for (const char* present : {"RMSNorm fwd", "RMSNorm bwd dX", "RMSNorm bwd dW", "RoPE fwd",
                              "RoPE bwd", "SwiGLU fwd", "SwiGLU bwd", "residual add"})
    EXPECT_TRUE(has_kernel(k, present)) << present;
  for (const auto& c : k.kernels) {
    // RoPE rotates q and k of every layer of every micro-batch in place: (N, (4 + 2) x 16) of
    // 2-byte elements read and written, 2 x 2 x 32 x 96 = 12,288 bytes per call, 6 calls.
    if (c.name == "RoPE fwd (q, k)") {
      EXPECT_EQ(c.bytes, 6 * 12288.0);
    }
    // SwiGLU forward reads gate and up and writes (N, F): 3 x 2 x 32 x 128 bytes per call.
    if (c.name == "SwiGLU fwd") {
      EXPECT_EQ(c.bytes, 6 * 3 * 2 * 32 * 128.0);
    }
    // The qkv GEMM writes (N, 128) and reads W (64, 128): no bias vector.
    if (c.name == "qkv GEMM fwd") {
      EXPECT_EQ(c.bytes, 6 * 2 * (32.0 * 64 + 64 * 128 + 32 * 128));
    }
  }
}

TEST(KernelModelLlama, TensorParallelSplitsQueryAndKvHeads) {
  // tp 2: every block weight halves (73,728 / 2 = 36,864), the classifier 128 x 64 = 8,192:
  // 6 x 96 x 45,056 = 25,952,256.
  const KernelStep two = plan::kernel_step(llama_shape(2), GpuRoof{});
  EXPECT_EQ(sum_flops(two, Unit::Tensor), 25952256.0);
  EXPECT_EQ(sum_flops(two, Unit::Attention), 1769472.0 / 2);
}

TEST(KernelModelLlama, MfuNumeratorIsLoomsFormula) {
  // 6 x 90,432 + 12 x 2 x 4 x 16 x 16 = 567,168 FLOPs per token; x 96 tokens.
  const KernelStep k = plan::kernel_step(llama_shape(), GpuRoof{});
  EXPECT_EQ(flops_per_token(llama_shape().model), 567168.0);
  EXPECT_EQ(k.model_flops, 567168.0 * 96);
}

TEST(KernelModelLlama, TpMustDivideTheKvHeads) {
  // tp 4 divides the 4 query heads but not the 2 kv heads (they are split, never replicated).
  auto e = plan::kernel_shape_errors(llama_shape(4), GpuRoof{});
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0], "tp 4 does not divide n_kv_head 2");
  EXPECT_THROW(plan::kernel_step(llama_shape(4), GpuRoof{}), std::exception);
}

TEST(KernelModelLlama, Gpt2FfnHiddenSetsTheMlpGemms) {
  // GPT-2 of test_kernel_model.cpp's small shape with ffn_hidden 128 instead of 4 x 64:
  // per layer qkv 64 x 192 + proj 64 x 64 + fc 64 x 128 + fc proj 128 x 64 = 32,768; 2 layers
  // 65,536 + the classifier 16,384 = 81,920; x 6 x 96 = 47,185,920.
  KernelShape s = llama_shape();
  s.model.arch = "gpt2", s.model.n_kv_head = 0;
  const KernelStep k = plan::kernel_step(s, GpuRoof{});
  EXPECT_EQ(sum_flops(k, Unit::Tensor), 47185920.0);
  EXPECT_TRUE(has_kernel(k, "GELU fwd"));
  // Parameters: 2 x (32,768 + biases 192 + 64 + 128 + 64 + norms 4 x 64) + 16,384 + wpe
  // 16 x 64 + final norm 2 x 64 = 84,480.
  EXPECT_EQ(k.params, 84480.0);
  EXPECT_EQ(double(count_params(s.model)), 84480.0);
}

}  // namespace
}  // namespace loom
