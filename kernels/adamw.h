// AdamW on flat fp32 buffers, torch.optim.AdamW arithmetic:
//   p -= lr*wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//   p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps),   with g = grad * grad_scale.
#pragma once
#include <cstddef>

namespace loom::cpu {

struct AdamWParams {
  float lr, beta1, beta2, eps, weight_decay;
  int step;          // 1-based
  float grad_scale;  // clipping factor (1 when not clipping)
};

void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const AdamWParams& p);

}  // namespace loom::cpu

#ifdef LOOM_HAVE_CUDA
#include "kernels/cuda_device.h"

namespace loom::cuda {

// cuda twin on device buffers (fp32 master weights, grads and moments), enqueued on `stream`
// (a cudaStream_t). param_bf16 / param_f16 (n, nullable) receives the updated weights rounded
// (to nearest even) to bf16 / fp16: the compute copy. In fp16, weights below 2^-14 in magnitude
// keep fewer significant bits (subnormals) and below 2^-25 become 0; the fp32 master keeps them.
void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const cpu::AdamWParams& p, bf16* param_bf16, void* stream);
void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const cpu::AdamWParams& p, f16* param_f16, void* stream);
// No low-precision copy (fp32 compute). Also keeps a literal nullptr copy argument unambiguous.
void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const cpu::AdamWParams& p, std::nullptr_t no_copy, void* stream);

}  // namespace loom::cuda
#endif  // LOOM_HAVE_CUDA
