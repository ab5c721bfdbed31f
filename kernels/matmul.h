// GEMMs through BLAS: a row-major gemm wrapper and the linear layer y = x W + b (W is [in, out],
// the Hugging Face GPT-2 Conv1D layout), forward and backward.
#pragma once

namespace loom::cpu {

// Row-major C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C, with leading dimensions.
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);

// out (N, OC) = inp (N, IC) @ w (IC, OC) + bias (OC) (bias may be nullptr). Overwrites out.
void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int N, int IC,
                    int OC);

// dinp (N, IC) = dout @ w^T (overwritten; skipped when dinp is nullptr);
// dw (IC, OC) += inp^T @ dout; dbias (OC) += column sums of dout (skipped when nullptr).
void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                     const float* w, int N, int IC, int OC);

// Optional GEMM accounting for benchmarks (off by default; a relaxed flag check when off): every
// gemm() adds 2*M*N*K flops and its wall time, divided by the team size when it runs inside an
// OpenMP parallel region (the team's GEMMs overlap), so ms approximates the step's GEMM wall time.
struct GemmStats {
  long long calls = 0;
  double flops = 0, ms = 0;
};
void gemm_stats_enable(bool on);
void gemm_stats_reset();
GemmStats gemm_stats();

}  // namespace loom::cpu

#ifdef LOOM_HAVE_CUDA
#include <cstddef>
#include <memory>

#include "kernels/cuda_device.h"

namespace loom::cuda {

// A cuBLASLt handle, its GEMM workspace and its plans, created once (per device and stream:
// GEMMs running concurrently on several streams need one handle each, since they share the
// workspace). A plan (matmul descriptor, matrix layouts, the algorithm cuBLASLt's heuristic
// chose) is built on the first GEMM of each distinct key (types, compute type, transposes,
// M, N, K, leading dimensions, epilogue, the operands' alignments) and reused by every later
// GEMM with that key: after the first step, a GEMM queries no heuristic and allocates nothing.
// Not thread-safe: one host thread drives a handle.
class GemmHandle {
 public:
  static constexpr size_t kDefaultWorkspaceBytes = size_t(32) << 20;
  explicit GemmHandle(size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~GemmHandle();
  GemmHandle(const GemmHandle&) = delete;
  GemmHandle& operator=(const GemmHandle&) = delete;
  void* lt() const { return lt_; }  // cublasLtHandle_t
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }
  // The workspace as scratch for the column reductions and the embedding backward enqueued on
  // this handle's stream: stream order keeps them apart from the GEMMs' use of the same bytes.
  Workspace scratch() const { return Workspace{workspace_, workspace_bytes_}; }
  // Plans built so far (including "cuBLASLt has no algorithm" answers, which are kept too).
  size_t plan_count() const;
  // fp32 GEMMs on TF32 tensor cores (faster, ~1e-3 relative); off: strict fp32 as the cpu twin.
  bool allow_tf32 = false;

  struct Plans;  // matmul.cu

 private:
  friend Plans& plans_of(GemmHandle& h);
  void* lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::unique_ptr<Plans> plans_;
};

// cuda twins on device pointers, enqueued on `stream` (a cudaStream_t); fp32 accumulation
// always. Row-major semantics of cpu::gemm: C (M, N) = alpha op(A) op(B) + beta C.
void gemm(GemmHandle& h, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
          const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc,
          void* stream);
void gemm(GemmHandle& h, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
          const bf16* A, int lda, const bf16* B, int ldb, float beta, bf16* C, int ldc,
          void* stream);
// bf16 inputs, fp32 output (weight gradients accumulated into fp32 buffers).
void gemm(GemmHandle& h, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
          const bf16* A, int lda, const bf16* B, int ldb, float beta, float* C, int ldc,
          void* stream);
// fp16 twins of the two above (cuBLASLt CUDA_R_16F with CUBLAS_COMPUTE_32F: fp32 accumulation).
// An fp16 C stores magnitudes up to 65504; beyond that the result is inf.
void gemm(GemmHandle& h, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const f16* A,
          int lda, const f16* B, int ldb, float beta, f16* C, int ldc, void* stream);
void gemm(GemmHandle& h, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const f16* A,
          int lda, const f16* B, int ldb, float beta, float* C, int ldc, void* stream);

// out (N, OC) = inp (N, IC) @ w (IC, OC) + bias (OC, nullable), the bias in cuBLASLt's epilogue.
// With pre_gelu (N, OC) non-null: pre_gelu = inp @ w + bias and out = gelu(pre_gelu) (cuBLASLt's
// GELU epilogue, tanh form, when it has one for the case; else a separate gelu_forward).
void matmul_forward(GemmHandle& h, float* out, const float* inp, const float* w, const float* bias,
                    int N, int IC, int OC, float* pre_gelu, void* stream);
void matmul_forward(GemmHandle& h, bf16* out, const bf16* inp, const bf16* w, const bf16* bias,
                    int N, int IC, int OC, bf16* pre_gelu, void* stream);
void matmul_forward(GemmHandle& h, f16* out, const f16* inp, const f16* w, const f16* bias, int N,
                    int IC, int OC, f16* pre_gelu, void* stream);

// dinp (N, IC) = dout @ w^T (overwritten; skipped when nullptr); dw (IC, OC) += inp^T @ dout
// and dbias (OC) += column sums of dout (nullable), both fp32.
void matmul_backward(GemmHandle& h, float* dinp, float* dw, float* dbias, const float* dout,
                     const float* inp, const float* w, int N, int IC, int OC, void* stream);
void matmul_backward(GemmHandle& h, bf16* dinp, float* dw, float* dbias, const bf16* dout,
                     const bf16* inp, const bf16* w, int N, int IC, int OC, void* stream);
void matmul_backward(GemmHandle& h, f16* dinp, float* dw, float* dbias, const f16* dout,
                     const f16* inp, const f16* w, int N, int IC, int OC, void* stream);

// dbias (OC) += column sums of dout (N, OC): deterministic (fixed order, no atomics). With
// scratch, row chunks are summed by separate blocks into it and then added in chunk order (a
// two-stage reduction that fills the GPU); without, one block per 32 columns sums every row.
void bias_backward(float* dbias, const float* dout, int N, int OC, void* stream,
                   Workspace scratch = {});
void bias_backward(float* dbias, const bf16* dout, int N, int OC, void* stream,
                   Workspace scratch = {});
void bias_backward(float* dbias, const f16* dout, int N, int OC, void* stream,
                   Workspace scratch = {});

}  // namespace loom::cuda
#endif  // LOOM_HAVE_CUDA
