// The cuda backend's per-dtype parts: the DType, the description and the two fp32 conversions of
// each activation storage type (fp32, bf16, fp16).
#pragma once
#include <cuda_runtime_api.h>

#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "kernels/cuda_check.h"
#include "kernels/cuda_device.h"

namespace loom::cuda_backend {

using cuda::bf16;
using cuda::f16;

// Everything that differs between activation dtypes, in one place. fp16 is one more
// specialization (cuda::f16 with its cast twins) and one case in make_cuda_backend; the kernels
// are reached through overloads on the storage type.
template <typename T>
struct Act;

template <>
struct Act<float> {
  static constexpr DType kDType = DType::F32;
  static constexpr const char* kCompute = "fp32 compute";
  // dst (n) = src (n), the compute weights being the fp32 parameters themselves.
  static void from_f32(float* dst, const float* src, size_t n, cudaStream_t s) {
    if (dst != src && n)
      LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, s));
  }
  // host (n) = src (n); synchronizes.
  static void to_host_f32(float* host, const float* src, size_t n, cudaStream_t s) {
    if (n)
      LOOM_CUDA_CHECK(cudaMemcpyAsync(host, src, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    LOOM_CUDA_CHECK(cudaStreamSynchronize(s));
  }
};

// host (n) fp32 = src (n) 16-bit values: half the bytes of a device-side cast, so copy the
// values and widen them on the host; synchronizes.
template <typename H, typename Widen>
void copy_widen(float* host, const H* src, size_t n, cudaStream_t s, Widen widen) {
  std::vector<H> tmp(n);
  if (n)
    LOOM_CUDA_CHECK(cudaMemcpyAsync(tmp.data(), src, n * sizeof(H), cudaMemcpyDeviceToHost, s));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(s));
  for (size_t i = 0; i < n; i++) host[i] = widen(tmp[i]);
}

template <>
struct Act<bf16> {
  static constexpr DType kDType = DType::BF16;
  static constexpr const char* kCompute = "bf16 compute (fp32 master weights)";
  static void from_f32(bf16* dst, const float* src, size_t n, cudaStream_t s) {
    cuda::cast_f32_to_bf16(dst, src, n, s);
  }
  static void to_host_f32(float* host, const bf16* src, size_t n, cudaStream_t s) {
    copy_widen(host, src, n, s, cuda::bf16_to_float);
  }
};

template <>
struct Act<f16> {
  static constexpr DType kDType = DType::F16;
  static constexpr const char* kCompute = "fp16 compute (fp32 master weights, loss scaling)";
  static void from_f32(f16* dst, const float* src, size_t n, cudaStream_t s) {
    cuda::cast_f32_to_f16(dst, src, n, s);
  }
  static void to_host_f32(float* host, const f16* src, size_t n, cudaStream_t s) {
    copy_widen(host, src, n, s, cuda::f16_to_float);
  }
};

}  // namespace loom::cuda_backend
