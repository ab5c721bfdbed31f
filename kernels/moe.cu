// Mixture-of-Experts routing, cuda twin: the cpu twin's loops spread over tokens, sequences,
// experts or elements, each result summed in the cpu twin's order (no atomics).
#include "kernels/cuda_common.cuh"
#include "kernels/moe.h"

namespace loom::cuda {
namespace {

constexpr int kBlock = 128;

// N = B * T token rows (MoeDims::N() is host code).
__host__ __device__ __forceinline__ int tokens(const MoeDims& d) { return d.B * d.T; }

unsigned blocks_for(long long n, int block) { return (unsigned)((n + block - 1) / block); }

void check_dims(const MoeDims& d) {
  LOOM_CUDA_REQUIRE(d.B >= 0 && d.T >= 0 && d.E >= 1 && d.k >= 1 && d.k <= d.E,
                    "moe: needs B, T >= 0 and 1 <= k <= E");
}

// One thread per token: softmax, lse and top-k exactly as the cpu twin (double sums).
__global__ void router_forward_kernel(float* probs, float* lse, int32_t* choice, float* gate,
                                      const float* logits, MoeDims d) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= tokens(d)) return;
  const int E = d.E, k = d.k;
  const float* x = logits + (size_t)t * E;
  float* p = probs + (size_t)t * E;
  float mx = x[0];
  for (int e = 1; e < E; ++e) mx = fmaxf(mx, x[e]);
  double sum = 0;
  for (int e = 0; e < E; ++e) sum += exp((double)x[e] - mx);
  for (int e = 0; e < E; ++e) p[e] = (float)(exp((double)x[e] - mx) / sum);
  lse[t] = (float)(mx + log(sum));
  int32_t* c = choice + (size_t)t * k;
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int e = 0; e < E; ++e) {
      bool taken = false;
      for (int i = 0; i < j; ++i) taken = taken || c[i] == e;
      if (!taken && (best < 0 || p[e] > p[best])) best = e;
    }
    c[j] = best;
    gate[(size_t)t * k + j] = p[best];
  }
}

// Plan, step 1, one thread per sequence b: counts (B, E) before dropping; admitted assignments
// marked slot 0 (dropped -1) in priority order; kept (B, E) the admitted ones.
__global__ void plan_admit_kernel(int32_t* slot, int32_t* counts, int32_t* kept,
                                  const int32_t* choice, MoeDims d) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= d.B) return;
  const int E = d.E, k = d.k, T = d.T;
  int32_t* cnt = counts + (size_t)b * E;
  int32_t* in_seq = kept + (size_t)b * E;
  for (int e = 0; e < E; ++e) cnt[e] = 0, in_seq[e] = 0;
  for (int j = 0; j < k; ++j)
    for (int t = b * T; t < (b + 1) * T; ++t) {
      const size_t a = (size_t)t * k + j;
      const int e = choice[a];
      cnt[e]++;
      const bool admit = d.cap <= 0 || in_seq[e] < d.cap;
      slot[a] = admit ? 0 : -1;
      if (admit) in_seq[e]++;
    }
}

// Plan, step 2, one block: offsets (E + 1) the exclusive scan of the experts' kept totals; kept
// (B, E) becomes each sequence's first row in its expert's range.
__global__ void plan_offsets_kernel(int32_t* offsets, int32_t* kept, MoeDims d) {
  const int E = d.E;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int32_t total = 0;
    for (int b = 0; b < d.B; ++b) total += kept[(size_t)b * E + e];
    offsets[e + 1] = total;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    offsets[0] = 0;
    for (int e = 0; e < E; ++e) offsets[e + 1] += offsets[e];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int32_t next = offsets[e];
    for (int b = 0; b < d.B; ++b) {
      const int32_t n = kept[(size_t)b * E + e];
      kept[(size_t)b * E + e] = next;
      next += n;
    }
  }
}

// Plan, step 3, one thread per sequence: its kept assignments get rows in token, then choice
// order (the sequences' ranges follow each other within an expert, as the cpu twin's loop).
__global__ void plan_rows_kernel(int32_t* slot, int32_t* rows, const int32_t* choice, MoeDims d,
                                 int32_t* kept) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= d.B) return;
  const int k = d.k;
  int32_t* next = kept + (size_t)b * d.E;
  for (int t = b * d.T; t < (b + 1) * d.T; ++t)
    for (int j = 0; j < k; ++j) {
      const size_t a = (size_t)t * k + j;
      if (slot[a] < 0) continue;
      const int32_t s = next[choice[a]]++;
      slot[a] = s;
      rows[s] = t;
    }
}

