// Linear layer and gemm cuda twin: cuBLASLt calls (gemm_lt.cuh), epilogues, a two-stage dbias.
#include "kernels/col_sums.cuh"
#include "kernels/cuda_common.cuh"
#include "kernels/gelu.h"
#include "kernels/gemm_lt.cuh"
#include "kernels/matmul.h"

namespace loom::cuda {
namespace {

void run_or_throw(GemmHandle& h, const Call& c, cudaStream_t stream) {
  LOOM_CUDA_REQUIRE(lt_matmul(h, c, stream),
                    "cuBLASLt found no algorithm for a GEMM (check the alignment of the operands)");
}

template <typename T>
constexpr cudaDataType_t dtype_of();
template <>
constexpr cudaDataType_t dtype_of<float>() {
  return CUDA_R_32F;
}
template <>
constexpr cudaDataType_t dtype_of<bf16>() {
  return CUDA_R_16BF;
}
template <>
constexpr cudaDataType_t dtype_of<f16>() {
  return CUDA_R_16F;
}

template <typename TA, typename TC>
void gemm_impl(GemmHandle& h, bool ta, bool tb, int M, int N, int K, float alpha, const TA* A,
               int lda, const TA* B, int ldb, float beta, TC* C, int ldc, void* stream) {
  if (M <= 0 || N <= 0) return;
  LOOM_CUDA_REQUIRE(K > 0, "gemm: K must be positive");
  const Call c{
      dtype_of<TA>(), dtype_of<TC>(), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc};
  run_or_throw(h, c, as_stream(stream));
}

// ---- bias helpers ----------------------------------------------------------------------
// out[n, c] = bias[c] (the fallback when cuBLASLt has no bias epilogue for a case).
template <typename T>
__global__ void broadcast_rows_kernel(T* out, const T* bias, size_t total, int OC) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride)
    out[i] = bias[i % OC];
}

// The term of dbias[c] from row n: dout[n, c].
template <typename T>
struct BiasTerm {
  static constexpr int kSums = 1;
  const T* dout;
  int OC;
  __device__ void operator()(int n, int c, float* acc) const {
    acc[0] += to_f32(dout[(size_t)n * OC + c]);
  }
};

// y (N, OC) = inp @ w + bias, via the bias epilogue or a broadcast then beta = 1.
template <typename T>
void linear(GemmHandle& h, T* y, const T* inp, const T* w, const T* bias, int N, int IC, int OC,
            cudaStream_t s) {
  Call c{dtype_of<T>(), dtype_of<T>(), false, false, N, OC, IC, 1.0f, inp, IC, w, OC, 0.0f, y, OC};
  if (bias) {
    c.epilogue = CUBLASLT_EPILOGUE_BIAS;
    c.bias = bias;
    if (lt_matmul(h, c, s)) return;
    const size_t total = (size_t)N * OC;
    LOOM_LAUNCH(broadcast_rows_kernel, grid_for(total, 256), 256, 0, s)
    (dev_ptr(y), dev_ptr(bias), total, OC);
    LOOM_CUDA_CHECK_LAUNCH();
    c.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    c.bias = nullptr;
    c.beta = 1.0f;
  }
  run_or_throw(h, c, s);
}

template <typename T>
void forward(GemmHandle& h, T* out, const T* inp, const T* w, const T* bias, int N, int IC, int OC,
             T* pre_gelu, void* stream) {
  if (N <= 0 || OC <= 0) return;
  LOOM_CUDA_REQUIRE(IC > 0, "matmul_forward: IC must be positive");
  cudaStream_t s = as_stream(stream);
  if (!pre_gelu) {
    linear(h, out, inp, w, bias, N, IC, OC, s);
    return;
  }
  if (OC % 8 == 0) {  // GELU aux leading dimension must be a multiple of 8
    Call c{dtype_of<T>(), dtype_of<T>(), false, false, N, OC, IC, 1.0f, inp, IC, w, OC,
           0.0f,          out,           OC};
    c.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    c.bias = bias;
    c.aux = pre_gelu;
    c.aux_ld = OC;
    if (lt_matmul(h, c, s)) return;
  }
  linear(h, pre_gelu, inp, w, bias, N, IC, OC, s);  // unfused fallback
  gelu_forward(out, pre_gelu, (size_t)N * OC, stream);
}

