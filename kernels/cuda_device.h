// Plain C++ face of the cuda backend (no CUDA headers): device availability, bf16/fp16, casts.
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

// Storage of one IEEE binary16 (fp16) value, bit-compatible with CUDA's __half (the .cu files
// reinterpret between the two): 1 sign, 5 exponent (bias 15), 10 mantissa bits; largest finite
// value 65504, smallest normal 2^-14, smallest subnormal 2^-24. Host code converts with the
// helpers below.
struct f16 {
  uint16_t bits;
};
static_assert(sizeof(f16) == 2, "f16 must be two bytes");

// fp32 -> fp16 with round-to-nearest-even, the same bits as CUDA's __float2half_rn: values of
// magnitude >= 65520 (the midpoint above 65504) become +-inf, small values round to subnormals
// or a signed zero, and every NaN becomes the canonical quiet NaN 0x7fff.
inline f16 f16_from_float(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return f16{0x7fffu};                      // NaN
  if (a >= 0x477ff000u) return f16{(uint16_t)(sign | 0x7c00u)};  // >= 65520 (or inf): inf
  if (a >= 0x38800000u) {                                        // normal: >= 2^-14
    // Rebias the exponent (127 -> 15) in place, then round away the low 13 mantissa bits; a
    // carry out of the mantissa correctly bumps the exponent.
    const uint32_t r = a - 0x38000000u;
    return f16{(uint16_t)(sign | ((r + 0x0fffu + ((r >> 13) & 1u)) >> 13))};
  }
  if (a <= 0x33000000u) return f16{(uint16_t)sign};  // <= 2^-25 (half the smallest subnormal)
  // Subnormal result: the value in units of 2^-24 is mant * 2^(e - 126), e the biased exponent
  // (102..112 here), so shift the full 24-bit mantissa right by 126 - e (14..24) and round.
  const uint32_t e = a >> 23;
  const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - e;
  const uint32_t half = 1u << (shift - 1);
  const uint32_t rem = mant & ((1u << shift) - 1u);
  uint32_t q = mant >> shift;
  if (rem > half || (rem == half && (q & 1u))) q++;  // q may reach 0x400: the smallest normal
  return f16{(uint16_t)(sign | q)};
}

// fp16 -> fp32 (exact: every fp16 value is a float).
inline float f16_to_float(f16 h) {
  const uint32_t sign = (uint32_t)(h.bits & 0x8000u) << 16;
  const uint32_t e = (h.bits >> 10) & 0x1fu;
  uint32_t m = h.bits & 0x3ffu;
  uint32_t u;
  if (e == 0x1fu) {
    u = sign | 0x7f800000u | (m << 13);  // inf, or NaN with its payload
  } else if (e != 0) {
    u = sign | ((e + 112u) << 23) | (m << 13);  // rebias 15 -> 127
  } else if (m == 0) {
    u = sign;  // signed zero
  } else {
    // Subnormal m * 2^-24: normalize so the leading one lands on bit 10.
    int shift = 0;
    while ((m & 0x400u) == 0) {
      m <<= 1;
      shift++;
    }
    u = sign | ((uint32_t)(113 - shift) << 23) | ((m & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

#ifdef LOOM_HAVE_CUDA
// Device bytes a kernel may use between its own launches on one stream (nothing is kept across
// calls): the GemmHandle's workspace in the backend, so no step allocates.
struct Workspace {
  void* ptr = nullptr;
  size_t bytes = 0;
};

// True when the runtime sees at least one device of compute capability >= 8.0 (the kernels are
// built for sm_80 and sm_90). "No driver" (cudaErrorInsufficientDriver, cudaErrorStubLibrary)
// and "no device" (cudaErrorNoDevice) answer false; any other runtime error throws
// loom::cuda::CudaError. The answer is computed once per process.
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
// fp16 twins (round-to-nearest-even, magnitudes >= 65520 become inf, as f16_from_float).
void cast_f32_to_f16(f16* out, const float* in, size_t n, void* stream);
void cast_f16_to_f32(float* out, const f16* in, size_t n, void* stream);
#else
inline bool cuda_available() { return false; }
inline bool is_device_pointer(const void*) { return false; }
inline std::string cuda_unavailable_reason() {
  return "loom was built without CUDA (LOOM_CUDA=OFF)";
}
#endif

}  // namespace loom::cuda
