// Mixture-of-Experts routing on the cpu: plain loops in a fixed order (the reference).
#include "kernels/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace loom::cpu {

void moe_router_forward(float* probs, float* lse, int32_t* choice, float* gate, const float* logits,
                        const MoeDims& d) {
  const int E = d.E, k = d.k;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < d.N(); ++t) {
    const float* x = logits + size_t(t) * E;
    float* p = probs + size_t(t) * E;
    float mx = x[0];
    for (int e = 1; e < E; ++e) mx = std::max(mx, x[e]);
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += std::exp(double(x[e]) - mx);
    for (int e = 0; e < E; ++e) p[e] = float(std::exp(double(x[e]) - mx) / sum);
    lse[t] = float(mx + std::log(sum));
    // Top-k by repeated selection: the largest not yet taken, the lower index on ties.
    int32_t* c = choice + size_t(t) * k;
    for (int j = 0; j < k; ++j) {
      int best = -1;
      for (int e = 0; e < E; ++e) {
        bool taken = false;
        for (int i = 0; i < j; ++i) taken = taken || c[i] == e;
        if (!taken && (best < 0 || p[e] > p[best])) best = e;
      }
      c[j] = best;
      gate[size_t(t) * k + j] = p[best];
    }
  }
}

int moe_plan(int32_t* slot, int32_t* offsets, int32_t* rows, int32_t* counts, const int32_t* choice,
             const MoeDims& d) {
  const int E = d.E, k = d.k, T = d.T;
  std::fill(counts, counts + size_t(d.B) * E, 0);
  std::vector<int32_t> kept(static_cast<size_t>(E), 0);  // per expert, over the micro-batch
  for (int b = 0; b < d.B; ++b) {
    std::vector<int32_t> in_seq(static_cast<size_t>(E), 0);  // admitted in this sequence
    for (int j = 0; j < k; ++j)  // priority: all first choices, then all second ones, ...
      for (int t = b * T; t < (b + 1) * T; ++t) {
        const int e = choice[size_t(t) * k + j];
        counts[size_t(b) * E + e]++;
        const bool admit = d.cap <= 0 || in_seq[size_t(e)] < d.cap;
        slot[size_t(t) * k + j] = admit ? 0 : -1;  // marked; rows assigned below
        if (admit) in_seq[size_t(e)]++, kept[size_t(e)]++;
      }
  }
  offsets[0] = 0;
  for (int e = 0; e < E; ++e) offsets[e + 1] = offsets[e] + kept[size_t(e)];
  // Rows in expert order; within an expert in token order, then choice order.
  std::vector<int32_t> next(offsets, offsets + E);
  for (int t = 0; t < d.N(); ++t)
    for (int j = 0; j < k; ++j) {
      int32_t& s = slot[size_t(t) * k + j];
      if (s < 0) continue;
      const int e = choice[size_t(t) * k + j];
      s = next[size_t(e)]++;
      rows[s] = t;
    }
  return offsets[E];
}

void moe_gather_rows(void* out, const void* x, const int32_t* rows, int M, int C, size_t esize) {
  const size_t row = size_t(C) * esize;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < M; ++i)
    std::memcpy(static_cast<char*>(out) + size_t(i) * row,
                static_cast<const char*>(x) + size_t(rows[i]) * row, row);
}

void moe_combine(float* out, const float* y, const float* bias, const int32_t* slot,
                 const int32_t* choice, const float* gate, const MoeDims& d, int C) {
  const int k = d.k;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < d.N(); ++t) {
    float* o = out + size_t(t) * C;
    std::fill(o, o + C, 0.0f);
    for (int j = 0; j < k; ++j) {
      const int32_t s = slot[size_t(t) * k + j];
      if (s < 0) continue;
      const float g = gate[size_t(t) * k + j];
      const float* yr = y + size_t(s) * C;
      const float* br = bias ? bias + size_t(choice[size_t(t) * k + j]) * C : nullptr;
      for (int c = 0; c < C; ++c) o[c] += g * (br ? yr[c] + br[c] : yr[c]);
    }
  }
}

