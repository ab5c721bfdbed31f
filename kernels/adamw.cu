// AdamW cuda twin on flat fp32 buffers (torch.optim.AdamW arithmetic), optionally a bf16/fp16 copy.
#include <cmath>

#include "kernels/adamw.h"
#include "kernels/cuda_common.cuh"

namespace loom::cuda {
namespace {

using Scalars = cpu::AdamWCoefs;

// V = 4: param, grad, m, v 16-byte aligned and n % 4 == 0 (one float4 each); else V = 1.
// copy (nullable) receives the updated parameters rounded to L (__nv_bfloat16 or __half).
template <int V, typename L>
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, L* copy,
                             size_t npacks, Scalars sv, const Scalars* sp) {
  const Scalars s = sp ? *sp : sv;  // from device memory when given (decided on the device)
  if (!s.apply) return;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x; q < npacks; q += stride) {
    const size_t i0 = q * V;
    float pp[V], gg[V], mm[V], vv[V];
    load_f<V>(param + i0, pp);
    load_f<V>(grad + i0, gg);
    load_f<V>(m + i0, mm);
    load_f<V>(v + i0, vv);
#pragma unroll
    for (int k = 0; k < V; k++) {
      const float g = gg[k] * s.gs;
      const float pi = pp[k] * s.decay;
      const float mi = mm[k] * s.beta1 + s.one_m_b1 * g;
      const float vi = vv[k] * s.beta2 + s.one_m_b2 * g * g;
      const float denom = sqrtf(vi) * s.inv_bc2_sqrt + s.eps;
      pp[k] = pi + s.neg_step_size * mi / denom;
      mm[k] = mi;
      vv[k] = vi;
    }
    store_f<V>(param + i0, pp);
    store_f<V>(m + i0, mm);
    store_f<V>(v + i0, vv);
    if (copy) {
#pragma unroll
      for (int k = 0; k < V; k++) copy[i0 + k] = from_f32<L>(pp[k]);
    }
  }
}

template <typename H>
void update(float* param, const float* grad, float* m, float* v, size_t n, const Scalars& s,
            const Scalars* sp, H* copy, void* stream) {
  if (n == 0) return;
  constexpr int kBlock = 256;
  const bool vec =
      n % 4 == 0 && aligned16(param) && aligned16(grad) && aligned16(m) && aligned16(v);
  if (vec) {
    LOOM_LAUNCH(adamw_kernel<4>, grid_for(n / 4, kBlock), kBlock, 0, as_stream(stream))
    (param, grad, m, v, dev_ptr(copy), n / 4, s, sp);
  } else {
    LOOM_LAUNCH(adamw_kernel<1>, grid_for(n, kBlock), kBlock, 0, as_stream(stream))
    (param, grad, m, v, dev_ptr(copy), n, s, sp);
  }
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const cpu::AdamWParams& p, bf16* param_bf16, void* stream) {
  update(param, grad, m, v, n, cpu::adamw_coefs(p), nullptr, param_bf16, stream);
}
void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const cpu::AdamWParams& p, f16* param_f16, void* stream) {
  update(param, grad, m, v, n, cpu::adamw_coefs(p), nullptr, param_f16, stream);
}
void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const cpu::AdamWParams& p, std::nullptr_t, void* stream) {
  update(param, grad, m, v, n, cpu::adamw_coefs(p), nullptr, static_cast<bf16*>(nullptr), stream);
}
void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const cpu::AdamWCoefs* coefs, bf16* param_bf16, void* stream) {
  update(param, grad, m, v, n, Scalars{}, coefs, param_bf16, stream);
}
void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const cpu::AdamWCoefs* coefs, f16* param_f16, void* stream) {
  update(param, grad, m, v, n, Scalars{}, coefs, param_f16, stream);
}
void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const cpu::AdamWCoefs* coefs, std::nullptr_t, void* stream) {
  update(param, grad, m, v, n, Scalars{}, coefs, static_cast<bf16*>(nullptr), stream);
}

}  // namespace loom::cuda
