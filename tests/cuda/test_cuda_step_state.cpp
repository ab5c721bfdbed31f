// decide_step on the device equals the cpu twin: the global norm, the overflow skip, the clip
// factor and the AdamW factors of a step, from the same double/fp32 arithmetic.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/step_state.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom::cudatest {
namespace {

class CudaStepState : public CudaTest {};

TEST_F(CudaStepState, DecideStepMatchesCpu) {
  struct Case {
    double norm_sq;
    cpu::StepInputs in;
  };
  const Case cases[] = {{4.0, {1e-3f, 1.0f, 1.0}},                          // norm 2 clipped to 1
                        {0.25, {2e-3f, 1.0f, 1.0}},                         // norm 0.5: no clipping
                        {4.0 * 65536.0 * 65536.0, {1e-3f, 65536.0f, 1.0}},  // loss-scaled
                        {INFINITY, {1e-3f, 1.0f, 1.0}},                     // overflow: skipped
                        {NAN, {1e-3f, 1.0f, 0.0}}};
  const cpu::StepRule rule{0.9f, 0.95f, 1e-8f, 0.1f};
  cpu::StepState host{};
  host.t = 7, host.skipped = 2;
  DevBuf<cpu::StepState> dstate(std::vector<cpu::StepState>{host});
  DevBuf<cpu::StepInputs> din(1);
  for (const Case& c : cases) {
    host.norm_sq = c.norm_sq;
    std::vector<cpu::StepState> now = dstate.download();
    now[0].norm_sq = c.norm_sq;
    dstate.upload(now);
    din.upload({c.in});  // the device reads the step's inputs from its memory
    cpu::decide_step(host, c.in, rule);
    cuda::decide_step(dstate.get(), din.get(), rule, nullptr);
    const cpu::StepState got = dstate.download()[0];
    const std::string what = " at norm_sq " + std::to_string(c.norm_sq);
    EXPECT_EQ(got.apply, host.apply) << what;
    EXPECT_EQ(got.t, host.t) << what;
    EXPECT_EQ(got.skipped, host.skipped) << what;
    EXPECT_EQ(got.grad_scale, host.grad_scale) << what;
    if (host.apply) {
      EXPECT_EQ(got.grad_norm, host.grad_norm)
          << what << ": sqrt and a division, correctly rounded";
    }
    for (int d = 0; d < 2; ++d) {
      // pow on the device may differ from the host's by an ulp of double, far below fp32's.
      EXPECT_EQ(got.coefs[d].decay, host.coefs[d].decay) << what;
      EXPECT_EQ(got.coefs[d].gs, host.coefs[d].gs) << what;
      EXPECT_EQ(got.coefs[d].apply, host.coefs[d].apply) << what;
      EXPECT_NEAR(got.coefs[d].neg_step_size, host.coefs[d].neg_step_size,
                  1e-6 * std::abs(host.coefs[d].neg_step_size))
          << what;
    }
  }
  EXPECT_EQ(host.t, 10) << "three applied updates after 7";
  EXPECT_EQ(host.skipped, 4) << "inf and nan skipped";
}

}  // namespace
}  // namespace loom::cudatest
