// Grouped GEMMs over expert segments (Mixture of Experts): each segment of stacked rows goes
// through its own expert's linear layer, y = x W_e + b_e, in one call. cpu twin: one BLAS GEMM per
// segment; cuda twin: one cuBLAS grouped batched GEMM per product (kernels/grouped_matmul.cu).
#pragma once
#include <vector>

namespace loom::cpu {

// Rows [row, row + rows) of the stacked inputs and outputs use expert `expert`: weight
// w + expert * IC * OC (IC, OC) and bias b + expert * OC.
struct GemmSegment {
  int row, rows, expert;
};

// out rows of each segment (rows, OC) = inp rows (rows, IC) @ w_e + bias_e (bias nullable).
// Rows in no segment are left as they are.
void grouped_matmul_forward(float* out, const float* inp, const float* w, const float* bias,
                            const std::vector<GemmSegment>& segs, int IC, int OC);

// Per segment: dinp rows = dout rows @ w_e^T (overwritten; skipped when dinp is nullptr);
// dw_e += inp rows^T @ dout rows; dbias_e += column sums of dout rows (nullable). Several
// segments may share an expert: their weight gradients add up.
void grouped_matmul_backward(float* dinp, float* dw, float* dbias, const float* dout,
                             const float* inp, const float* w, const std::vector<GemmSegment>& segs,
                             int IC, int OC);

}  // namespace loom::cpu

#ifdef LOOM_HAVE_CUDA
#include <cstddef>

namespace loom::cuda {

// A cuBLAS handle and the device arrays a grouped call reads its problems from (operand
// pointers, and the segments for the bias kernels), grown to the largest call. The arrays are
// uploaded on the call's stream before each GEMM, so consecutive calls on one stream may reuse
// them. Not thread-safe: one host thread drives a handle.
class GroupedGemm {
 public:
  GroupedGemm();
  ~GroupedGemm();
  GroupedGemm(const GroupedGemm&) = delete;
  GroupedGemm& operator=(const GroupedGemm&) = delete;
  void* blas() const { return blas_; }  // cublasHandle_t
  // Device memory of at least `bytes`, holding `host` copied on `stream`.
  void* upload(const void* host, size_t bytes, void* stream);

 private:
  void* blas_ = nullptr;
  void* dev_ = nullptr;
  size_t cap_ = 0;
};

// The cuda twins on device pointers, fp32 (strict fp32 compute, as the cpu twin), enqueued on
// `stream`. The weight gradients of segments sharing an expert are accumulated by successive
// grouped calls (no two problems of one call write the same matrix).
void grouped_matmul_forward(GroupedGemm& g, float* out, const float* inp, const float* w,
                            const float* bias, const std::vector<cpu::GemmSegment>& segs, int IC,
                            int OC, void* stream);
void grouped_matmul_backward(GroupedGemm& g, float* dinp, float* dw, float* dbias,
                             const float* dout, const float* inp, const float* w,
                             const std::vector<cpu::GemmSegment>& segs, int IC, int OC,
                             void* stream);

}  // namespace loom::cuda
#endif  // LOOM_HAVE_CUDA
