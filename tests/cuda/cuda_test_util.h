// Helpers of the cuda kernel tests: device buffers, bf16/fp16 host conversions, norm-wise errors.
#pragma once
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda_device.h"

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
constexpr double kTolF32 = 1e-5;        // elementwise, layernorm, matmul, cross-entropy
constexpr double kTolF32Attn = 1e-4;    // attention (online softmax, longer reductions)
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

inline std::vector<float> randu(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

inline std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> r(v.size());
  for (size_t i = 0; i < v.size(); i++) r[i] = loom::cuda::bf16_from_float(v[i]);
  return r;
}

inline std::vector<float> to_f32(const std::vector<bf16>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); i++) r[i] = loom::cuda::bf16_to_float(v[i]);
  return r;
}

// The values a bf16 buffer can hold: v rounded to bf16 and back.
inline std::vector<float> round_bf16(const std::vector<float>& v) { return to_f32(to_bf16(v)); }

inline std::vector<f16> to_f16(const std::vector<float>& v) {
  std::vector<f16> r(v.size());
  for (size_t i = 0; i < v.size(); i++) r[i] = loom::cuda::f16_from_float(v[i]);
  return r;
}

inline std::vector<float> to_f32(const std::vector<f16>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); i++) r[i] = loom::cuda::f16_to_float(v[i]);
  return r;
}

// The values an fp16 buffer can hold: v rounded to fp16 and back (tests/kernels/test_f16.cpp
// checks the host rounding bit for bit; it is the same as the device's __float2half_rn).
inline std::vector<float> round_f16(const std::vector<float>& v) { return to_f32(to_f16(v)); }

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

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); i++)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return false;
  return true;
}

#define EXPECT_REL_LE(got, want, tol, what)                                     \
  do {                                                                          \
    const double loom_rel_ = ::loom::cudatest::rel_err((got), (want));          \
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
