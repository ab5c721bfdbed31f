// The scalars of one optimizer step (gradient norm, clipping, overflow, AdamW step count and
// factors), kept where the backend computes so that a step never waits for the device.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/adamw.h"

namespace loom::cpu {

// What the host knows before the step; uploaded with the step's tokens, so the device reads it
// (a captured CUDA graph replays with new values).
struct StepInputs {
  float lr;
  float loss_scale;  // the scale this step's backward ran on (1: none)
  double grad_clip;  // clip the global norm to this (0: no clipping)
};

// AdamW's hyper-parameters, fixed for the run.
struct StepRule {
  float beta1, beta2, eps, weight_decay;
};

// In backend memory (device memory on cuda). The host reads it once per log interval.
struct StepState {
  double norm_sq;            // sum of squared gradients: this rank's share, then the world's
  double grad_norm;          // the last decided step's global norm, unscaled (inf/nan on overflow)
  float grad_scale;          // the factor AdamW applied: clip / loss_scale
  int32_t t;                 // AdamW updates applied so far (bias correction), counting this step
  int32_t apply;             // the last decided step's update was applied (finite gradients)
  int32_t skipped;           // steps skipped on overflow so far
  cpu::AdamWCoefs coefs[2];  // this step's AdamW factors: [0] no weight decay, [1] with it
};

// After the world's norm_sq is in place: the norm, the overflow decision, the clip factor and
// the AdamW factors of the step. Both twins run exactly this.
LOOM_HD inline void decide_step(StepState& s, const StepInputs& in, const StepRule& r) {
  s.grad_norm = sqrt(s.norm_sq) / (double)in.loss_scale;
  const bool finite = s.grad_norm - s.grad_norm == 0.0;  // false for inf and nan
  s.apply = finite ? 1 : 0;
  s.skipped += finite ? 0 : 1;
  s.t += finite ? 1 : 0;
  float gs = 1.0f / in.loss_scale;
  if (in.grad_clip > 0 && finite) {
    const double coef = in.grad_clip / (s.grad_norm + 1e-6);
    if (coef < 1.0) gs = (float)coef / in.loss_scale;
  }
  s.grad_scale = gs;
  for (int d = 0; d < 2; d++) {
    s.coefs[d] = adamw_coefs(in.lr, r.beta1, r.beta2, r.eps, d ? r.weight_decay : 0.0f,
                             s.t > 0 ? s.t : 1, gs);
    s.coefs[d].apply = s.apply;
  }
}

}  // namespace loom::cpu

#ifdef LOOM_HAVE_CUDA
namespace loom::cuda {
// One thread runs decide_step on the device state, enqueued on `stream`.
// in: backend (device) memory.
void decide_step(cpu::StepState* state, const cpu::StepInputs* in, const cpu::StepRule& rule,
                 void* stream);
}  // namespace loom::cuda
#endif  // LOOM_HAVE_CUDA