void moe_combine_backward(float* dy, float* dgate, float* dbias, const float* dout, const float* y,
                          const float* bias, const int32_t* slot, const int32_t* choice,
                          const float* gate, const MoeDims& d, int C) {
  const int k = d.k;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < d.N(); ++t) {
    const float* g = dout + size_t(t) * C;
    for (int j = 0; j < k; ++j) {
      const size_t a = size_t(t) * k + j;
      const int32_t s = slot[a];
      if (s < 0) {
        dgate[a] = 0.0f;
        continue;
      }
      const float* yr = y + size_t(s) * C;
      const float* br = bias ? bias + size_t(choice[a]) * C : nullptr;
      float* dyr = dy + size_t(s) * C;
      double dot = 0;
      for (int c = 0; c < C; ++c) {
        dyr[c] = gate[a] * g[c];
        dot += double(g[c]) * (br ? yr[c] + br[c] : yr[c]);
      }
      dgate[a] = float(dot);
    }
  }
  if (!dbias) return;
  for (int t = 0; t < d.N(); ++t)  // in token order: deterministic
    for (int j = 0; j < k; ++j) {
      const size_t a = size_t(t) * k + j;
      if (slot[a] < 0) continue;
      float* db = dbias + size_t(choice[a]) * C;
      const float* g = dout + size_t(t) * C;
      for (int c = 0; c < C; ++c) db[c] += gate[a] * g[c];
    }
}

void moe_scatter_add_rows(float* dx, const float* dxp, const int32_t* rows, int M, int C) {
  for (int i = 0; i < M; ++i) {
    float* o = dx + size_t(rows[i]) * C;
    const float* r = dxp + size_t(i) * C;
    for (int c = 0; c < C; ++c) o[c] += r[c];
  }
}

void moe_losses(double* acc, const float* probs, const float* lse, const int32_t* counts,
                const MoeDims& d, double aux_coef, double z_coef, double seq_weight,
                double tok_weight) {
  const int E = d.E, T = d.T;
  double aux = 0, z = 0;
  for (int b = 0; b < d.B; ++b)
    for (int e = 0; e < E; ++e) {
      double P = 0;
      for (int t = b * T; t < (b + 1) * T; ++t) P += probs[size_t(t) * E + e];
      const double f = double(counts[size_t(b) * E + e]) / (double(T) * d.k);
      aux += f * (P / T);
    }
  for (int t = 0; t < d.N(); ++t) z += double(lse[t]) * lse[t];
  acc[0] += aux_coef * E * aux * seq_weight;
  acc[1] += z_coef * z * tok_weight;
}

void moe_router_backward(float* dlogits, const float* probs, const float* lse,
                         const int32_t* choice, const int32_t* slot, const float* dgate,
                         const int32_t* counts, const MoeDims& d, double aux_coef, double z_coef,
                         double seq_weight, double tok_weight) {
  const int E = d.E, k = d.k, T = d.T;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < d.N(); ++t) {
    const float* p = probs + size_t(t) * E;
    const int32_t* cnt = counts + size_t(t / T) * E;
    std::vector<double> dp(static_cast<size_t>(E));
    for (int e = 0; e < E; ++e)
      dp[size_t(e)] = aux_coef * E * (double(cnt[e]) / (double(T) * k)) / T * seq_weight;
    for (int j = 0; j < k; ++j) {
      const size_t a = size_t(t) * k + j;
      if (slot[a] >= 0) dp[size_t(choice[a])] += dgate[a];
    }
    double dot = 0;
    for (int e = 0; e < E; ++e) dot += p[e] * dp[size_t(e)];
    float* g = dlogits + size_t(t) * E;
    const double zg = z_coef * 2.0 * lse[t] * tok_weight;
    for (int e = 0; e < E; ++e) g[e] = float(p[e] * (dp[size_t(e)] - dot) + zg * p[e]);
  }
}

}  // namespace loom::cpu
