// Plain C++ face of the cuda backend (no CUDA headers): device availability, bf16 storage, casts.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace loom::cuda {

// Storage of one bfloat16 value, bit-compatible with CUDA's __nv_bfloat16 (the .cu files
// reinterpret between the two). Host code converts with the helpers below.
struct bf16 {
  uint16_t bits;
};
static_assert(sizeof(bf16) == 2, "bf16 must be two bytes");

// fp32 -> bf16 with round-to-nearest-even (NaN stays a quiet NaN), as __float2bfloat16_rn.
inline bf16 bf16_from_float(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{(uint16_t)((u >> 16) | 0x0040u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{(uint16_t)(u >> 16)};
}

inline float bf16_to_float(bf16 h) {
  const uint32_t u = (uint32_t)h.bits << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

#ifdef LOOM_HAVE_CUDA
// True when the runtime sees at least one device of compute capability >= 8.0 (the kernels are
// built for sm_80 and sm_90). "No driver" (cudaErrorInsufficientDriver, cudaErrorStubLibrary)
// and "no device" (cudaErrorNoDevice) answer false; any other runtime error throws
// loom::InternalError. The answer is computed once per process.
bool cuda_available();
// Why cuda_available() is false (empty when it is true), for skip messages and logs.
std::string cuda_unavailable_reason();
// "device 0: NVIDIA H100 80GB HBM3, sm_90, 132 SMs, 79.1 GiB" (throws when there is no device).
std::string device_description(int device);

// True when p points into memory allocated by the CUDA runtime (device or managed).
bool is_device_pointer(const void* p);

// Elementwise casts on device buffers (round-to-nearest-even to bf16), on the given stream.
void cast_f32_to_bf16(bf16* out, const float* in, size_t n, void* stream);
void cast_bf16_to_f32(float* out, const bf16* in, size_t n, void* stream);
#else
inline bool cuda_available() { return false; }
inline bool is_device_pointer(const void*) { return false; }
inline std::string cuda_unavailable_reason() { return "loom was built without CUDA (LOOM_CUDA=OFF)"; }
#endif

}  // namespace loom::cuda
