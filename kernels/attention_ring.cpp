// Ring attention cpu twin: per (b, head) BLAS on strided views, online softmax across blocks.
#include "kernels/attention_ring.h"

#include <cmath>
#include <cstring>

#include "kernels/matmul.h"
#include "kernels/vmath.h"

namespace loom::cpu {

size_t ring_attention_work_floats(const RingDims& d) {
  return 2 * size_t(d.B) * size_t(d.NH) * size_t(d.Tq) * size_t(d.Tk);
}

void ring_attention_begin(float* acc, float* m, float* l, const RingDims& d) {
  const size_t rows = size_t(d.B) * size_t(d.NH) * size_t(d.Tq);
  std::memset(acc, 0, sizeof(float) * size_t(d.B) * d.Tq * d.NH * d.D);
  for (size_t i = 0; i < rows; ++i) m[i] = -INFINITY, l[i] = 0.0f;
}

void ring_attention_forward_step(float* acc, float* m, float* l, const float* q, const float* k,
                                 const float* v, const int* qpos, const int* kpos,
                                 const RingDims& d, float* work) {
  const int C = d.NH * d.D, group = d.NH / d.NKV, Tq = d.Tq, Tk = d.Tk;
  const float scale = 1.0f / std::sqrt(float(d.D));
  // Every (b, h) owns its rows of acc, m, l and its score tile: no scheduling dependence.
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < d.B * d.NH; ++bh) {
    const int b = bh / d.NH, h = bh % d.NH, kvh = h / group;
    const float* qb = q + size_t(b) * Tq * d.ldq + size_t(h) * d.D;     // (Tq, D), ld ldq
    const float* kb = k + size_t(b) * Tk * d.ldkv + size_t(kvh) * d.D;  // (Tk, D), ld ldkv
    const float* vb = v + size_t(b) * Tk * d.ldkv + size_t(kvh) * d.D;  // (Tk, D), ld ldkv
    float* s = work + size_t(bh) * Tq * Tk;                             // (Tq, Tk)
    float* ab = acc + size_t(b) * Tq * C + size_t(h) * d.D;             // (Tq, D), ld C
    float* mb = m + size_t(bh) * Tq;
    float* lb = l + size_t(bh) * Tq;
    // S (Tq, Tk) = scale * Q K^T
    gemm(false, true, Tq, Tk, d.D, scale, qb, d.ldq, kb, d.ldkv, 0.0f, s, Tk);
    for (int t = 0; t < Tq; ++t) {
      float* row = s + size_t(t) * Tk;
      float mx = mb[t];
      for (int j = 0; j < Tk; ++j)
        if (kpos[j] <= qpos[t] && row[j] > mx) mx = row[j];
      if (mx == -INFINITY) {  // nothing seen yet: P = 0, the state stays empty
        std::memset(row, 0, sizeof(float) * size_t(Tk));
        continue;
      }
      const float keep = exp_clamped(mb[t] - mx);  // 0 when mb[t] = -inf
      float sum = 0.0f;
      for (int j = 0; j < Tk; ++j) {
        const float p = kpos[j] <= qpos[t] ? exp_clamped(row[j] - mx) : 0.0f;
        row[j] = p;
        sum += p;
      }
      float* a = ab + size_t(t) * C;
      for (int e = 0; e < d.D; ++e) a[e] *= keep;
      lb[t] = lb[t] * keep + sum;
      mb[t] = mx;
    }
    // acc (Tq, D) += P (Tq, Tk) V (Tk, D)
    gemm(false, false, Tq, d.D, Tk, 1.0f, s, Tk, vb, d.ldkv, 1.0f, ab, C);
  }
}

void ring_attention_finish(float* out, float* lse, const float* acc, const float* m, const float* l,
                           const RingDims& d) {
  const int C = d.NH * d.D;
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < d.B * d.NH; ++bh) {
    const int b = bh / d.NH, h = bh % d.NH;
    for (int t = 0; t < d.Tq; ++t) {
      const size_t r = size_t(bh) * d.Tq + size_t(t);
      const float inv = 1.0f / l[r];
      const size_t o = (size_t(b) * d.Tq + size_t(t)) * C + size_t(h) * d.D;
      for (int e = 0; e < d.D; ++e) out[o + size_t(e)] = acc[o + size_t(e)] * inv;
      lse[r] = m[r] + std::log(l[r]);
    }
  }
}

