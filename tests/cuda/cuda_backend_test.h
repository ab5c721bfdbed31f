// The fixture of the cuda Backend tests: a cuda backend per activation dtype, the cpu backend
// as reference, and device buffers filled and read through the backend under test.
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/buffer.h"
#include "core/check.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom {
// Test names and failure messages print the dtype ("bf16"), not its bytes.
inline void PrintTo(DType t, std::ostream* os) { *os << dtype_name(t); }
}  // namespace loom

namespace loom::cudatest {

// Tolerances, norm-wise relative error (rel_err) against the cpu backend on the same inputs:
//  fp32 backend: bitwise for memory ops, casts, bias_residual and add_inplace (the same fp32
//    additions in the same order); 1e-6 for AdamW; kTolF32 = 1e-5 for GEMM-based ops, layernorm,
//    embedding, GELU and cross-entropy (summation order, FMA contraction, expf vs the cpu's
//    exp); kTolF32Attn = 1e-4 for attention (online softmax).
//  bf16 backend: kTolBF16 = 2e-2 on every output computed from bf16-rounded inputs (the cpu
//    reference sees the same rounded values; the error is bf16 rounding of outputs and
//    intermediates, 2^-9 per element, with margin); bitwise where the output is one rounding of
//    the cpu's fp32 result (bias_residual, casts).
//  fp16 backend: the same with fp16 rounding, kTolF16 = 5e-3 (2^-11 per element). Test inputs
//    (|x| <= 100) stay inside fp16's range.
class CudaBackendTest : public CudaTest, public ::testing::WithParamInterface<DType> {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    be_ = make_cuda_backend(GetParam(), 0);
    lowp_ = be_->lowp();
  }
  void TearDown() override {
    if (be_) be_->synchronize();
    be_.reset();
    CudaTest::TearDown();
  }

  Backend& be() { return *be_; }
  static Backend& ref() {
    static const std::unique_ptr<Backend> cpu = make_cpu_backend();  // the reference, for all
    return *cpu;
  }
  bool half() const { return GetParam() == DType::F16; }
  double tol(double f32_tol) const { return lowp_ ? (half() ? kTolF16 : kTolBF16) : f32_tol; }
  // The values an activation of this backend can hold: the cpu reference is given these.
  std::vector<float> act_vals(const std::vector<float>& v) const {
    return lowp_ ? round_act(v) : v;
  }
  std::vector<float> round_act(const std::vector<float>& v) const {
    return half() ? round_to<f16>(v) : round_to<bf16>(v);
  }

  // Device buffers filled and read through the backend under test.
  Buffer act(const std::vector<float>& h) {  // h: representable values (act_vals)
    Buffer d(h.size() * be_->act_size(), Device::CUDA);
    if (half()) {
      const auto b = convert<f16>(h);
      be_->from_host(d.data(), b.data(), b.size() * sizeof(f16));
    } else if (lowp_) {
      const auto b = convert<bf16>(h);
      be_->from_host(d.data(), b.data(), b.size() * sizeof(bf16));
    } else {
      be_->from_host(d.data(), h.data(), h.size() * sizeof(float));
    }
    return d;
  }
  template <typename V>
  Buffer dev(const std::vector<V>& h) {
    Buffer d(h.size() * sizeof(V), Device::CUDA);
    be_->from_host(d.data(), h.data(), h.size() * sizeof(V));
    return d;
  }
  // Outputs start as NaN: anything the backend fails to write shows up as an infinite error.
  Buffer act_nan(size_t n) { return act(std::vector<float>(n, NAN)); }
  Buffer f32_nan(size_t n) { return dev(std::vector<float>(n, NAN)); }
  std::vector<float> get_act(const Buffer& d, size_t n) {
    std::vector<float> h(n);
    be_->act_to_host_f32(h.data(), d.data(), n);
    return h;
  }
  std::vector<float> get_f32(const Buffer& d, size_t n) {
    std::vector<float> h(n);
    be_->to_host(h.data(), d.data(), n * sizeof(float));
    return h;
  }
  static float* F(Buffer& b) { return static_cast<float*>(b.data()); }
  static int32_t* I(Buffer& b) { return static_cast<int32_t*>(b.data()); }

  std::unique_ptr<Backend> be_;
  bool lowp_ = false;
};

inline std::vector<int32_t> rand_ids(size_t n, int hi, uint32_t seed) {
  std::vector<int32_t> ids(n);
  const auto u = randu(n, seed, 0.0f, 1.0f);
  for (size_t i = 0; i < n; i++) ids[i] = std::min(hi - 1, (int32_t)(u[i] * (float)hi));
  return ids;
}

}  // namespace loom::cudatest
