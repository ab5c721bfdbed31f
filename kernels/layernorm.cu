// LayerNorm cuda twin: warp-per-row forward and backward; dw/db by two-stage column sums.
#include <initializer_list>

#include "kernels/col_sums.cuh"
#include "kernels/cuda_common.cuh"
#include "kernels/layernorm.h"

namespace loom::cuda {
namespace {

constexpr int kRowsPerBlock = 8;  // one warp per row
constexpr int kRowBlock = 32 * kRowsPerBlock;

// out = (x - mean) * rstd * w + b for the row at x. Two-pass variance as the cpu twin. Called by
// a whole warp.
template <int V, typename T>
__device__ __forceinline__ void normalize_row(T* o, const T* x, const T* w, const T* b, int C,
                                              int lane, float* mean_out, float* rstd_out) {
  const float invC = 1.0f / (float)C;
  float s = 0.0f;
  for (int c = lane * V; c < C; c += 32 * V) {
    float xv[V];
    load_f<V>(x + c, xv);
#pragma unroll
    for (int k = 0; k < V; k++) s += xv[k];
  }
  const float m = warp_sum(s) * invC;
  float var = 0.0f;
  for (int c = lane * V; c < C; c += 32 * V) {
    float xv[V];
    load_f<V>(x + c, xv);
#pragma unroll
    for (int k = 0; k < V; k++) {
      const float d = xv[k] - m;
      var += d * d;
    }
  }
  const float r = 1.0f / sqrtf(warp_sum(var) * invC + cpu::kLayerNormEps);
  for (int c = lane * V; c < C; c += 32 * V) {
    float xv[V], wv[V], bv[V];
    load_f<V>(x + c, xv);
    load_f<V>(w + c, wv);
    load_f<V>(b + c, bv);
#pragma unroll
    for (int k = 0; k < V; k++) xv[k] = (xv[k] - m) * r * wv[k] + bv[k];
    store_f<V>(o + c, xv);
  }
  if (lane == 0) {
    if (mean_out) *mean_out = m;
    if (rstd_out) *rstd_out = r;
  }
}

template <int V, typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const T* w,
                                         const T* b, int N, int C) {
  const int row = blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= N) return;  // the whole warp leaves; no block barriers in this kernel
  const size_t off = (size_t)row * C;
  normalize_row<V>(out + off, inp + off, w, b, C, lane, mean ? mean + row : nullptr,
                   rstd ? rstd + row : nullptr);
}

// dinp (row) += (w g - mean(w g) - nrm mean(w g nrm)) * rstd, nrm = (x - mean) * rstd.
template <int V, typename T>
__global__ void layernorm_backward_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* w,
                                               const float* mean, const float* rstd, int N, int C) {
  const int row = blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  const size_t off = (size_t)row * C;
  const float m = mean[row], r = rstd[row], invC = 1.0f / (float)C;
  float s1 = 0.0f, s2 = 0.0f;
  for (int c = lane * V; c < C; c += 32 * V) {
    float gv[V], xv[V], wv[V];
    load_f<V>(dout + off + c, gv);
    load_f<V>(inp + off + c, xv);
    load_f<V>(w + c, wv);
#pragma unroll
    for (int k = 0; k < V; k++) {
      const float dn = wv[k] * gv[k];
      s1 += dn;
      s2 += dn * ((xv[k] - m) * r);
    }
  }
  s1 = warp_sum(s1) * invC;
  s2 = warp_sum(s2) * invC;
  for (int c = lane * V; c < C; c += 32 * V) {
    float gv[V], xv[V], wv[V], dv[V];
    load_f<V>(dout + off + c, gv);
    load_f<V>(inp + off + c, xv);
    load_f<V>(w + c, wv);
    load_f<V>(dinp + off + c, dv);
#pragma unroll
    for (int k = 0; k < V; k++) {
      const float nrm = (xv[k] - m) * r;
      dv[k] += (wv[k] * gv[k] - s1 - nrm * s2) * r;
    }
    store_f<V>(dinp + off + c, dv);
  }
}

