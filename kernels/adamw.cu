// AdamW cuda twin on flat fp32 buffers (torch.optim.AdamW arithmetic), optionally a bf16/fp16 copy.
#include <cmath>

#include "kernels/adamw.h"
#include "kernels/cuda_common.cuh"

namespace loom::cuda {
namespace {

// The per-step scalars, computed on the host exactly as the cpu twin computes them.
struct Scalars {
  float decay, beta1, beta2, one_m_b1, one_m_b2, neg_step_size, inv_bc2_sqrt, eps, gs;
};

Scalars make_scalars(const cpu::AdamWParams& p) {
  const double lr = p.lr, b1 = p.beta1, b2 = p.beta2;
  Scalars s;
  s.decay = (float)(1.0 - lr * (double)p.weight_decay);
  s.beta1 = p.beta1;
  s.beta2 = p.beta2;
  s.one_m_b1 = (float)(1.0 - b1);
  s.one_m_b2 = (float)(1.0 - b2);
  const double bc1 = 1.0 - std::pow(b1, (double)p.step);
  const double bc2 = 1.0 - std::pow(b2, (double)p.step);
  s.neg_step_size = (float)(-(lr / bc1));
  s.inv_bc2_sqrt = (float)(1.0 / std::sqrt(bc2));
  s.eps = p.eps;
  s.gs = p.grad_scale;
  return s;
}

// V = 4: param, grad, m, v 16-byte aligned and n % 4 == 0 (one float4 each); else V = 1.
// copy (nullable) receives the updated parameters rounded to L (__nv_bfloat16 or __half).
template <int V, typename L>
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, L* copy,
                             size_t npacks, Scalars s) {
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
void update(float* param, const float* grad, float* m, float* v, size_t n,
            const cpu::AdamWParams& p, H* copy, void* stream) {
  if (n == 0) return;
  constexpr int kBlock = 256;
  const Scalars s = make_scalars(p);
  const bool vec =
      n % 4 == 0 && aligned16(param) && aligned16(grad) && aligned16(m) && aligned16(v);
  if (vec) {
    LOOM_LAUNCH(adamw_kernel<4>, grid_for(n / 4, kBlock), kBlock, 0, as_stream(stream))
    (param, grad, m, v, dev_ptr(copy), n / 4, s);
  } else {
    LOOM_LAUNCH(adamw_kernel<1>, grid_for(n, kBlock), kBlock, 0, as_stream(stream))
    (param, grad, m, v, dev_ptr(copy), n, s);
  }
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const cpu::AdamWParams& p, bf16* param_bf16, void* stream) {
  update(param, grad, m, v, n, p, param_bf16, stream);
}
void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const cpu::AdamWParams& p, f16* param_f16, void* stream) {
  update(param, grad, m, v, n, p, param_f16, stream);
}
void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const cpu::AdamWParams& p, std::nullptr_t, void* stream) {
  update(param, grad, m, v, n, p, static_cast<bf16*>(nullptr), stream);
}

}  // namespace loom::cuda