template <typename U>
__global__ void gather_rows_kernel(U* out, const U* x, const int32_t* rows, int M, int C) {
  const size_t n = (size_t)M * C, stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = x[(size_t)rows[i / C] * C + i % C];
}

template <typename T>
__global__ void combine_kernel(T* out, const T* y, const T* bias, const int32_t* slot,
                               const int32_t* choice, const float* gate, MoeDims d, int C) {
  const size_t n = (size_t)tokens(d) * C, stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const size_t t = i / C, c = i % C;
    float o = 0.0f;
    for (int j = 0; j < d.k; ++j) {
      const size_t a = t * d.k + j;
      const int32_t s = slot[a];
      if (s < 0) continue;
      const float yv = to_f32(y[(size_t)s * C + c]);
      o += gate[a] * (bias ? yv + to_f32(bias[(size_t)choice[a] * C + c]) : yv);
    }
    out[i] = from_f32<T>(o);
  }
}

// One warp per assignment (t, j): dy at its slot, dgate the dot of dout with y + bias.
template <typename T>
__global__ void combine_backward_kernel(T* dy, float* dgate, const T* dout, const T* y,
                                        const T* bias, const int32_t* slot, const int32_t* choice,
                                        const float* gate, MoeDims d, int C) {
  const int lane = threadIdx.x & 31;
  const long long a = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (a >= (long long)tokens(d) * d.k) return;
  const int32_t s = slot[a];
  if (s < 0) {
    if (lane == 0) dgate[a] = 0.0f;
    return;
  }
  const size_t t = (size_t)a / d.k;
  const T* g = dout + t * C;
  const T* yr = y + (size_t)s * C;
  const T* br = bias ? bias + (size_t)choice[a] * C : nullptr;
  T* dyr = dy + (size_t)s * C;
  const float ga = gate[a];
  float dot = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float gc = to_f32(g[c]), yv = to_f32(yr[c]);
    dyr[c] = from_f32<T>(ga * gc);
    dot += gc * (br ? yv + to_f32(br[c]) : yv);
  }
  dot = warp_sum(dot);
  if (lane == 0) dgate[a] = dot;
}

// One thread per (expert, column): dbias += gate * dout over its kept assignments in token
// order, then choice order.
template <typename T>
__global__ void combine_dbias_kernel(float* dbias, const T* dout, const int32_t* slot,
                                     const int32_t* choice, const float* gate, MoeDims d, int C) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)d.E * C) return;
  const int e = (int)(i / C), c = (int)(i % C);
  float acc = dbias[i];
  for (int t = 0; t < tokens(d); ++t)
    for (int j = 0; j < d.k; ++j) {
      const size_t a = (size_t)t * d.k + j;
      if (slot[a] < 0 || choice[a] != e) continue;
      acc += gate[a] * to_f32(dout[(size_t)t * C + c]);
    }
  dbias[i] = acc;
}

// One thread per element of dx: the token's kept rows added in increasing row order.
template <typename T>
__global__ void scatter_add_kernel(T* dx, const T* dxp, const int32_t* slot, MoeDims d, int C) {
  const size_t n = (size_t)tokens(d) * C, stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const size_t t = i / C, c = i % C;
    const int32_t* st = slot + t * d.k;
    float acc = to_f32(dx[i]);
    int32_t prev = -1;
    for (int j = 0; j < d.k; ++j) {  // the next larger kept slot, k times at most
      int32_t s = -1;
      for (int q = 0; q < d.k; ++q)
        if (st[q] > prev && (s < 0 || st[q] < s)) s = st[q];
      if (s < 0) break;
      acc += to_f32(dxp[(size_t)s * C + c]);
      prev = s;
    }
    dx[i] = from_f32<T>(acc);
  }
}

constexpr int kLossBlock = 256;

// One block: aux over (b, e) pairs and z over tokens, each thread's part in order, then the
// block's fixed tree.
__global__ void losses_kernel(double* acc, const float* probs, const float* lse,
                              const int32_t* counts, MoeDims d, double aux_coef, double z_coef,
                              double seq_weight, double tok_weight) {
  const int E = d.E, T = d.T;
  double aux = 0, z = 0;
  for (int be = threadIdx.x; be < d.B * E; be += blockDim.x) {
    const int b = be / E, e = be % E;
    double P = 0;
    for (int t = b * T; t < (b + 1) * T; ++t) P += probs[(size_t)t * E + e];
    const double f = (double)counts[be] / ((double)T * d.k);
    aux += f * (P / T);
  }
  for (int t = threadIdx.x; t < tokens(d); t += blockDim.x) z += (double)lse[t] * lse[t];
  aux = block_sum(aux);
  z = block_sum(z);
  if (threadIdx.x == 0) {
    acc[0] += aux_coef * E * aux * seq_weight;
    acc[1] += z_coef * z * tok_weight;
  }
}

