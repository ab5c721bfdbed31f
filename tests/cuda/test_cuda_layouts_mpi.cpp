// Multi-rank training on the cuda backend through the host-staged device communicators
// (LOOM_DEVICE_COMM=host, set by the test's registration): tp2, pp2, dp2 with ZeRO 1-3, sequence
// parallelism, interleaved 1F1B (the wrap from the last stage to the first), dp2 x pp2 x tp2 and
// context parallelism (cp2 x pp2), gpt2 and llama in fp32 (gpt2 with Mixture of Experts too),
// each equal to the single-rank cpu run within the reorder tolerance class
// (tests/support/tolerance.h): cuda fp32 differs from cpu in summation order and FMA contraction
// only (tests/cuda/test_cuda_train.cpp), and a layout reorders sums as on cpu. Runs under
// mpirun -np 8 (ranks share the device); smaller layouts use the first ranks.
#include <gtest/gtest.h>

#include <string>

#include "kernels/cuda_device.h"
#include "parallel/device_comms.h"
#include "tests/parallel/equivalence_util.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

// The equivalence tests' tiny model with head size 16 (the cuda attention needs 16/32/64/128),
// 3 steps of 4 sequences: on the emulated device every rank's kernels run on the host's cores,
// and the cost is in kernel launches. Fewer tokens per step only shorten the reordered sums of
// the reorder class's error model, so its bounds hold.
Config gpt2() {
  Config c = test::tiny_parallel_config();
  c.model.n_head = 2;  // d_model 32 -> head size 16
  c.train.steps = 3;
  c.train.global_batch_size = 4;
  return c;
}

// 4 query heads over 2 kv heads of size 16 (tp2 splits both), SwiGLU width 96, RoPE base 100.
Config llama() {
  Config c = gpt2();
  c.model.arch = "llama";
  c.model.d_model = 64;
  c.model.n_head = 4;
  c.model.n_kv_head = 2;
  c.model.ffn_hidden = 96;
  c.model.rope_theta = 100.0;
  c.model.norm_eps = 1e-5;
  c.model.tie_embeddings = false;
  return c;
}

struct Layout {
  int dp, pp, tp, zero, v;
  bool sp;
  int cp = 1;  // parallel.cp: the ring attention's transfers go around the cp axis
  int ep = 1;  // parallel.ep: the experts split over runs of ep data-parallel ranks
};

void check_layout(const Layout& l, const Config& base, const std::string& what) {
  if (!cuda::cuda_available()) GTEST_SKIP() << cuda::cuda_unavailable_reason();
  Config c = base;  // base: the cpu single-rank reference
  c.device = "cuda";
  c.parallel.dp = l.dp, c.parallel.pp = l.pp, c.parallel.tp = l.tp;
  c.parallel.virtual_stages = l.v;
  c.parallel.sequence_parallel = l.sp;
  c.parallel.cp = l.cp;
  c.parallel.ep = l.ep;
  c.parallel.micro_batch_size = 1;
  c.optimizer.zero_stage = l.zero;
  const std::string name = what + " cuda dp" + std::to_string(l.dp) + "xpp" + std::to_string(l.pp) +
                           (l.v > 1 ? "(v" + std::to_string(l.v) + ")" : "") + "xtp" +
                           std::to_string(l.tp) + " zero" + std::to_string(l.zero) +
                           (l.sp ? " sp" : "") + (l.cp > 1 ? " cp" + std::to_string(l.cp) : "") +
                           (l.ep > 1 ? " ep" + std::to_string(l.ep) : "");
  test::expect_equals_single_rank(c, base, name);
}

TEST(CudaLayouts, HostStagedCommIsSelected) { EXPECT_EQ(device_comm_kind(), DeviceCommKind::Host); }

const Layout kLayouts[] = {
    {1, 1, 2, 0, 1, false},  // tp2
    {1, 2, 1, 0, 1, false},  // pp2
    {2, 1, 1, 1, 1, false},  // dp2, ZeRO 1..3
    {2, 1, 1, 2, 1, false},    {2, 1, 1, 3, 1, false},
    {1, 1, 2, 0, 1, true},      // tp2 with sequence parallelism
    {1, 2, 1, 0, 2, false},     // interleaved pp2 x v2
    {2, 2, 2, 1, 1, false},     // 8 ranks
    {1, 2, 1, 0, 1, false, 2},  // context parallelism cp2 x pp2
};

TEST(CudaLayouts, Gpt2) {
  for (const Layout& l : kLayouts) check_layout(l, gpt2(), "gpt2");
}

TEST(CudaLayouts, Llama) {
  for (const Layout& l : kLayouts) check_layout(l, llama(), "llama");
}

// Mixture of Experts (docs/moe.md): 4 experts, top-2, a capacity that drops (1.25 over seq_len 8
// keeps 5 of a sequence's 16 assignments per expert). tp2 with sequence parallelism sums the
// gate gradient over TP on the device; the 8-rank grid adds data and pipeline parallelism.
// Expert parallelism moves the rows all-to-all through the device communicators and sums the
// experts' gradients over the expert replicas: dp2 x ep2, dp4 x ep4 x tp2 with SP (each rank
// one expert), dp2 x pp2 x tp2 x ep2; with ZeRO the experts shard over their own replicas
// (dp4 x ep2 at ZeRO 2 and 3, on the device's reduces and gathers).
TEST(CudaLayouts, Gpt2Moe) {
  Config base = gpt2();
  base.model.moe.num_experts = 4;
  base.model.moe.top_k = 2;
  base.model.moe.capacity_factor = 1.25;
  base.model.moe.aux_loss_coef = 0.01;
  base.model.moe.z_loss_coef = 0.001;
  for (const Layout& l : {Layout{1, 1, 2, 0, 1, true}, Layout{2, 2, 2, 1, 1, false},
                          Layout{2, 1, 1, 0, 1, false, 1, 2}, Layout{4, 1, 2, 0, 1, true, 1, 4},
                          Layout{2, 2, 2, 0, 1, false, 1, 2}, Layout{4, 1, 2, 2, 1, false, 1, 2},
                          Layout{4, 1, 1, 3, 1, false, 1, 2}})
    check_layout(l, base, "gpt2 moe");
}

}  // namespace
}  // namespace loom
