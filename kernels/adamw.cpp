// AdamW cpu twin with torch.optim.AdamW's (single-tensor, torch 1.13) fp32 order of operations.
#include "kernels/adamw.h"

#include <cmath>

namespace loom::cpu {

void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const AdamWCoefs& c) {
  if (!c.apply) return;
  // Scalars are python floats (double) in torch and are cast to fp32 when they meet a tensor
  // (adamw_coefs).
  const float decay = c.decay, beta1 = c.beta1, beta2 = c.beta2;
  const float one_m_b1 = c.one_m_b1, one_m_b2 = c.one_m_b2;
  const float neg_step_size = c.neg_step_size, inv_bc2_sqrt = c.inv_bc2_sqrt;
  const float eps = c.eps, gs = c.gs;
  const long long N = (long long)n;
#pragma omp parallel for simd schedule(static) if (N >= (1 << 15))
  for (long long i = 0; i < N; i++) {
    const float g = grad[i] * gs;
    const float pi = param[i] * decay;
    const float mi = m[i] * beta1 + one_m_b1 * g;         // exp_avg.mul_(b1).add_(g, 1-b1)
    const float vi = v[i] * beta2 + one_m_b2 * g * g;     // exp_avg_sq.mul_(b2).addcmul_(g, g, 1-b2)
    // (v.sqrt() / sqrt(bc2)).add_(eps), with the division by the constant as a multiplication
    // (one rounding more; the per-element divisions made this loop compute-bound).
    const float denom = std::sqrt(vi) * inv_bc2_sqrt + eps;
    param[i] = pi + neg_step_size * mi / denom;           // param.addcdiv_(m, denom, -lr/bc1)
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace loom::cpu