template <typename T>
void bias_grad(float* dbias, const T* dout, int N, int OC, void* stream, Workspace scratch) {
  if (N <= 0 || OC <= 0) return;
  col_sums(BiasTerm<dev_t<T>>{dev_ptr(dout), OC}, ColOut<1>{{dbias}}, N, OC, scratch,
           as_stream(stream));
}

template <typename T>
void backward(GemmHandle& h, T* dinp, float* dw, float* dbias, const T* dout, const T* inp,
              const T* w, int N, int IC, int OC, void* stream) {
  // dinp (N, IC) = dout (N, OC) @ w^T (OC, IC)
  if (dinp) gemm_impl(h, false, true, N, IC, OC, 1.0f, dout, OC, w, OC, 0.0f, dinp, IC, stream);
  // dw (IC, OC) += inp^T (IC, N) @ dout (N, OC), accumulated in fp32
  gemm_impl(h, true, false, IC, OC, N, 1.0f, inp, IC, dout, OC, 1.0f, dw, OC, stream);
  if (dbias) bias_grad(dbias, dout, N, OC, stream, h.scratch());
}

}  // namespace

// ---- public entry points -----------------------------------------------------------------
void gemm(GemmHandle& h, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
          const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc,
          void* stream) {
  gemm_impl(h, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, stream);
}
void gemm(GemmHandle& h, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
          const bf16* A, int lda, const bf16* B, int ldb, float beta, bf16* C, int ldc,
          void* stream) {
  gemm_impl(h, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, stream);
}
void gemm(GemmHandle& h, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
          const bf16* A, int lda, const bf16* B, int ldb, float beta, float* C, int ldc,
          void* stream) {
  gemm_impl(h, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, stream);
}

void gemm(GemmHandle& h, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const f16* A,
          int lda, const f16* B, int ldb, float beta, f16* C, int ldc, void* stream) {
  gemm_impl(h, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, stream);
}
void gemm(GemmHandle& h, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const f16* A,
          int lda, const f16* B, int ldb, float beta, float* C, int ldc, void* stream) {
  gemm_impl(h, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, stream);
}

void matmul_forward(GemmHandle& h, float* out, const float* inp, const float* w, const float* bias,
                    int N, int IC, int OC, float* pre_gelu, void* stream) {
  forward(h, out, inp, w, bias, N, IC, OC, pre_gelu, stream);
}
void matmul_forward(GemmHandle& h, bf16* out, const bf16* inp, const bf16* w, const bf16* bias,
                    int N, int IC, int OC, bf16* pre_gelu, void* stream) {
  forward(h, out, inp, w, bias, N, IC, OC, pre_gelu, stream);
}
void matmul_forward(GemmHandle& h, f16* out, const f16* inp, const f16* w, const f16* bias, int N,
                    int IC, int OC, f16* pre_gelu, void* stream) {
  forward(h, out, inp, w, bias, N, IC, OC, pre_gelu, stream);
}

void matmul_backward(GemmHandle& h, float* dinp, float* dw, float* dbias, const float* dout,
                     const float* inp, const float* w, int N, int IC, int OC, void* stream) {
  backward(h, dinp, dw, dbias, dout, inp, w, N, IC, OC, stream);
}
void matmul_backward(GemmHandle& h, bf16* dinp, float* dw, float* dbias, const bf16* dout,
                     const bf16* inp, const bf16* w, int N, int IC, int OC, void* stream) {
  backward(h, dinp, dw, dbias, dout, inp, w, N, IC, OC, stream);
}
void matmul_backward(GemmHandle& h, f16* dinp, float* dw, float* dbias, const f16* dout,
                     const f16* inp, const f16* w, int N, int IC, int OC, void* stream) {
  backward(h, dinp, dw, dbias, dout, inp, w, N, IC, OC, stream);
}

void bias_backward(float* dbias, const float* dout, int N, int OC, void* stream,
                   Workspace scratch) {
  bias_grad(dbias, dout, N, OC, stream, scratch);
}
void bias_backward(float* dbias, const bf16* dout, int N, int OC, void* stream, Workspace scratch) {
  bias_grad(dbias, dout, N, OC, stream, scratch);
}
void bias_backward(float* dbias, const f16* dout, int N, int OC, void* stream, Workspace scratch) {
  bias_grad(dbias, dout, N, OC, stream, scratch);
}

}  // namespace loom::cuda