// The terms of dw[c] and db[c] from row n: g nrm and g, nrm = (x - mean) * rstd.
template <typename T>
struct DwDbTerms {
  static constexpr int kSums = 2;
  const T* dout;
  const T* inp;
  const float* mean;
  const float* rstd;
  int C;
  __device__ void operator()(int n, int c, float* acc) const {
    const size_t i = (size_t)n * C + c;
    const float g = to_f32(dout[i]);
    acc[0] += g * ((to_f32(inp[i]) - mean[n]) * rstd[n]);
    acc[1] += g;
  }
};

template <typename T>
bool rows_vectorizable(int C, std::initializer_list<const void*> ptrs) {
  if (C % Pack128<T>::kSize != 0) return false;
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
}

template <typename H>
void forward(H* out, float* mean, float* rstd, const H* inp, const H* w, const H* b, int N, int C,
             void* stream) {
  using T = dev_t<H>;
  if (N <= 0 || C <= 0) return;
  const unsigned grid = (unsigned)((N + kRowsPerBlock - 1) / kRowsPerBlock);
  cudaStream_t s = as_stream(stream);
  if (rows_vectorizable<T>(C, {out, inp, w, b})) {
    LOOM_LAUNCH(layernorm_forward_kernel<Pack128<T>::kSize>, grid, kRowBlock, 0, s)
    (dev_ptr(out), mean, rstd, dev_ptr(inp), dev_ptr(w), dev_ptr(b), N, C);
  } else {
    LOOM_LAUNCH(layernorm_forward_kernel<1>, grid, kRowBlock, 0, s)
    (dev_ptr(out), mean, rstd, dev_ptr(inp), dev_ptr(w), dev_ptr(b), N, C);
  }
  LOOM_CUDA_CHECK_LAUNCH();
}

template <typename H>
void backward(H* dinp, float* dw, float* db, const H* dout, const H* inp, const H* w,
              const float* mean, const float* rstd, int N, int C, void* stream, Workspace scratch) {
  using T = dev_t<H>;
  if (N <= 0 || C <= 0) return;
  const unsigned grid = (unsigned)((N + kRowsPerBlock - 1) / kRowsPerBlock);
  cudaStream_t s = as_stream(stream);
  if (rows_vectorizable<T>(C, {dinp, dout, inp, w})) {
    LOOM_LAUNCH(layernorm_backward_dinp_kernel<Pack128<T>::kSize>, grid, kRowBlock, 0, s)
    (dev_ptr(dinp), dev_ptr(dout), dev_ptr(inp), dev_ptr(w), mean, rstd, N, C);
  } else {
    LOOM_LAUNCH(layernorm_backward_dinp_kernel<1>, grid, kRowBlock, 0, s)
    (dev_ptr(dinp), dev_ptr(dout), dev_ptr(inp), dev_ptr(w), mean, rstd, N, C);
  }
  LOOM_CUDA_CHECK_LAUNCH();
  col_sums(DwDbTerms<T>{dev_ptr(dout), dev_ptr(inp), mean, rstd, C}, ColOut<2>{{dw, db}}, N, C,
           scratch, s);
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int N, int C, void* stream) {
  forward(out, mean, rstd, inp, w, b, N, C, stream);
}
void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w,
                       const bf16* b, int N, int C, void* stream) {
  forward(out, mean, rstd, inp, w, b, N, C, stream);
}
void layernorm_forward(f16* out, float* mean, float* rstd, const f16* inp, const f16* w,
                       const f16* b, int N, int C, void* stream) {
  forward(out, mean, rstd, inp, w, b, N, C, stream);
}
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int N, int C,
                        void* stream, Workspace scratch) {
  backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, stream, scratch);
}
void layernorm_backward(bf16* dinp, float* dw, float* db, const bf16* dout, const bf16* inp,
                        const bf16* w, const float* mean, const float* rstd, int N, int C,
                        void* stream, Workspace scratch) {
  backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, stream, scratch);
}
void layernorm_backward(f16* dinp, float* dw, float* db, const f16* dout, const f16* inp,
                        const f16* w, const float* mean, const float* rstd, int N, int C,
                        void* stream, Workspace scratch) {
  backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, stream, scratch);
}

}  // namespace loom::cuda
