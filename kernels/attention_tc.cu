// Causal attention on tensor cores (nvcuda::wmma, FlashAttention-2 tiling): bf16/fp16 storage,
// fp32 accumulation and softmax, head size 64 or 128; deterministic (no atomics).
#include <mma.h>

#include <cmath>

#include "kernels/attention.h"
#include "kernels/attention_tc.cuh"

namespace loom::cuda {

bool attention_uses_tensor_cores(int head_size, int storage_bytes) {
  return storage_bytes == 2 && (head_size == 64 || head_size == 128);
}

namespace tc {
namespace {

using namespace nvcuda;

// A block is 4 warps; each warp owns 16 rows (queries, or keys in the dK/dV kernel) of the
// block's 64 and computes its 16 x 16 tiles with wmma fragments. Fragments are opaque: every
// per-row step (causal mask, row max and sum, exp, row scaling) runs on a warp-private fp32
// copy of the tile in shared memory (store_matrix_sync, __syncwarp, lane work, __syncwarp),
// lane 2r and 2r + 1 owning row r.
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kBR = 16 * kWarps;  // rows per block
constexpr int kBB = 32;           // keys (dQ) or queries (dK/dV) per backward tile

template <typename T>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <typename T>
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
template <typename T>
using FragBT = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Head size D: N column blocks of 16; staged tiles have row pitch LD = D + 8 elements (a
// multiple of 8 as wmma requires, and not of 64: fewer bank conflicts). Pitches of a warp's
// 16 x W score tile: W + 4 floats, W + 8 16-bit elements.
template <int D>
struct Geo {
  static constexpr int N = D / 16, LD = D + 8;
  static constexpr int BC = D == 64 ? 64 : 32;  // keys per forward tile (48 KiB static smem)
};

// Rows [r0, r0 + n) of one head (row stride ld elements) into a shared tile of pitch LD, rows
// >= T as zeros, in 128-bit packs. Every thread of the block calls it.
template <int D, int LD, typename T>
__device__ __forceinline__ void stage(T* dst, const T* src, long long ld, int r0, int n, int T_) {
  constexpr int P = D / 8;
  for (int i = threadIdx.x; i < n * P; i += kThreads) {
    const int r = i / P, c = (i % P) * 8, t = r0 + r;
    Pack128<T> v;
    if (t < T_) {
      v = load128(src + (long long)t * ld + c);
    } else {
#pragma unroll
      for (int k = 0; k < 8; k++) v.v[k] = from_f32<T>(0.0f);
    }
    store128(dst + r * LD + c, v);
  }
}

// out (16 x 16 NJ floats, pitch LDS) = A (16 x 16 N, fragments a) M^T, M the first 16 NJ rows
// of a staged tile (pitch LD). Warp-collective.
template <int N, int NJ, int LD, int LDS, typename T>
__device__ __forceinline__ void scores(float* out, const FragA<T> (&a)[N], const T* m) {
#pragma unroll
  for (int j = 0; j < NJ; j++) {
    FragC c;
    wmma::fill_fragment(c, 0.0f);
#pragma unroll
    for (int kk = 0; kk < N; kk++) {
      FragBT<T> mt;
      wmma::load_matrix_sync(mt, m + j * 16 * LD + kk * 16, LD);
      wmma::mma_sync(c, a[kk], mt, c);
    }
    wmma::store_matrix_sync(out + j * 16, c, LDS, wmma::mem_row_major);
  }
}

// acc[n] += P (16 x 16 NJ, pitch LDP) M[:, 16n .. 16n + 15], M the first 16 NJ rows of a staged
// tile (pitch LD). Warp-collective.
template <int N, int NJ, int LDP, int LD, typename T>
__device__ __forceinline__ void accumulate(FragC (&acc)[N], const T* p, const T* m) {
  FragA<T> pf[NJ];
#pragma unroll
  for (int j = 0; j < NJ; j++) wmma::load_matrix_sync(pf[j], p + j * 16, LDP);
#pragma unroll
  for (int n = 0; n < N; n++) {
#pragma unroll
    for (int j = 0; j < NJ; j++) {
      FragB<T> mb;
      wmma::load_matrix_sync(mb, m + j * 16 * LD + n * 16, LD);
      wmma::mma_sync(acc[n], pf[j], mb, acc[n]);
    }
  }
}

// Row r of every acc[n] times `mul` of lanes 2r, 2r + 1, through the warp's scratch (16 x 16
// floats, pitch LDS). Warp-collective.
template <int N, int LDS>
__device__ __forceinline__ void scale_rows(FragC (&acc)[N], float* scratch, float mul) {
  const int lane = threadIdx.x & 31;
  float* row = scratch + (lane >> 1) * LDS + (lane & 1) * 8;
#pragma unroll
  for (int n = 0; n < N; n++) {
    wmma::store_matrix_sync(scratch, acc[n], LDS, wmma::mem_row_major);
    __syncwarp();
#pragma unroll
    for (int k = 0; k < 8; k++) row[k] *= mul;
    __syncwarp();
    wmma::load_matrix_sync(acc[n], scratch, LDS, wmma::mem_row_major);
    __syncwarp();
  }
}

// dst rows [t0, t0 + 16) (row stride ld), columns [0, 16 N) = acc times `mul` of lanes 2r,
// 2r + 1 for row r, rounded to T; rows >= T are not written. Warp-collective.
template <int N, int LDS, typename T>
__device__ __forceinline__ void store_rows(T* dst, long long ld, int t0, int T_,
                                           const FragC (&acc)[N], float* scratch, float mul) {
  const int lane = threadIdx.x & 31, r = lane >> 1, c0 = (lane & 1) * 8;
  const bool in = t0 + r < T_;
#pragma unroll
  for (int n = 0; n < N; n++) {
    wmma::store_matrix_sync(scratch, acc[n], LDS, wmma::mem_row_major);
    __syncwarp();
    if (in) {
      float x[8];
#pragma unroll
      for (int k = 0; k < 8; k++) x[k] = scratch[r * LDS + c0 + k] * mul;
      store_f<8>(dst + (long long)(t0 + r) * ld + n * 16 + c0, x);
    }
    __syncwarp();
  }
}

// out (B, T, NH*D) and lse (B, NH, T). Block: (query tile of 64 rows, b*NH + h), last tile first.
template <int D, typename T>
__global__ void __launch_bounds__(kThreads)
    tc_attention_forward_kernel(T* out, float* lse, const T* qkv, AttnLayout g) {
  using G = Geo<D>;
  constexpr int N = G::N, LD = G::LD, BC = G::BC, LDS = BC + 4, LDP = BC + 8;
  constexpr int kKV = 2 * BC * LD * 2, kS = kWarps * 16 * LDS * 4, kP = kWarps * 16 * LDP * 2;
  static_assert(kBR * LD * 2 <= kKV, "the Q tile is staged where K and V go");
  __shared__ __align__(128) unsigned char smem[kKV + kS + kP];
  T* sK = reinterpret_cast<T*>(smem);  // (BC, LD); the Q tile (64, LD) before the loop
  T* sV = sK + BC * LD;                // (BC, LD)
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
  float* sS = reinterpret_cast<float*>(smem + kKV) + warp * 16 * LDS;  // (16, LDS) of the warp
  T* sP = reinterpret_cast<T*>(smem + kKV + kS) + warp * 16 * LDP;     // (16, LDP) of the warp
  const int bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH, kvh = h / (g.NH / g.NKV);
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kBR, w0 = q0 + 16 * warp, t = w0 + r;
  const float scale = 1.0f / sqrtf((float)D);
  const T* base = qkv + (size_t)b * g.T * g.qkv_row;
  stage<D, LD>(sK, base + h * D, g.qkv_row, q0, kBR, g.T);
  __syncthreads();
  FragA<T> qf[N];
  FragC of[N];
#pragma unroll
  for (int n = 0; n < N; n++) {
    wmma::load_matrix_sync(qf[n], sK + 16 * warp * LD + 16 * n, LD);
    wmma::fill_fragment(of[n], 0.0f);
  }
  float m = -INFINITY, l = 0.0f;  // running max and sum of row t (lanes 2r and 2r + 1)
  const bool active = w0 < g.T;   // warp-uniform: the warp has a row < T
  const int kend = min(g.T, q0 + kBR);
  for (int k0 = 0; k0 < kend; k0 += BC) {  // key tiles after the block's last row: never loaded
    __syncthreads();                       // Q fragments, the previous tile: read
    stage<D, LD>(sK, base + g.k_col + kvh * D, g.qkv_row, k0, BC, g.T);
    stage<D, LD>(sV, base + g.v_col + kvh * D, g.qkv_row, k0, BC, g.T);
    __syncthreads();
    if (!active || k0 > w0 + 15) continue;  // every key after every row of the warp: skipped
    scores<N, BC / 16, LD, LDS>(sS, qf, sK);
    __syncwarp();
    const int c0 = half * (BC / 2);
    float mt = -INFINITY;
    for (int c = c0; c < c0 + BC / 2; c++) {
      const int s = k0 + c;
      if (s <= t && s < g.T) mt = fmaxf(mt, sS[r * LDS + c] * scale);
    }
    mt = fmaxf(mt, __shfl_xor_sync(kFullMask, mt, 1));
    const float mnew = fmaxf(m, mt);  // finite: key 0 is visible to every row
    const float corr = m == -INFINITY ? 1.0f : expf(m - mnew);  // O and l are 0 before key 0
    float sum = 0.0f;
    for (int c = c0; c < c0 + BC / 2; c++) {
      const int s = k0 + c;
      const float p = s <= t && s < g.T ? expf(sS[r * LDS + c] * scale - mnew) : 0.0f;
      sP[r * LDP + c] = from_f32<T>(p);  // rounded for the tensor cores; l and lse stay fp32
      sum += p;
    }
    sum += __shfl_xor_sync(kFullMask, sum, 1);
    l = l * corr + sum;
    m = mnew;
    __syncwarp();  // sS read, sP written: the scratch and P go to other lanes next
    if (__any_sync(kFullMask, corr != 1.0f)) scale_rows<N, LDS>(of, sS, corr);
    accumulate<N, BC / 16, LDP, LD>(of, sP, sV);
  }
  if (!active) return;
  store_rows<N, LDS>(out + (size_t)b * g.T * g.o_row + h * D, g.o_row, w0, g.T, of, sS, 1.0f / l);
  if (half == 0 && t < g.T) lse[(size_t)bh * g.T + t] = m + logf(l);
}

// dQ of a query tile: dq_t = scale sum_s dS_ts k_s, dS = P (dP - delta), P = exp(S - lse),
// dP = dO V^T. Block: (query tile of 64 rows, b*NH + h), last tile first.
template <int D, typename T>
__global__ void __launch_bounds__(kThreads)
    tc_attention_dq_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                           const float* delta, AttnLayout g) {
  using G = Geo<D>;
  constexpr int N = G::N, LD = G::LD, BC = kBB, LDS = BC + 4, LDP = BC + 8;
  constexpr int kKV = 2 * BC * LD * 2, kS = kWarps * 16 * LDS * 4, kP = kWarps * 16 * LDP * 2;
  static_assert(2 * kBR * LD * 2 <= kKV + 2 * kS, "Q and dO are staged where K, V, S, dP go");
  __shared__ __align__(128) unsigned char smem[kKV + 2 * kS + kP];
  T* sK = reinterpret_cast<T*>(smem);  // (BC, LD); Q and dO tiles (64, LD) before the loop
  T* sV = sK + BC * LD;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
  float* sS = reinterpret_cast<float*>(smem + kKV) + warp * 16 * LDS;
  float* sdP = reinterpret_cast<float*>(smem + kKV + kS) + warp * 16 * LDS;
  T* sdS = reinterpret_cast<T*>(smem + kKV + 2 * kS) + warp * 16 * LDP;
  const int bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH, kvh = h / (g.NH / g.NKV);
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kBR, w0 = q0 + 16 * warp, t = w0 + r;
  const float scale = 1.0f / sqrtf((float)D);
  const T* base = qkv + (size_t)b * g.T * g.qkv_row;
  stage<D, LD>(sK, base + h * D, g.qkv_row, q0, kBR, g.T);
  stage<D, LD>(sK + kBR * LD, dout + (size_t)b * g.T * g.o_row + h * D, g.o_row, q0, kBR, g.T);
  __syncthreads();
  FragA<T> qf[N], df[N];
  FragC dq[N];
#pragma unroll
  for (int n = 0; n < N; n++) {
    wmma::load_matrix_sync(qf[n], sK + 16 * warp * LD + 16 * n, LD);
    wmma::load_matrix_sync(df[n], sK + (kBR + 16 * warp) * LD + 16 * n, LD);
    wmma::fill_fragment(dq[n], 0.0f);
  }
  const float lse_t = t < g.T ? lse[(size_t)bh * g.T + t] : 0.0f;
  const float delta_t = t < g.T ? delta[(size_t)bh * g.T + t] : 0.0f;
  const bool active = w0 < g.T;
  const int kend = min(g.T, q0 + kBR);
  for (int k0 = 0; k0 < kend; k0 += BC) {
    __syncthreads();
    stage<D, LD>(sK, base + g.k_col + kvh * D, g.qkv_row, k0, BC, g.T);
    stage<D, LD>(sV, base + g.v_col + kvh * D, g.qkv_row, k0, BC, g.T);
    __syncthreads();
    if (!active || k0 > w0 + 15) continue;
    scores<N, BC / 16, LD, LDS>(sS, qf, sK);
    scores<N, BC / 16, LD, LDS>(sdP, df, sV);
    __syncwarp();
    for (int c = half * (BC / 2); c < (half + 1) * (BC / 2); c++) {
      const int s = k0 + c;
      const float p = s <= t && s < g.T ? expf(sS[r * LDS + c] * scale - lse_t) : 0.0f;
      sdS[r * LDP + c] = from_f32<T>(p * (sdP[r * LDS + c] - delta_t));
    }
    __syncwarp();
    accumulate<N, BC / 16, LDP, LD>(dq, sdS, sK);
  }
  if (!active) return;
  store_rows<N, LDS>(dqkv + (size_t)b * g.T * g.qkv_row + h * D, g.qkv_row, w0, g.T, dq, sS, scale);
}

// dK, dV of a key tile: dv_s = sum_{t>=s} P_ts do_t, dk_s = scale sum_{t>=s} dS_ts q_t, summed
// over the query heads that read kv head kvh in a fixed order. Block: (key tile of 64 rows,
// b*NKV + kvh); each warp computes S^T = K Q^T and dP^T = V dO^T for its 16 keys.
template <int D, typename T>
__global__ void __launch_bounds__(kThreads)
    tc_attention_dkv_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                            const float* delta, AttnLayout g) {
  using G = Geo<D>;
  constexpr int N = G::N, LD = G::LD, BQ = kBB, LDS = BQ + 4, LDP = BQ + 8;
  constexpr int kQ = 2 * BQ * LD * 2, kS = kWarps * 16 * LDS * 4, kP = kWarps * 16 * LDP * 2;
  constexpr int kAll = kQ + 2 * kS + 2 * kP + 2 * BQ * 4;
  static_assert(2 * kBR * LD * 2 <= kAll, "K and V are staged in the loop's buffers");
  __shared__ __align__(128) unsigned char smem[kAll];
  T* sQ = reinterpret_cast<T*>(smem);  // (BQ, LD); K and V tiles (64, LD) before the loop
  T* sdO = sQ + BQ * LD;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
  float* sS = reinterpret_cast<float*>(smem + kQ) + warp * 16 * LDS;
  float* sdP = reinterpret_cast<float*>(smem + kQ + kS) + warp * 16 * LDS;
  T* sPt = reinterpret_cast<T*>(smem + kQ + 2 * kS) + warp * 16 * LDP;
  T* sdSt = reinterpret_cast<T*>(smem + kQ + 2 * kS + kP) + warp * 16 * LDP;
  float* slse = reinterpret_cast<float*>(smem + kQ + 2 * kS + 2 * kP);
  float* sdelta = slse + BQ;
  const int bk = blockIdx.y, b = bk / g.NKV, kvh = bk % g.NKV, group = g.NH / g.NKV;
  const int k0 = blockIdx.x * kBR, w0 = k0 + 16 * warp, s = w0 + r;
  const float scale = 1.0f / sqrtf((float)D);
  const T* base = qkv + (size_t)b * g.T * g.qkv_row;
  stage<D, LD>(sQ, base + g.k_col + kvh * D, g.qkv_row, k0, kBR, g.T);
  stage<D, LD>(sQ + kBR * LD, base + g.v_col + kvh * D, g.qkv_row, k0, kBR, g.T);
  __syncthreads();
  FragA<T> kf[N], vf[N];
  FragC dk[N], dv[N];
#pragma unroll
  for (int n = 0; n < N; n++) {
    wmma::load_matrix_sync(kf[n], sQ + 16 * warp * LD + 16 * n, LD);
    wmma::load_matrix_sync(vf[n], sQ + (kBR + 16 * warp) * LD + 16 * n, LD);
    wmma::fill_fragment(dk[n], 0.0f);
    wmma::fill_fragment(dv[n], 0.0f);
  }
  const bool active = w0 < g.T;
  for (int h = kvh * group; h < (kvh + 1) * group; h++) {
    const size_t row0 = ((size_t)b * g.NH + h) * g.T;    // (b, h) rows of lse and delta
    for (int q0 = (k0 / BQ) * BQ; q0 < g.T; q0 += BQ) {  // queries before the block's keys: none
      __syncthreads();
      stage<D, LD>(sQ, base + h * D, g.qkv_row, q0, BQ, g.T);
      stage<D, LD>(sdO, dout + (size_t)b * g.T * g.o_row + h * D, g.o_row, q0, BQ, g.T);
      if (threadIdx.x < BQ) {
        const int tq = q0 + threadIdx.x;
        slse[threadIdx.x] = tq < g.T ? lse[row0 + tq] : 0.0f;
        sdelta[threadIdx.x] = tq < g.T ? delta[row0 + tq] : 0.0f;
      }
      __syncthreads();
      if (!active || q0 + BQ - 1 < w0) continue;  // every query before every key of the warp
      scores<N, BQ / 16, LD, LDS>(sS, kf, sQ);
      scores<N, BQ / 16, LD, LDS>(sdP, vf, sdO);
      __syncwarp();
      for (int c = half * (BQ / 2); c < (half + 1) * (BQ / 2); c++) {
        const int tq = q0 + c;
        const float p = tq >= s && tq < g.T ? expf(sS[r * LDS + c] * scale - slse[c]) : 0.0f;
        sPt[r * LDP + c] = from_f32<T>(p);
        sdSt[r * LDP + c] = from_f32<T>(p * (sdP[r * LDS + c] - sdelta[c]));
      }
      __syncwarp();
      accumulate<N, BQ / 16, LDP, LD>(dv, sPt, sdO);
      accumulate<N, BQ / 16, LDP, LD>(dk, sdSt, sQ);
    }
  }
  if (!active) return;
  T* rows = dqkv + (size_t)b * g.T * g.qkv_row + kvh * D;
  store_rows<N, LDS>(rows + g.k_col, g.qkv_row, w0, g.T, dk, sS, scale);
  store_rows<N, LDS>(rows + g.v_col, g.qkv_row, w0, g.T, dv, sS, 1.0f);
}

template <int D, typename T>
void launch_forward(T* out, float* lse, const T* qkv, const AttnLayout& g, cudaStream_t s) {
  const dim3 grid((unsigned)((g.T + kBR - 1) / kBR), (unsigned)(g.B * g.NH));
  LOOM_LAUNCH(tc_attention_forward_kernel<D>, grid, kThreads, 0, s)(out, lse, qkv, g);
  LOOM_CUDA_CHECK_LAUNCH();
}

template <int D, typename T>
void launch_backward(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* delta,
                     const AttnLayout& g, cudaStream_t s) {
  const unsigned tiles = (unsigned)((g.T + kBR - 1) / kBR);
  LOOM_LAUNCH(tc_attention_dq_kernel<D>, dim3(tiles, (unsigned)(g.B * g.NH)), kThreads, 0, s)
  (dqkv, dout, qkv, lse, delta, g);
  LOOM_CUDA_CHECK_LAUNCH();
  LOOM_LAUNCH(tc_attention_dkv_kernel<D>, dim3(tiles, (unsigned)(g.B * g.NKV)), kThreads, 0, s)
  (dqkv, dout, qkv, lse, delta, g);
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool takes(int D, const void* a, const void* b, const void* c, const void* d) {
  return (D == 64 || D == 128) && aligned16(a) && aligned16(b) && aligned16(c) && aligned16(d);
}

template <typename T>
void forward(T* out, float* lse, const T* qkv, const AttnLayout& g, cudaStream_t s) {
  LOOM_CUDA_REQUIRE(g.NKV > 0 && g.NH % g.NKV == 0, "attention: NKV must divide NH");
  if (g.D == 64)
    launch_forward<64>(out, lse, qkv, g, s);
  else
    launch_forward<128>(out, lse, qkv, g, s);
}

template <typename T>
void backward(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* delta,
              const AttnLayout& g, cudaStream_t s) {
  LOOM_CUDA_REQUIRE(g.NKV > 0 && g.NH % g.NKV == 0, "attention: NKV must divide NH");
  if (g.D == 64)
    launch_backward<64>(dqkv, dout, qkv, lse, delta, g, s);
  else
    launch_backward<128>(dqkv, dout, qkv, lse, delta, g, s);
}

template void forward(__nv_bfloat16*, float*, const __nv_bfloat16*, const AttnLayout&,
                      cudaStream_t);
template void forward(__half*, float*, const __half*, const AttnLayout&, cudaStream_t);
template void backward(__nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, const float*,
                       const float*, const AttnLayout&, cudaStream_t);
template void backward(__half*, const __half*, const __half*, const float*, const float*,
                       const AttnLayout&, cudaStream_t);

}  // namespace tc
}  // namespace loom::cuda