void ring_attention_delta(float* delta, const float* dout, const float* out, const RingDims& d) {
  const int C = d.NH * d.D;
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < d.B * d.NH; ++bh) {
    const int b = bh / d.NH, h = bh % d.NH;
    for (int t = 0; t < d.Tq; ++t) {
      const size_t o = (size_t(b) * d.Tq + size_t(t)) * C + size_t(h) * d.D;
      float dot = 0.0f;
      for (int e = 0; e < d.D; ++e) dot += dout[o + size_t(e)] * out[o + size_t(e)];
      delta[size_t(bh) * d.Tq + size_t(t)] = dot;
    }
  }
}

void ring_attention_backward_step(float* dq, float* dk, float* dv, const float* dout,
                                  const float* q, const float* k, const float* v, const float* lse,
                                  const float* delta, const int* qpos, const int* kpos,
                                  const RingDims& d, float* work) {
  const int C = d.NH * d.D, group = d.NH / d.NKV, Tq = d.Tq, Tk = d.Tk;
  const float scale = 1.0f / std::sqrt(float(d.D));
  // dk and dv of a kv head sum its query heads in order: threads own whole (b, kv head) pairs
  // (and the dq rows of that group's heads).
#pragma omp parallel for schedule(static)
  for (int bk = 0; bk < d.B * d.NKV; ++bk) {
    const int b = bk / d.NKV, kvh = bk % d.NKV;
    const float* kb = k + size_t(b) * Tk * d.ldkv + size_t(kvh) * d.D;
    const float* vb = v + size_t(b) * Tk * d.ldkv + size_t(kvh) * d.D;
    float* dkb = dk + size_t(b) * Tk * d.ldkv + size_t(kvh) * d.D;  // (Tk, D), ld ldkv
    float* dvb = dv + size_t(b) * Tk * d.ldkv + size_t(kvh) * d.D;
    float* p = work + size_t(bk) * 2 * Tq * Tk;  // (Tq, Tk)
    float* ds = p + size_t(Tq) * Tk;             // (Tq, Tk)
    for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
      const int bh = b * d.NH + h;
      const float* qb = q + size_t(b) * Tq * d.ldq + size_t(h) * d.D;
      float* dqb = dq + size_t(b) * Tq * d.ldq + size_t(h) * d.D;
      const float* go = dout + size_t(b) * Tq * C + size_t(h) * d.D;  // (Tq, D), ld C
      // P = exp(scale Q K^T - lse), masked.
      gemm(false, true, Tq, Tk, d.D, scale, qb, d.ldq, kb, d.ldkv, 0.0f, p, Tk);
      for (int t = 0; t < Tq; ++t) {
        const float ls = lse[size_t(bh) * Tq + size_t(t)];
        float* row = p + size_t(t) * Tk;
        for (int j = 0; j < Tk; ++j) row[j] = kpos[j] <= qpos[t] ? exp_clamped(row[j] - ls) : 0.0f;
      }
      // dP (Tq, Tk) = dO V^T; dS = P (dP - delta)
      gemm(false, true, Tq, Tk, d.D, 1.0f, go, C, vb, d.ldkv, 0.0f, ds, Tk);
      for (int t = 0; t < Tq; ++t) {
        const float dl = delta[size_t(bh) * Tq + size_t(t)];
        for (int j = 0; j < Tk; ++j) {
          const size_t i = size_t(t) * Tk + size_t(j);
          ds[i] = p[i] * (ds[i] - dl);
        }
      }
      // dQ += scale dS K; dK += scale dS^T Q; dV += P^T dO
      gemm(false, false, Tq, d.D, Tk, scale, ds, Tk, kb, d.ldkv, 1.0f, dqb, d.ldq);
      gemm(true, false, Tk, d.D, Tq, scale, ds, Tk, qb, d.ldq, 1.0f, dkb, d.ldkv);
      gemm(true, false, Tk, d.D, Tq, 1.0f, p, Tk, go, C, 1.0f, dvb, d.ldkv);
    }
  }
}

}  // namespace loom::cpu
