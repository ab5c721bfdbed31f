// SwiGLU cuda twin: elementwise over the [gate | up] halves of each row, fp32/bf16/fp16 storage.
#include "kernels/cuda_common.cuh"
#include "kernels/swiglu.h"

namespace loom::cuda {
namespace {

constexpr int kBlock = 256;

// sigmoid(g) with the exponent clamped to [-80, 80] as the cpu twin's exp_clamped.
__device__ __forceinline__ float sigmoid(float g) {
  return 1.0f / (1.0f + expf(fminf(fmaxf(-g, -80.0f), 80.0f)));
}

// Packs of V columns (F % V == 0 when V > 1); grid-stride over the N * F / V packs.
template <int V, typename T>
__global__ void swiglu_forward_kernel(T* out, const T* gu, int N, int F) {
  const size_t npacks = (size_t)N * F / V, stride = (size_t)gridDim.x * blockDim.x;
  for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < npacks; p += stride) {
    const size_t i = p * V, n = i / F, f = i % F;
    const T* g = gu + n * 2 * F + f;
    float gv[V], uv[V];
    load_f<V>(g, gv);
    load_f<V>(g + F, uv);
#pragma unroll
    for (int k = 0; k < V; k++) gv[k] = gv[k] * sigmoid(gv[k]) * uv[k];
    store_f<V>(out + i, gv);
  }
}

template <int V, typename T>
__global__ void swiglu_backward_kernel(T* dgu, const T* dout, const T* gu, int N, int F) {
  const size_t npacks = (size_t)N * F / V, stride = (size_t)gridDim.x * blockDim.x;
  for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < npacks; p += stride) {
    const size_t i = p * V, n = i / F, f = i % F;
    const size_t j = n * 2 * F + f;  // gate column f of row n; up is at j + F
    float gv[V], uv[V], dv[V], dg[V], du[V];
    load_f<V>(gu + j, gv);
    load_f<V>(gu + j + F, uv);
    load_f<V>(dout + i, dv);
#pragma unroll
    for (int k = 0; k < V; k++) {
      const float s = sigmoid(gv[k]);
      dg[k] = dv[k] * uv[k] * (s * (1.0f + gv[k] * (1.0f - s)));
      du[k] = dv[k] * (gv[k] * s);
    }
    store_f<V>(dgu + j, dg);
    store_f<V>(dgu + j + F, du);
  }
}

template <typename T>
bool vectorizable(int F, const void* a, const void* b, const void* c) {
  return F % Pack128<T>::kSize == 0 && aligned16(a) && aligned16(b) && (!c || aligned16(c));
}

template <typename H>
void forward(H* out, const H* gu, int N, int F, void* stream) {
  using T = dev_t<H>;
  if (N <= 0 || F <= 0) return;
  constexpr int kV = Pack128<T>::kSize;
  const size_t n = (size_t)N * F;
  cudaStream_t s = as_stream(stream);
  if (vectorizable<T>(F, out, gu, nullptr)) {
    LOOM_LAUNCH(swiglu_forward_kernel<kV>, grid_for(n / kV, kBlock), kBlock, 0, s)
    (dev_ptr(out), dev_ptr(gu), N, F);
  } else {
    LOOM_LAUNCH(swiglu_forward_kernel<1>, grid_for(n, kBlock), kBlock, 0, s)
    (dev_ptr(out), dev_ptr(gu), N, F);
  }
  LOOM_CUDA_CHECK_LAUNCH();
}

template <typename H>
void backward(H* dgu, const H* dout, const H* gu, int N, int F, void* stream) {
  using T = dev_t<H>;
  if (N <= 0 || F <= 0) return;
  constexpr int kV = Pack128<T>::kSize;
  const size_t n = (size_t)N * F;
  cudaStream_t s = as_stream(stream);
  if (vectorizable<T>(F, dgu, dout, gu)) {
    LOOM_LAUNCH(swiglu_backward_kernel<kV>, grid_for(n / kV, kBlock), kBlock, 0, s)
    (dev_ptr(dgu), dev_ptr(dout), dev_ptr(gu), N, F);
  } else {
    LOOM_LAUNCH(swiglu_backward_kernel<1>, grid_for(n, kBlock), kBlock, 0, s)
    (dev_ptr(dgu), dev_ptr(dout), dev_ptr(gu), N, F);
  }
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void swiglu_forward(float* out, const float* gu, int N, int F, void* stream) {
  forward(out, gu, N, F, stream);
}
void swiglu_forward(bf16* out, const bf16* gu, int N, int F, void* stream) {
  forward(out, gu, N, F, stream);
}
void swiglu_forward(f16* out, const f16* gu, int N, int F, void* stream) {
  forward(out, gu, N, F, stream);
}
void swiglu_backward(float* dgu, const float* dout, const float* gu, int N, int F, void* stream) {
  backward(dgu, dout, gu, N, F, stream);
}
void swiglu_backward(bf16* dgu, const bf16* dout, const bf16* gu, int N, int F, void* stream) {
  backward(dgu, dout, gu, N, F, stream);
}
void swiglu_backward(f16* dgu, const f16* dout, const f16* gu, int N, int F, void* stream) {
  backward(dgu, dout, gu, N, F, stream);
}

}  // namespace loom::cuda
