// Device-side CUDA helpers: reductions, bf16/fp16 and 128-bit packs (error checks: cuda_check.h).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cuda_check.h"
#include "kernels/cuda_device.h"

// kernel<<<grid, block, smem, stream>>>(args) is written LOOM_LAUNCH(kernel, grid, block, smem,
// stream)(args): the same launch under nvcc; under the CPU emulation build (LOOM_CUDA=EMULATE,
// compiled by the host compiler, which has no <<<>>>) it runs the grid on the host.
// LOOM_DYNAMIC_SHARED(T, name) declares the block's dynamic shared memory (extern __shared__).
#ifdef LOOM_CUDA_EMULATE
#define LOOM_LAUNCH(kernel, grid, block, smem, stream) \
  LOOM_EMU_LAUNCH(kernel, grid, block, smem, stream)
#define LOOM_DYNAMIC_SHARED(T, name) \
  T* const name = static_cast<T*>(::loom_emu::detail::dynamic_shared())
#else
#define LOOM_LAUNCH(kernel, grid, block, smem, stream) kernel<<<grid, block, smem, stream>>>
#define LOOM_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif

namespace loom::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Blocks for a grid-stride loop over `work` items: enough to fill any GPU, capped so that the
// grid size never depends on the device (results stay the same everywhere).
inline unsigned grid_for(size_t work, int block) {
  const size_t g = (work + (size_t)block - 1) / (size_t)block;
  return (unsigned)(g < 65536 ? (g == 0 ? 1 : g) : 65536);
}

// ---- bf16, fp16 <-> fp32 ------------------------------------------------------------
// Device-side element type of a host-side storage type (bf16 -> __nv_bfloat16, f16 -> __half).
template <typename T>
struct DevType {
  using type = T;
};
template <>
struct DevType<bf16> {
  using type = __nv_bfloat16;
};
template <>
struct DevType<f16> {
  using type = __half;
};
static_assert(sizeof(__half) == sizeof(f16), "f16 must be bit-compatible with __half");
template <typename T>
using dev_t = typename DevType<T>::type;

template <typename T>
inline dev_t<T>* dev_ptr(T* p) {
  return reinterpret_cast<dev_t<T>*>(p);
}
template <typename T>
inline const dev_t<T>* dev_ptr(const T* p) {
  return reinterpret_cast<const dev_t<T>*>(p);
}

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
// fp16: magnitudes >= 65520 become +-inf (no saturation), so an overflow reaches the loss
// scaler's non-finite check instead of being hidden.
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) {
  return __float2half_rn(x);
}

// ---- 128-bit packs --------------------------------------------------------------------
template <typename T>
struct alignas(16) Pack128 {
  static constexpr int kSize = 16 / (int)sizeof(T);
  T v[kSize];
};

// One 128-bit access (p 16-byte aligned); the pack's bytes move through memcpy, not through an
// int4 lvalue on the pack (that breaks C++'s aliasing rules: g++ -O2 then drops the store).
template <typename T>
__device__ __forceinline__ Pack128<T> load128(const T* p) {
  const int4 bits = *reinterpret_cast<const int4*>(p);
  Pack128<T> r;
  memcpy(&r, &bits, sizeof(r));
  return r;
}

template <typename T>
__device__ __forceinline__ void store128(T* p, const Pack128<T>& v) {
  int4 bits;
  memcpy(&bits, &v, sizeof(bits));
  *reinterpret_cast<int4*>(p) = bits;
}

// V contiguous elements as floats: V == 1 (scalar) or V == Pack128<T>::kSize (one 128-bit access).
template <int V, typename T>
__device__ __forceinline__ void load_f(const T* p, float (&x)[V]) {
  if constexpr (V == 1) {
    x[0] = to_f32(p[0]);
  } else {
    static_assert(V * sizeof(T) == 16, "V must fill 128 bits");
    const Pack128<T> pk = load128(p);
#pragma unroll
    for (int k = 0; k < V; k++) x[k] = to_f32(pk.v[k]);
  }
}

template <int V, typename T>
__device__ __forceinline__ void store_f(T* p, const float (&x)[V]) {
  if constexpr (V == 1) {
    p[0] = from_f32<T>(x[0]);
  } else {
    static_assert(V * sizeof(T) == 16, "V must fill 128 bits");
    Pack128<T> pk;
#pragma unroll
    for (int k = 0; k < V; k++) pk.v[k] = from_f32<T>(x[k]);
    store128(p, pk);
  }
}

// ---- reductions -----------------------------------------------------------------------
// Every lane of a full warp must call these; all lanes get the result (butterfly, fixed order).
template <typename F>
__device__ __forceinline__ F warp_sum(F v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Block-wide reductions: blockDim.x a multiple of 32 (<= 1024), 1-D blocks, every thread of the
// block must call them (they contain __syncthreads); every thread gets the result. The leading
// barrier makes back-to-back calls safe. Deterministic: a fixed tree for a given blockDim.
template <typename F>
__device__ __forceinline__ F block_sum(F v) {
  __shared__ F partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < nwarps ? partial[lane] : F(0);
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < nwarps ? partial[lane] : -INFINITY;
  return warp_max(v);
}

// ---- elementwise map ------------------------------------------------------------------
// out[i] = op(a[i], b ? b[i] : 0) for i < n, in packs of V elements (V = 1, or a 128-bit pack
// with n % V == 0 and every pointer 16-byte aligned). out may alias a or b (each thread reads
// its pack before writing it). Grid-stride over the packs.
template <int V, typename T, typename Op>
__global__ void map2_kernel(T* out, const T* a, const T* b, size_t npacks, Op op) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < npacks; p += stride) {
    float x[V], y[V];
    load_f<V>(a + p * V, x);
    if (b) {
      load_f<V>(b + p * V, y);
    } else {
#pragma unroll
      for (int k = 0; k < V; k++) y[k] = 0.0f;
    }
#pragma unroll
    for (int k = 0; k < V; k++) x[k] = op(x[k], y[k]);
    store_f<V>(out + p * V, x);
  }
}

// Host launcher of map2_kernel (T is the device type: float, __nv_bfloat16 or __half).
template <typename T, typename Op>
void launch_map2(T* out, const T* a, const T* b, size_t n, Op op, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kV = Pack128<T>::kSize;
  constexpr int kBlock = 256;
  const bool vec = n % kV == 0 && aligned16(out) && aligned16(a) && (b == nullptr || aligned16(b));
  if (vec) {
    LOOM_LAUNCH(map2_kernel<kV>, grid_for(n / kV, kBlock), kBlock, 0, stream)
    (out, a, b, n / kV, op);
  } else {
    LOOM_LAUNCH(map2_kernel<1>, grid_for(n, kBlock), kBlock, 0, stream)(out, a, b, n, op);
  }
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace loom::cuda
