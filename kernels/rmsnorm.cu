// RMSNorm cuda twin: warp-per-row forward and backward; dw by two-stage column sums.
#include <initializer_list>

#include "kernels/col_sums.cuh"
#include "kernels/cuda_common.cuh"
#include "kernels/rmsnorm.h"

namespace loom::cuda {
namespace {

constexpr int kRowsPerBlock = 8;  // one warp per row
constexpr int kRowBlock = 32 * kRowsPerBlock;

// out (row) = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps). One warp per row.
template <int V, typename T>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd, const T* inp, const T* w, int N, int C,
                                       float eps) {
  const int row = blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= N) return;  // the whole warp leaves; no block barriers in this kernel
  const T* x = inp + (size_t)row * C;
  T* o = out + (size_t)row * C;
  float ss = 0.0f;
  for (int c = lane * V; c < C; c += 32 * V) {
    float xv[V];
    load_f<V>(x + c, xv);
#pragma unroll
    for (int k = 0; k < V; k++) ss += xv[k] * xv[k];
  }
  const float r = 1.0f / sqrtf(warp_sum(ss) / (float)C + eps);
  for (int c = lane * V; c < C; c += 32 * V) {
    float xv[V], wv[V];
    load_f<V>(x + c, xv);
    load_f<V>(w + c, wv);
#pragma unroll
    for (int k = 0; k < V; k++) xv[k] = xv[k] * r * wv[k];
    store_f<V>(o + c, xv);
  }
  if (lane == 0 && rstd) rstd[row] = r;
}

// dinp (row) += (w g - nrm * mean(w g nrm)) * rstd, nrm = x * rstd.
template <int V, typename T>
__global__ void rmsnorm_backward_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* w,
                                             const float* rstd, int N, int C) {
  const int row = blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  const size_t off = (size_t)row * C;
  const float r = rstd[row];
  float s = 0.0f;
  for (int c = lane * V; c < C; c += 32 * V) {
    float gv[V], xv[V], wv[V];
    load_f<V>(dout + off + c, gv);
    load_f<V>(inp + off + c, xv);
    load_f<V>(w + c, wv);
#pragma unroll
    for (int k = 0; k < V; k++) s += wv[k] * gv[k] * (xv[k] * r);
  }
  s = warp_sum(s) / (float)C;
  for (int c = lane * V; c < C; c += 32 * V) {
    float gv[V], xv[V], wv[V], dv[V];
    load_f<V>(dout + off + c, gv);
    load_f<V>(inp + off + c, xv);
    load_f<V>(w + c, wv);
    load_f<V>(dinp + off + c, dv);
#pragma unroll
    for (int k = 0; k < V; k++) dv[k] += (wv[k] * gv[k] - (xv[k] * r) * s) * r;
    store_f<V>(dinp + off + c, dv);
  }
}

// The term of dw[c] from row n: g * x * rstd.
template <typename T>
struct DwTerm {
  static constexpr int kSums = 1;
  const T* dout;
  const T* inp;
  const float* rstd;
  int C;
  __device__ void operator()(int n, int c, float* acc) const {
    const size_t i = (size_t)n * C + c;
    acc[0] += to_f32(dout[i]) * (to_f32(inp[i]) * rstd[n]);
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
void forward(H* out, float* rstd, const H* inp, const H* w, int N, int C, float eps, void* stream) {
  using T = dev_t<H>;
  if (N <= 0 || C <= 0) return;
  const unsigned grid = (unsigned)((N + kRowsPerBlock - 1) / kRowsPerBlock);
  cudaStream_t s = as_stream(stream);
  if (rows_vectorizable<T>(C, {out, inp, w})) {
    LOOM_LAUNCH(rmsnorm_forward_kernel<Pack128<T>::kSize>, grid, kRowBlock, 0, s)
    (dev_ptr(out), rstd, dev_ptr(inp), dev_ptr(w), N, C, eps);
  } else {
    LOOM_LAUNCH(rmsnorm_forward_kernel<1>, grid, kRowBlock, 0, s)
    (dev_ptr(out), rstd, dev_ptr(inp), dev_ptr(w), N, C, eps);
  }
  LOOM_CUDA_CHECK_LAUNCH();
}

template <typename H>
void backward(H* dinp, float* dw, const H* dout, const H* inp, const H* w, const float* rstd, int N,
              int C, void* stream, Workspace scratch) {
  using T = dev_t<H>;
  if (N <= 0 || C <= 0) return;
  const unsigned grid = (unsigned)((N + kRowsPerBlock - 1) / kRowsPerBlock);
  cudaStream_t s = as_stream(stream);
  if (rows_vectorizable<T>(C, {dinp, dout, inp, w})) {
    LOOM_LAUNCH(rmsnorm_backward_dinp_kernel<Pack128<T>::kSize>, grid, kRowBlock, 0, s)
    (dev_ptr(dinp), dev_ptr(dout), dev_ptr(inp), dev_ptr(w), rstd, N, C);
  } else {
    LOOM_LAUNCH(rmsnorm_backward_dinp_kernel<1>, grid, kRowBlock, 0, s)
    (dev_ptr(dinp), dev_ptr(dout), dev_ptr(inp), dev_ptr(w), rstd, N, C);
  }
  LOOM_CUDA_CHECK_LAUNCH();
  col_sums(DwTerm<T>{dev_ptr(dout), dev_ptr(inp), rstd, C}, ColOut<1>{{dw}}, N, C, scratch, s);
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int N, int C,
                     float eps, void* stream) {
  forward(out, rstd, inp, w, N, C, eps, stream);
}
void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const bf16* w, int N, int C,
                     float eps, void* stream) {
  forward(out, rstd, inp, w, N, C, eps, stream);
}
void rmsnorm_forward(f16* out, float* rstd, const f16* inp, const f16* w, int N, int C, float eps,
                     void* stream) {
  forward(out, rstd, inp, w, N, C, eps, stream);
}
void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                      const float* rstd, int N, int C, void* stream, Workspace scratch) {
  backward(dinp, dw, dout, inp, w, rstd, N, C, stream, scratch);
}
void rmsnorm_backward(bf16* dinp, float* dw, const bf16* dout, const bf16* inp, const bf16* w,
                      const float* rstd, int N, int C, void* stream, Workspace scratch) {
  backward(dinp, dw, dout, inp, w, rstd, N, C, stream, scratch);
}
void rmsnorm_backward(f16* dinp, float* dw, const f16* dout, const f16* inp, const f16* w,
                      const float* rstd, int N, int C, void* stream, Workspace scratch) {
  backward(dinp, dw, dout, inp, w, rstd, N, C, stream, scratch);
}

}  // namespace loom::cuda
