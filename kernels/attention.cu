// Causal attention cuda twin, flash style: shared K/V tiles, online softmax, saved logsumexp, no
// atomics; fp32 math on CUDA cores (bf16/fp16 with head size 64 or 128: attention_tc.cu).
#include <cmath>
#include <type_traits>

#include "kernels/attention.h"
#include "kernels/attention_fallback.cuh"
#include "kernels/attention_tc.cuh"
#include "kernels/cuda_common.cuh"

namespace loom::cuda {
namespace {

// out (B, T, C) and lse (B, NH, T). Block: (query tile of kWarps*R rows, b*NH + h).
template <int D, typename T>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(T* out, float* lse, const T* qkv, Dims g) {
  constexpr int R = rows_fwd<D>(), BR = kWarps * R, P = D + 1, E = (D + 31) / 32;
  __shared__ float sq[BR * D];
  __shared__ float sk[kTile * P];
  __shared__ float sv[kTile * P];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * BR;  // longest rows first
  const float scale = 1.0f / sqrtf((float)D);
  const T* qb = qkv + g.q_off(b, h, D);
  const T* kb = qkv + g.k_off(b, h, D);
  const T* vb = qkv + g.v_off(b, h, D);
  load_tile<D, D>(sq, qb, q0, BR, g);

  float o[R][E], mrow[R], lrow[R];
#pragma unroll
  for (int r = 0; r < R; r++) {
    mrow[r] = -INFINITY;
    lrow[r] = 0.0f;
#pragma unroll
    for (int e = 0; e < E; e++) o[r][e] = 0.0f;
  }
  const int kend = min(g.T, q0 + BR);  // keys [0, kend) are visible to some row of the tile
  for (int k0 = 0; k0 < kend; k0 += kTile) {
    __syncthreads();  // the previous tile is no longer read
    load_tile<D, P>(sk, kb, k0, kTile, g);
    load_tile<D, P>(sv, vb, k0, kTile, g);
    __syncthreads();  // tiles (and sq on the first pass) are complete
#pragma unroll
    for (int r = 0; r < R; r++) {
      const int rl = warp * R + r, t = q0 + rl;
      if (t >= g.T || k0 > t) continue;  // warp-uniform: no visible key in this tile
      const int s = k0 + lane;           // this lane's key; visible when s <= t (then s < T)
      float sc = -INFINITY;
      if (s <= t) {
        float acc = 0.0f;
#pragma unroll 16
        for (int d = 0; d < D; d++) acc += sq[rl * D + d] * sk[lane * P + d];
        sc = acc * scale;
      }
      const float mnew = fmaxf(mrow[r], warp_max(sc));  // finite: key k0 <= t is visible
      const float p = s <= t ? expf(sc - mnew) : 0.0f;
      const float corr = expf(mrow[r] - mnew);  // 0 on the first visible tile
      lrow[r] = lrow[r] * corr + warp_sum(p);
      mrow[r] = mnew;
      const int jend = min(kTile, t - k0 + 1);  // visible keys of the tile
#pragma unroll
      for (int e = 0; e < E; e++) o[r][e] *= corr;
      for (int j = 0; j < jend; j++) {
        const float pj = __shfl_sync(kFullMask, p, j);
#pragma unroll
        for (int e = 0; e < E; e++) {
          const int d = lane + 32 * e;
          if (d < D) o[r][e] += pj * sv[j * P + d];
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; r++) {
    const int t = q0 + warp * R + r;
    if (t >= g.T) continue;
    const float inv = 1.0f / lrow[r];
    T* orow = out + ((size_t)b * g.T + t) * g.C + (size_t)h * D;
#pragma unroll
    for (int e = 0; e < E; e++) {
      const int d = lane + 32 * e;
      if (d < D) orow[d] = from_f32<T>(o[r][e] * inv);
    }
    if (lane == 0) lse[(size_t)bh * g.T + t] = mrow[r] + logf(lrow[r]);
  }
}

// delta (B, NH, T) = rowsum(dout * out) per head: one warp per (b, t, h).
template <typename T>
__global__ void attention_delta_kernel(float* delta, const T* dout, const T* out, int D, Dims g) {
  const size_t w = (size_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (w >= (size_t)g.B * g.T * g.NH) return;  // whole warp
  const int h = (int)(w % g.NH);
  const size_t bt = w / g.NH;
  const size_t off = bt * g.C + (size_t)h * D;
  float s = 0.0f;
  for (int d = lane; d < D; d += 32) s += to_f32(dout[off + d]) * to_f32(out[off + d]);
  s = warp_sum(s);
  const int b = (int)(bt / g.T), t = (int)(bt % g.T);
  if (lane == 0) delta[((size_t)b * g.NH + h) * g.T + t] = s;
}

// dQ rows of a query tile: dq_t = scale * sum_s dS_ts k_s, dS = P (dP - delta), P = exp(S - lse).
template <int D, typename T>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dq_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                 const float* delta, Dims g) {
  constexpr int R = rows_bwd<D>(), BR = kWarps * R, P = D + 1, E = (D + 31) / 32;
  __shared__ float sq[BR * D];
  __shared__ float sdo[BR * D];
  __shared__ float sk[kTile * P];
  __shared__ float sv[kTile * P];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * BR;
  const float scale = 1.0f / sqrtf((float)D);
  const T* qb = qkv + g.q_off(b, h, D);
  const T* kb = qkv + g.k_off(b, h, D);
  const T* vb = qkv + g.v_off(b, h, D);
  load_tile<D, D>(sq, qb, q0, BR, g);
  // dout has row stride C, not 3C: its own loop.
  for (int i = threadIdx.x; i < BR * D; i += kThreads) {
    const int r = i / D, d = i % D, t = q0 + r;
    sdo[i] = t < g.T ? to_f32(dout[((size_t)b * g.T + t) * g.C + (size_t)h * D + d]) : 0.0f;
  }
  float dq[R][E], lrow[R], drow[R];
#pragma unroll
  for (int r = 0; r < R; r++) {
    const int t = q0 + warp * R + r;
    lrow[r] = t < g.T ? lse[(size_t)bh * g.T + t] : 0.0f;
    drow[r] = t < g.T ? delta[(size_t)bh * g.T + t] : 0.0f;
#pragma unroll
    for (int e = 0; e < E; e++) dq[r][e] = 0.0f;
  }
  const int kend = min(g.T, q0 + BR);
  for (int k0 = 0; k0 < kend; k0 += kTile) {
    __syncthreads();
    load_tile<D, P>(sk, kb, k0, kTile, g);
    load_tile<D, P>(sv, vb, k0, kTile, g);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < R; r++) {
      const int rl = warp * R + r, t = q0 + rl;
      if (t >= g.T || k0 > t) continue;  // warp-uniform
      const int s = k0 + lane;
      float ds = 0.0f;
      if (s <= t) {
        float qk = 0.0f, dp = 0.0f;
#pragma unroll 16
        for (int d = 0; d < D; d++) {
          qk += sq[rl * D + d] * sk[lane * P + d];
          dp += sdo[rl * D + d] * sv[lane * P + d];
        }
        const float p = expf(qk * scale - lrow[r]);
        ds = p * (dp - drow[r]);
      }
      const int jend = min(kTile, t - k0 + 1);
      for (int j = 0; j < jend; j++) {
        const float dsj = __shfl_sync(kFullMask, ds, j);
#pragma unroll
        for (int e = 0; e < E; e++) {
          const int d = lane + 32 * e;
          if (d < D) dq[r][e] += dsj * sk[j * P + d];
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; r++) {
    const int t = q0 + warp * R + r;
    if (t >= g.T) continue;
    T* row = dqkv + g.q_off(b, h, D) + (size_t)t * g.row;
#pragma unroll
    for (int e = 0; e < E; e++) {
      const int d = lane + 32 * e;
      if (d < D) row[d] = from_f32<T>(dq[r][e] * scale);
    }
  }
}

// dK, dV rows of a key tile of kv head kvh: dv_s = sum_h sum_{t>=s} P_ts do_t, dk_s = scale *
// sum_h sum_{t>=s} dS_ts q_t over the query heads h of its group, in head order then query order
// (fixed: deterministic). Block: (key tile, b*NKV + kvh). Lane i of a warp takes query q0 + i of
// a 32-wide query tile.
template <int D, typename T>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dkv_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                  const float* delta, Dims g) {
  constexpr int R = rows_bwd<D>(), BK = kWarps * R, P = D + 1, E = (D + 31) / 32;
  __shared__ float sk[BK * D];
  __shared__ float sv[BK * D];
  __shared__ float sq[kTile * P];
  __shared__ float sdo[kTile * P];
  __shared__ float slse[kTile];
  __shared__ float sdelta[kTile];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int group = g.NH / g.NKV, b = blockIdx.y / g.NKV, h0 = (blockIdx.y % g.NKV) * group;
  const int k0 = blockIdx.x * BK;  // blocks of early keys have the most work: launched first
  const float scale = 1.0f / sqrtf((float)D);
  load_tile<D, D>(sk, qkv + g.k_off(b, h0, D), k0, BK, g);
  load_tile<D, D>(sv, qkv + g.v_off(b, h0, D), k0, BK, g);
  float dk[R][E], dv[R][E];
#pragma unroll
  for (int r = 0; r < R; r++) {
#pragma unroll
    for (int e = 0; e < E; e++) dk[r][e] = dv[r][e] = 0.0f;
  }
  for (int h = h0; h < h0 + group; h++) {
    const int bh = b * g.NH + h;
    for (int q0 = (k0 / kTile) * kTile; q0 < g.T; q0 += kTile) {
      __syncthreads();
      load_tile<D, P>(sq, qkv + g.q_off(b, h, D), q0, kTile, g);
      for (int i = threadIdx.x; i < kTile * D; i += kThreads) {
        const int r = i / D, d = i % D, t = q0 + r;
        sdo[r * P + d] =
            t < g.T ? to_f32(dout[((size_t)b * g.T + t) * g.C + (size_t)h * D + d]) : 0.0f;
      }
      if (threadIdx.x < kTile) {
        const int t = q0 + threadIdx.x;
        slse[threadIdx.x] = t < g.T ? lse[(size_t)bh * g.T + t] : 0.0f;
        sdelta[threadIdx.x] = t < g.T ? delta[(size_t)bh * g.T + t] : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < R; r++) {
        const int rl = warp * R + r, s = k0 + rl;
        if (s >= g.T || q0 + kTile - 1 < s) continue;  // warp-uniform: no query t >= s here
        const int t = q0 + lane;
        float p = 0.0f, ds = 0.0f;
        if (t >= s && t < g.T) {
          float qk = 0.0f, dp = 0.0f;
#pragma unroll 16
          for (int d = 0; d < D; d++) {
            qk += sq[lane * P + d] * sk[rl * D + d];
            dp += sdo[lane * P + d] * sv[rl * D + d];
          }
          p = expf(qk * scale - slse[lane]);
          ds = p * (dp - sdelta[lane]);
        }
        const int ibeg = max(0, s - q0), iend = min(kTile, g.T - q0);  // queries with t >= s, t < T
        for (int i = ibeg; i < iend; i++) {
          const float pi = __shfl_sync(kFullMask, p, i);
          const float dsi = __shfl_sync(kFullMask, ds, i);
#pragma unroll
          for (int e = 0; e < E; e++) {
            const int d = lane + 32 * e;
            if (d < D) {
              dv[r][e] += pi * sdo[i * P + d];
              dk[r][e] += dsi * sq[i * P + d];
            }
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; r++) {
    const int s = k0 + warp * R + r;
    if (s >= g.T) continue;
    T* krow = dqkv + g.k_off(b, h0, D) + (size_t)s * g.row;
    T* vrow = dqkv + g.v_off(b, h0, D) + (size_t)s * g.row;
#pragma unroll
    for (int e = 0; e < E; e++) {
      const int d = lane + 32 * e;
      if (d < D) {
        krow[d] = from_f32<T>(dk[r][e] * scale);
        vrow[d] = from_f32<T>(dv[r][e]);
      }
    }
  }
}

template <int D, typename T>
void launch_forward(T* out, float* lse, const T* qkv, const Dims& g, cudaStream_t s) {
  constexpr int BR = kWarps * rows_fwd<D>();
  const dim3 grid((unsigned)((g.T + BR - 1) / BR), (unsigned)(g.B * g.NH));
  LOOM_LAUNCH(attention_forward_kernel<D>, grid, kThreads, 0, s)(out, lse, qkv, g);
  LOOM_CUDA_CHECK_LAUNCH();
}

template <int D, typename T>
void launch_backward(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* delta,
                     const Dims& g, cudaStream_t s) {
  constexpr int BR = kWarps * rows_bwd<D>();
  const dim3 grid((unsigned)((g.T + BR - 1) / BR), (unsigned)(g.B * g.NH));
  LOOM_LAUNCH(attention_backward_dq_kernel<D>, grid, kThreads, 0, s)
  (dqkv, dout, qkv, lse, delta, g);
  LOOM_CUDA_CHECK_LAUNCH();
  const dim3 kv_grid(grid.x, (unsigned)(g.B * g.NKV));
  LOOM_LAUNCH(attention_backward_dkv_kernel<D>, kv_grid, kThreads, 0, s)
  (dqkv, dout, qkv, lse, delta, g);
  LOOM_CUDA_CHECK_LAUNCH();
}

template <typename H>
void forward(H* out, float* lse, const H* qkv, int B, int T_, int NH, int NKV, int D,
             void* stream) {
  const Dims g = check_dims(B, T_, NH, NKV, D);
  auto o = dev_ptr(out);
  auto x = dev_ptr(qkv);
  auto s = as_stream(stream);
  if constexpr (sizeof(H) == 2) {  // bf16/fp16, D = 64 or 128: tensor cores (attention_tc.cu)
    if (attention_uses_tensor_cores(D, 2) && tc::takes(D, out, qkv, out, qkv))
      return tc::forward(o, lse, x, tc::attn_layout(B, T_, NH, NKV, D), s);
  }
  by_head_size(D, [&](auto d) { launch_forward<decltype(d)::value>(o, lse, x, g, s); });
}

template <typename H>
void backward(H* dqkv, float* delta, const H* dout, const H* qkv, const H* out, const float* lse,
              int B, int T_, int NH, int NKV, int D, void* stream) {
  const Dims g = check_dims(B, T_, NH, NKV, D);
  cudaStream_t s = as_stream(stream);
  const size_t rows = (size_t)B * T_ * NH;
  LOOM_LAUNCH(attention_delta_kernel, (unsigned)((rows + kWarps - 1) / kWarps), kThreads, 0, s)
  (delta, dev_ptr(dout), dev_ptr(out), D, g);
  LOOM_CUDA_CHECK_LAUNCH();
  auto dx = dev_ptr(dqkv);
  auto go = dev_ptr(dout);
  auto x = dev_ptr(qkv);
  if constexpr (sizeof(H) == 2) {
    if (attention_uses_tensor_cores(D, 2) && tc::takes(D, dqkv, dout, qkv, out))
      return tc::backward(dx, go, x, lse, delta, tc::attn_layout(B, T_, NH, NKV, D), s);
  }
  by_head_size(D,
               [&](auto d) { launch_backward<decltype(d)::value>(dx, go, x, lse, delta, g, s); });
}

// C = NH * D: the multi-head entry points are the grouped ones with NKV = NH.
int head_size(int C, int NH) {
  LOOM_CUDA_REQUIRE(NH > 0 && C % NH == 0, "attention: need NH > 0 dividing C");
  return C / NH;
}

}  // namespace

#define LOOM_ATTENTION_ENTRY_POINTS(H)                                                          \
  void attention_forward(H* out, float* lse, const H* qkv, int B, int T, int C, int NH,         \
                         void* stream) {                                                        \
    forward(out, lse, qkv, B, T, NH, NH, head_size(C, NH), stream);                             \
  }                                                                                             \
  void attention_forward_gqa(H* out, float* lse, const H* qkv, int B, int T, int NH, int NKV,   \
                             int D, void* stream) {                                             \
    forward(out, lse, qkv, B, T, NH, NKV, D, stream);                                           \
  }                                                                                             \
  void attention_backward(H* dqkv, float* delta, const H* dout, const H* qkv, const H* out,     \
                          const float* lse, int B, int T, int C, int NH, void* stream) {        \
    backward(dqkv, delta, dout, qkv, out, lse, B, T, NH, NH, head_size(C, NH), stream);         \
  }                                                                                             \
  void attention_backward_gqa(H* dqkv, float* delta, const H* dout, const H* qkv, const H* out, \
                              const float* lse, int B, int T, int NH, int NKV, int D,           \
                              void* stream) {                                                   \
    backward(dqkv, delta, dout, qkv, out, lse, B, T, NH, NKV, D, stream);                       \
  }
LOOM_ATTENTION_ENTRY_POINTS(float)
LOOM_ATTENTION_ENTRY_POINTS(bf16)
LOOM_ATTENTION_ENTRY_POINTS(f16)
#undef LOOM_ATTENTION_ENTRY_POINTS

}  // namespace loom::cuda
