// decide_step on the device: one thread, so the host never reads the step's norm to go on.
#include "kernels/cuda_common.cuh"
#include "kernels/step_state.h"

namespace loom::cuda {
namespace {

__global__ void decide_step_kernel(cpu::StepState* s, const cpu::StepInputs* in, cpu::StepRule r) {
  cpu::decide_step(*s, *in, r);
}

}  // namespace

void decide_step(cpu::StepState* state, const cpu::StepInputs* in, const cpu::StepRule& rule,
                 void* stream) {
  LOOM_LAUNCH(decide_step_kernel, 1, 1, 0, as_stream(stream))(state, in, rule);
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace loom::cuda