// dp[e], the gradient of token t's probability p[e]: the balancing term, then the kept gates'
// dgate in choice order (the cpu twin's sum).
__device__ double router_dp(int e, const int32_t* cnt, const int32_t* choice, const int32_t* slot,
                            const float* dgate, size_t a0, const MoeDims& d, double aux_coef,
                            double seq_weight) {
  double v = aux_coef * d.E * ((double)cnt[e] / ((double)d.T * d.k)) / d.T * seq_weight;
  for (int j = 0; j < d.k; ++j)
    if (slot[a0 + j] >= 0 && choice[a0 + j] == e) v += dgate[a0 + j];
  return v;
}

// One thread per token; dp recomputed per expert (no per-thread array of E).
__global__ void router_backward_kernel(float* dlogits, const float* probs, const float* lse,
                                       const int32_t* choice, const int32_t* slot,
                                       const float* dgate, const int32_t* counts, MoeDims d,
                                       double aux_coef, double z_coef, double seq_weight,
                                       double tok_weight) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= tokens(d)) return;
  const int E = d.E;
  const float* p = probs + (size_t)t * E;
  const int32_t* cnt = counts + (size_t)(t / d.T) * E;
  const size_t a0 = (size_t)t * d.k;
  double dot = 0;
  for (int e = 0; e < E; ++e)
    dot += p[e] * router_dp(e, cnt, choice, slot, dgate, a0, d, aux_coef, seq_weight);
  float* g = dlogits + (size_t)t * E;
  const double zg = z_coef * 2.0 * lse[t] * tok_weight;
  for (int e = 0; e < E; ++e) {
    const double dp = router_dp(e, cnt, choice, slot, dgate, a0, d, aux_coef, seq_weight);
    g[e] = (float)(p[e] * (dp - dot) + zg * p[e]);
  }
}

}  // namespace

void moe_router_forward(float* probs, float* lse, int32_t* choice, float* gate, const float* logits,
                        const MoeDims& d, void* stream) {
  check_dims(d);
  if (tokens(d) == 0) return;
  LOOM_LAUNCH(router_forward_kernel, blocks_for(tokens(d), kBlock), kBlock, 0, as_stream(stream))
  (probs, lse, choice, gate, logits, d);
  LOOM_CUDA_CHECK_LAUNCH();
}

size_t moe_plan_work_ints(const MoeDims& d) { return (size_t)d.B * d.E; }

int moe_plan(int32_t* slot, int32_t* offsets, int32_t* rows, int32_t* counts, const int32_t* choice,
             const MoeDims& d, int32_t* work, void* stream) {
  check_dims(d);
  cudaStream_t s = as_stream(stream);
  if (d.B > 0) {
    LOOM_LAUNCH(plan_admit_kernel, blocks_for(d.B, 32), 32, 0, s)(slot, counts, work, choice, d);
    LOOM_CUDA_CHECK_LAUNCH();
  }
  LOOM_LAUNCH(plan_offsets_kernel, 1, kBlock, 0, s)(offsets, work, d);
  LOOM_CUDA_CHECK_LAUNCH();
  if (d.B > 0) {
    LOOM_LAUNCH(plan_rows_kernel, blocks_for(d.B, 32), 32, 0, s)
    (slot, rows, choice, d, work);
    LOOM_CUDA_CHECK_LAUNCH();
  }
  int32_t M = 0;  // the host needs it for the expert GEMMs' shapes
  LOOM_CUDA_CHECK(cudaMemcpyAsync(&M, offsets + d.E, sizeof(M), cudaMemcpyDeviceToHost, s));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(s));
  return M;
}

