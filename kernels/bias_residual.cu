// Bias + residual epilogue, cuda twin: grid-stride over 128-bit packs (or scalars), fp32, bf16 or
// fp16.
#include "kernels/bias_residual.h"
#include "kernels/cuda_common.cuh"

namespace loom::cuda {
namespace {

constexpr int kBlock = 256;

// Packs of V elements (V = 1, or one 128-bit pack with C % V == 0 so a pack never crosses a row
// and its bias pack starts at a multiple of V). out may alias resid or partial: each thread reads
// its pack before writing it.
template <int V, typename T>
__global__ void bias_residual_kernel(T* out, const T* resid, const T* partial, const T* bias,
                                     size_t npacks, int C) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x; q < npacks; q += stride) {
    const size_t i = q * V;
    const int c = (int)(i % (size_t)C);
    float r[V], p[V], b[V];
    load_f<V>(resid + i, r);
    load_f<V>(partial + i, p);
    if (bias) {
      load_f<V>(bias + c, b);
    } else {
#pragma unroll
      for (int k = 0; k < V; k++) b[k] = 0.0f;  // p + 0 == p: the no-bias sum, same order
    }
#pragma unroll
    for (int k = 0; k < V; k++) r[k] = r[k] + (p[k] + b[k]);  // the cpu twin's order
    store_f<V>(out + i, r);
  }
}

template <typename H>
void launch(H* out, const H* resid, const H* partial, const H* bias, int N, int C, void* stream) {
  using T = dev_t<H>;
  if (N <= 0 || C <= 0) return;
  constexpr int kV = Pack128<T>::kSize;
  const size_t n = (size_t)N * C;
  const bool vec = C % kV == 0 && aligned16(out) && aligned16(resid) && aligned16(partial) &&
                   (bias == nullptr || aligned16(bias));
  cudaStream_t s = as_stream(stream);
  if (vec) {
    LOOM_LAUNCH(bias_residual_kernel<kV>, grid_for(n / kV, kBlock), kBlock, 0, s)
    (dev_ptr(out), dev_ptr(resid), dev_ptr(partial), dev_ptr(bias), n / kV, C);
  } else {
    LOOM_LAUNCH(bias_residual_kernel<1>, grid_for(n, kBlock), kBlock, 0, s)
    (dev_ptr(out), dev_ptr(resid), dev_ptr(partial), dev_ptr(bias), n, C);
  }
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void bias_residual(float* out, const float* resid, const float* partial, const float* bias, int N,
                   int C, void* stream) {
  launch(out, resid, partial, bias, N, C, stream);
}
void bias_residual(bf16* out, const bf16* resid, const bf16* partial, const bf16* bias, int N,
                   int C, void* stream) {
  launch(out, resid, partial, bias, N, C, stream);
}
void bias_residual(f16* out, const f16* resid, const f16* partial, const f16* bias, int N, int C,
                   void* stream) {
  launch(out, resid, partial, bias, N, C, stream);
}

}  // namespace loom::cuda
