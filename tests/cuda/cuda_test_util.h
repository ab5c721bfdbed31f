// Helpers of the cuda kernel tests: device buffers, bf16/fp16 conversions, typed tests, errors.
#pragma once
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda_device.h"
#include "tests/support/compare.h"
#include "tests/support/random.h"

namespace loom::cudatest {

using loom::cuda::bf16;
using loom::cuda::f16;

// Tolerances (norm-wise relative error ||got - want||_2 / ||want||_2 against the cpu twin run on
// the same inputs). fp32: the kernels compute in fp32 like the cpu twins, only the summation
// order and FMA contraction differ. bf16: the inputs are rounded to bf16 first (the cpu twin sees
// the same rounded values), so the error is the bf16 rounding of outputs and intermediates
// (2^-9 relative per element), with margin. fp16: the same construction; every error source
// there (rounding of stored outputs and stored intermediates such as the attention output the
// backward reads) is proportional to the storage's unit roundoff, which is 2^-11 for fp16 (11
// significant bits) against 2^-9 for bf16, so kTolF16 is kTolBF16 / 4: the same margin over
// the expected error (about 10x one unit roundoff). Test inputs stay far inside fp16's range
// (|x| <= 8, results well below 65504).
constexpr double kTolF32 = 1e-5;      // elementwise, layernorm, matmul, cross-entropy
constexpr double kTolF32Attn = 1e-4;  // attention (online softmax, longer reductions)
constexpr double kTolBF16 = 2e-2;
constexpr double kTolF16 = 5e-3;

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + ": " +
                             cudaGetErrorString(e));
}

inline void sync() { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (a kernel failed)"); }

// A device array of n T, uploaded from and downloaded to host vectors.
template <typename T>
class DevBuf {
 public:
  explicit DevBuf(size_t n) : n_(n) {
    void* p = nullptr;
    check(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc");
    p_ = static_cast<T*>(p);
  }
  explicit DevBuf(const std::vector<T>& h) : DevBuf(h.size()) { upload(h); }
  ~DevBuf() { cudaFree(p_); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;

  T* get() { return p_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& h) {
    if (h.size() != n_) throw std::runtime_error("DevBuf::upload: size mismatch");
    check(cudaMemcpy(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  std::vector<T> download() const {
    sync();  // surface asynchronous kernel errors here, with a clear message
    std::vector<T> h(n_);
    check(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

using loom::test::bitwise_equal;
using loom::test::randu;

// Scalar conversions of the storage types; float converts to itself.
template <typename T>
T from_f32(float f) {
  if constexpr (std::is_same_v<T, float>) {
    return f;
  } else if constexpr (std::is_same_v<T, bf16>) {
    return loom::cuda::bf16_from_float(f);
  } else {
    static_assert(std::is_same_v<T, f16>, "storage types: float, bf16, f16");
    return loom::cuda::f16_from_float(f);
  }
}
inline float to_f32(float x) { return x; }
inline float to_f32(bf16 h) { return loom::cuda::bf16_to_float(h); }
inline float to_f32(f16 h) { return loom::cuda::f16_to_float(h); }

// A host vector in storage type T (round to nearest even, as the device's __float2bfloat16_rn
// and __float2half_rn; tests/kernels/test_f16.cpp checks the fp16 rounding bit for bit).
template <typename T>
std::vector<T> convert(const std::vector<float>& v) {
  std::vector<T> r(v.size());
  for (size_t i = 0; i < v.size(); i++) r[i] = from_f32<T>(v[i]);
  return r;
}

template <typename T>
std::vector<float> to_f32(const std::vector<T>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); i++) r[i] = to_f32(v[i]);
  return r;
}

// The values a buffer of T can hold: v rounded to T and back (v itself for float).
template <typename T>
std::vector<float> round_to(const std::vector<float>& v) {
  return to_f32(convert<T>(v));
}

// Typed tests: one body for several storage types. Fp32AndLowpTypes where the fp32 body is the
// same, LowpTypes for the bodies that round their inputs to bf16 or fp16.
using Fp32AndLowpTypes = ::testing::Types<float, bf16, f16>;
using LowpTypes = ::testing::Types<bf16, f16>;

// A value chosen by storage type (seeds, tolerances): per_type<T>(for_bf16, for_f16), or
// per_type<T>(for_fp32, for_bf16, for_f16).
template <typename T, typename V>
V per_type(V for_bf16, V for_f16) {
  static_assert(std::is_same_v<T, bf16> || std::is_same_v<T, f16>, "low-precision types only");
  return std::is_same_v<T, bf16> ? for_bf16 : for_f16;
}
template <typename T, typename V>
V per_type(V for_fp32, V for_bf16, V for_f16) {
  if constexpr (std::is_same_v<T, float>) {
    return for_fp32;
  } else {
    return per_type<T>(for_bf16, for_f16);
  }
}

template <typename T>
std::string type_name() {
  return per_type<T>(std::string("fp32"), std::string("bf16"), std::string("fp16"));
}
// The tolerance of an output stored as T: f32_tol for float, kTolBF16 / kTolF16 otherwise.
template <typename T>
double type_tol(double f32_tol = kTolF32) {
  return per_type<T>(f32_tol, kTolBF16, kTolF16);
}

// Test names print the type ("CudaGelu/bf16.MatchesCpu"), not its index.
struct TypeNames {
  template <typename T>
  static std::string GetName(int) {
    return type_name<T>();
  }
};

// ||got - want||_2 / ||want||_2 (absolute when want is all zero); NaN anywhere gives +inf.
inline double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < got.size(); i++) {
    const double d = (double)got[i] - (double)want[i];
    if (std::isnan(d)) return INFINITY;
    num += d * d;
    den += (double)want[i] * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

#define EXPECT_REL_LE(got, want, tol, what)                                              \
  do {                                                                                   \
    const double loom_rel_ = ::loom::cudatest::rel_err((got), (want));                   \
    EXPECT_LE(loom_rel_, (tol)) << (what) << ": norm-wise relative error " << loom_rel_; \
  } while (0)

// Every cuda test derives from this: skipped (not failed) when no usable GPU is present.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!loom::cuda::cuda_available())
      GTEST_SKIP() << "CUDA kernel test skipped: " << loom::cuda::cuda_unavailable_reason();
  }
  void TearDown() override {
    if (loom::cuda::cuda_available()) sync();
  }
};

}  // namespace loom::cudatest