void moe_gather_rows(void* out, const void* x, const int32_t* rows, int M, int C, size_t esize,
                     void* stream) {
  if (M <= 0 || C <= 0) return;
  cudaStream_t s = as_stream(stream);
  const unsigned g = grid_for((size_t)M * C, kBlock);
  switch (esize) {
    case 1:
      LOOM_LAUNCH(gather_rows_kernel<uint8_t>, g, kBlock, 0, s)
      (static_cast<uint8_t*>(out), static_cast<const uint8_t*>(x), rows, M, C);
      break;
    case 2:
      LOOM_LAUNCH(gather_rows_kernel<uint16_t>, g, kBlock, 0, s)
      (static_cast<uint16_t*>(out), static_cast<const uint16_t*>(x), rows, M, C);
      break;
    case 4:
      LOOM_LAUNCH(gather_rows_kernel<uint32_t>, g, kBlock, 0, s)
      (static_cast<uint32_t*>(out), static_cast<const uint32_t*>(x), rows, M, C);
      break;
    case 8:
      LOOM_LAUNCH(gather_rows_kernel<uint64_t>, g, kBlock, 0, s)
      (static_cast<uint64_t*>(out), static_cast<const uint64_t*>(x), rows, M, C);
      break;
    default:
      LOOM_CUDA_REQUIRE(false, "moe_gather_rows: the element size must be 1, 2, 4 or 8 bytes");
  }
  LOOM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void moe_combine(T* out, const T* y, const T* bias, const int32_t* slot, const int32_t* choice,
                 const float* gate, const MoeDims& d, int C, void* stream) {
  check_dims(d);
  const size_t n = (size_t)tokens(d) * C;
  if (n == 0) return;
  LOOM_LAUNCH(combine_kernel<dev_t<T>>, grid_for(n, kBlock), kBlock, 0, as_stream(stream))
  (dev_ptr(out), dev_ptr(y), dev_ptr(bias), slot, choice, gate, d, C);
  LOOM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void moe_combine_backward(T* dy, float* dgate, float* dbias, const T* dout, const T* y,
                          const T* bias, const int32_t* slot, const int32_t* choice,
                          const float* gate, const MoeDims& d, int C, void* stream) {
  check_dims(d);
  cudaStream_t s = as_stream(stream);
  const long long assignments = (long long)tokens(d) * d.k;
  if (assignments > 0) {
    constexpr int kWarps = kBlock / 32;
    LOOM_LAUNCH(combine_backward_kernel<dev_t<T>>, blocks_for(assignments, kWarps), kBlock, 0, s)
    (dev_ptr(dy), dgate, dev_ptr(dout), dev_ptr(y), dev_ptr(bias), slot, choice, gate, d, C);
    LOOM_CUDA_CHECK_LAUNCH();
  }
  if (dbias && C > 0) {
    LOOM_LAUNCH(combine_dbias_kernel<dev_t<T>>, blocks_for((long long)d.E * C, kBlock), kBlock, 0,
                s)
    (dbias, dev_ptr(dout), slot, choice, gate, d, C);
    LOOM_CUDA_CHECK_LAUNCH();
  }
}

template <typename T>
void moe_scatter_add_rows(T* dx, const T* dxp, const int32_t* slot, const MoeDims& d, int C,
                          void* stream) {
  check_dims(d);
  const size_t n = (size_t)tokens(d) * C;
  if (n == 0) return;
  LOOM_LAUNCH(scatter_add_kernel<dev_t<T>>, grid_for(n, kBlock), kBlock, 0, as_stream(stream))
  (dev_ptr(dx), dev_ptr(dxp), slot, d, C);
  LOOM_CUDA_CHECK_LAUNCH();
}

void moe_losses(double* acc, const float* probs, const float* lse, const int32_t* counts,
                const MoeDims& d, double aux_coef, double z_coef, double seq_weight,
                double tok_weight, void* stream) {
  check_dims(d);
  LOOM_LAUNCH(losses_kernel, 1, kLossBlock, 0, as_stream(stream))
  (acc, probs, lse, counts, d, aux_coef, z_coef, seq_weight, tok_weight);
  LOOM_CUDA_CHECK_LAUNCH();
}

void moe_router_backward(float* dlogits, const float* probs, const float* lse,
                         const int32_t* choice, const int32_t* slot, const float* dgate,
                         const int32_t* counts, const MoeDims& d, double aux_coef, double z_coef,
                         double seq_weight, double tok_weight, void* stream) {
  check_dims(d);
  if (tokens(d) == 0) return;
  LOOM_LAUNCH(router_backward_kernel, blocks_for(tokens(d), kBlock), kBlock, 0, as_stream(stream))
  (dlogits, probs, lse, choice, slot, dgate, counts, d, aux_coef, z_coef, seq_weight, tok_weight);
  LOOM_CUDA_CHECK_LAUNCH();
}

#define LOOM_MOE_INSTANTIATE(T)                                                           \
  template void moe_combine<T>(T*, const T*, const T*, const int32_t*, const int32_t*,    \
                               const float*, const MoeDims&, int, void*);                 \
  template void moe_combine_backward<T>(T*, float*, float*, const T*, const T*, const T*, \
                                        const int32_t*, const int32_t*, const float*,     \
                                        const MoeDims&, int, void*);                      \
  template void moe_scatter_add_rows<T>(T*, const T*, const int32_t*, const MoeDims&, int, void*);
LOOM_MOE_INSTANTIATE(float)
LOOM_MOE_INSTANTIATE(bf16)
LOOM_MOE_INSTANTIATE(f16)
#undef LOOM_MOE_INSTANTIATE

}  // namespace loom::cuda
