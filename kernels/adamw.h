// AdamW on flat fp32 buffers, torch.optim.AdamW arithmetic:
//   p -= lr*wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//   p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps),   with g = grad * grad_scale.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define LOOM_HD __host__ __device__
#else
#define LOOM_HD
#endif

namespace loom::cpu {

struct AdamWParams {
  float lr, beta1, beta2, eps, weight_decay;
  int step;          // 1-based
  float grad_scale;  // clipping factor (1 when not clipping)
};

// The per-step factors of the update, derived once per step (on the host or on the device:
// the same double arithmetic, rounded to fp32 as torch rounds python floats meeting a tensor).
// apply == 0 leaves every buffer untouched (a step skipped on overflow).
struct AdamWCoefs {
  float decay, beta1, beta2, one_m_b1, one_m_b2, neg_step_size, inv_bc2_sqrt, eps, gs;
  int32_t apply;
};

LOOM_HD inline AdamWCoefs adamw_coefs(double lr, float beta1, float beta2, float eps,
                                      float weight_decay, int step, float grad_scale) {
  const double b1 = beta1, b2 = beta2;
  AdamWCoefs c;
  c.decay = (float)(1.0 - lr * (double)weight_decay);  // param.mul_(1 - lr*wd)
  c.beta1 = beta1;
  c.beta2 = beta2;
  c.one_m_b1 = (float)(1.0 - b1);
  c.one_m_b2 = (float)(1.0 - b2);
  const double bc1 = 1.0 - pow(b1, (double)step);
  const double bc2 = 1.0 - pow(b2, (double)step);
  c.neg_step_size = (float)(-(lr / bc1));  // addcdiv_ value = -lr / bc1
  c.inv_bc2_sqrt = (float)(1.0 / sqrt(bc2));
  c.eps = eps;
  c.gs = grad_scale;
  c.apply = 1;
  return c;
}

inline AdamWCoefs adamw_coefs(const AdamWParams& p) {
  return adamw_coefs(p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, p.step, p.grad_scale);
}

void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const AdamWCoefs& c);
inline void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                         const AdamWParams& p) {
  adamw_update(param, grad, m, v, n, adamw_coefs(p));
}

}  // namespace loom::cpu

#ifdef LOOM_HAVE_CUDA
#include "kernels/cuda_device.h"

namespace loom::cuda {

// cuda twin on device buffers (fp32 master weights, grads and moments), enqueued on `stream`
// (a cudaStream_t). param_bf16 / param_f16 (n, nullable) receives the updated weights rounded
// (to nearest even) to bf16 / fp16: the compute copy. In fp16, weights below 2^-14 in magnitude
// keep fewer significant bits (subnormals) and below 2^-25 become 0; the fp32 master keeps them.
// The factors come from the host (p) or from device memory (coefs: read by the kernel when it
// runs, so the host never waits for the step's decision).
void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const cpu::AdamWParams& p, bf16* param_bf16, void* stream);
void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const cpu::AdamWParams& p, f16* param_f16, void* stream);
// No low-precision copy (fp32 compute). Also keeps a literal nullptr copy argument unambiguous.
void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const cpu::AdamWParams& p, std::nullptr_t no_copy, void* stream);
void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const cpu::AdamWCoefs* coefs, bf16* param_bf16, void* stream);
void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const cpu::AdamWCoefs* coefs, f16* param_f16, void* stream);
void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const cpu::AdamWCoefs* coefs, std::nullptr_t no_copy, void* stream);

}  // namespace loom::cuda
#endif  // LOOM_HAVE_CUDA
