// Whole training steps on the cuda backend against the cpu backend (the reference), through the
// Trainer: fp32 within float tolerance, bf16/fp16 tracking the fp32 loss curve, recompute modes
// equal to none. Label cuda: skipped without a GPU.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>

#include "kernels/cuda_device.h"
#include "parallel/grid.h"
#include "tests/parallel/equivalence_util.h"

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

test::RunResult run(const Config& c) { return test::run_layout(c, MPI_COMM_SELF); }

double max_rel(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::fabs(a[i] - b[i]) / std::fabs(b[i]));
  return worst;
}

// fp32 on cuda (no TF32) differs from the cpu backend only in summation order and FMA
// contraction (one rounding fewer per product): the reorder tolerance class of the layout
// tests (tests/support/tolerance.h) for step 1's loss and gradient, later losses and weights.
TEST(CudaTrain, Fp32StepsEqualCpu) {
  SKIP_WITHOUT_GPU();
  test::RunResult cpu = run(tiny("cpu", "fp32")), gpu = run(tiny("cuda", "fp32"));
  test::expect_reorder_equal(gpu, cpu, 32, "cuda fp32 vs cpu");
}

// bf16 and fp16 compute with fp32 master weights: the loss curve follows fp32's within the
// precision of the activations (bf16: 8 significant bits -> 2e-2; fp16: 11 bits -> 5e-3).
TEST(CudaTrain, LowPrecisionTracksFp32) {
  SKIP_WITHOUT_GPU();
  test::RunResult cpu = run(tiny("cpu", "fp32"));
  test::RunResult bf = run(tiny("cuda", "bf16"));
  EXPECT_LT(max_rel(bf.losses, cpu.losses), 2e-2);
  Config h = tiny("cuda", "fp16");  // dynamic loss scaling (auto); 2^16 does not overflow here
  test::RunResult f16 = run(h);
  EXPECT_LT(max_rel(f16.losses, cpu.losses), 5e-3);
}

// Recomputation re-runs the same deterministic kernels on the same inputs: the losses and
// weights equal the run that keeps every activation (selective keeps the attention's row
// statistics on cuda, so it is the same run as none).
TEST(CudaTrain, RecomputeEqualsNone) {
  SKIP_WITHOUT_GPU();
  Config none = tiny("cuda", "bf16");
  test::RunResult ref = run(none);
  for (const char* mode : {"selective", "full"}) {
    Config c = none;
    c.train.recompute = mode;
    test::RunResult r = run(c);
    EXPECT_EQ(r.losses, ref.losses) << mode;
    for (const auto& [name, t] : ref.weights)
      EXPECT_TRUE(r.weights.at(name).data == t.data) << mode << ": " << name;
  }
}

}  // namespace
}  // namespace loom
