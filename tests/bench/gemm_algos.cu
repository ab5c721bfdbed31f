// gemm_algos: times every cuBLASLt algorithm the heuristic offers for the GEMM shapes of a GPT-2
// training step (bf16 operands, fp32 accumulation) and reports the first one (what loom's plans
// use) against the fastest. Benchmark program, not a test: scripts/gpu_lease.sh runs it on a GPU.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

#define CK(call)                                                                                 \
  do {                                                                                           \
    cudaError_t e_ = (call);                                                                     \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "gemm_algos: %s failed: %s (%s:%d)\n", #call, cudaGetErrorString(e_), \
                   __FILE__, __LINE__);                                                          \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)
#define CB(call)                                                                                   \
  do {                                                                                             \
    cublasStatus_t s_ = (call);                                                                    \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                             \
      std::fprintf(stderr, "gemm_algos: %s failed: status %d (%s:%d)\n", #call, int(s_), __FILE__, \
                   __LINE__);                                                                      \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

// One GEMM in loom's row-major terms: Y (rows, out) from X (rows, in) and W (out, in).
// fwd: Y = X W^T (bf16 out); dx: dX = dY W (bf16 out); dw: dW += dY^T X (fp32 out, beta 1).
struct Shape {
  std::string name;
  int rows, in, out;
};

struct Problem {  // column-major cuBLAS terms: D (m, n) = op(A) op(B)
  std::string label;
  int m, n, k;
  cublasOperation_t ta, tb;
  cudaDataType_t d_type;
  float beta;
};

std::vector<Problem> problems_of(const Shape& s) {
  // A row-major matrix is its column-major transpose: Y^T (out, rows) = op(W) X^T with W read as
  // (in, out) and transposed (TN); dX^T (in, rows) = W dY^T (NN); dW^T (in, out) = X^T dY (NT).
  return {
      {s.name + " fwd", s.out, s.rows, s.in, CUBLAS_OP_T, CUBLAS_OP_N, CUDA_R_16BF, 0.0f},
      {s.name + " dX", s.in, s.rows, s.out, CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_16BF, 0.0f},
      {s.name + " dW", s.in, s.out, s.rows, CUBLAS_OP_N, CUBLAS_OP_T, CUDA_R_32F, 1.0f},
  };
}

__global__ void fill(__nv_bfloat16* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    unsigned h = unsigned(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    p[i] = __float2bfloat16((float(h & 0xffff) / 65536.0f - 0.5f) * 0.1f);
  }
}

// Median time in ms of `reps` launches of one algorithm (events around each launch).
float time_algo(cublasLtHandle_t lt, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc,
                const cublasLtMatmulAlgo_t& algo, const void* A, const void* B, void* C, float beta,
                void* ws, size_t ws_bytes, cudaStream_t st, int reps) {
  const float alpha = 1.0f;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) {
    if (cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &algo, ws, ws_bytes,
                       st) != CUBLAS_STATUS_SUCCESS)
      return -1.0f;
  }
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(e0, st));
    CB(cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &algo, ws, ws_bytes,
                      st));
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float t = 0;
    CK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  // usage: gemm_algos [tokens C V ...]: each triple is a model (tokens per micro-batch, d_model,
  // padded vocab); default GPT-2 124M (16 x 1024 tokens) and 350M (8 x 1024).
  std::vector<int> args;
  for (int i = 1; i < argc; ++i) args.push_back(std::atoi(argv[i]));
  if (args.empty()) args = {16384, 768, 50304, 8192, 1024, 50304};
  if (args.size() % 3 != 0) {
    std::fprintf(stderr, "usage: gemm_algos [TOKENS D_MODEL PADDED_VOCAB]...\n");
    return 2;
  }
  cublasLtHandle_t lt;
  CB(cublasLtCreate(&lt));
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  const size_t ws_bytes = 32u << 20;  // loom's workspace
  void* ws = nullptr;
  CK(cudaMalloc(&ws, ws_bytes));

  std::printf(
      "| GEMM | m n k (column-major) | heuristic #1 ms | best ms (algo rank of %s) | #1 / best | "
      "TFLOP/s of #1 |\n",
      "the heuristic's list");
  std::printf("|---|---|--:|--:|--:|--:|\n");
  double sum_first = 0, sum_best = 0;
  for (size_t a = 0; a < args.size(); a += 3) {
    const int N = args[a], C = args[a + 1], V = args[a + 2];
    const std::string tag = "C" + std::to_string(C) + " ";
    std::vector<Shape> shapes = {{tag + "qkv", N, C, 3 * C},
                                 {tag + "attn proj", N, C, C},
                                 {tag + "fc", N, C, 4 * C},
                                 {tag + "fc proj", N, 4 * C, C},
                                 {tag + "classifier", N, C, V}};
    for (const Shape& s : shapes) {
      for (const Problem& p : problems_of(s)) {
        const size_t a_rows = p.ta == CUBLAS_OP_N ? p.m : p.k,
                     a_cols = p.ta == CUBLAS_OP_N ? p.k : p.m;
        const size_t b_rows = p.tb == CUBLAS_OP_N ? p.k : p.n,
                     b_cols = p.tb == CUBLAS_OP_N ? p.n : p.k;
        __nv_bfloat16 *A, *B;
        void* D;
        CK(cudaMalloc(&A, a_rows * a_cols * 2));
        CK(cudaMalloc(&B, b_rows * b_cols * 2));
        const size_t d_elem = p.d_type == CUDA_R_32F ? 4 : 2;
        CK(cudaMalloc(&D, size_t(p.m) * p.n * d_elem));
        fill<<<1024, 256, 0, st>>>(A, a_rows * a_cols, 17u);
        fill<<<1024, 256, 0, st>>>(B, b_rows * b_cols, 91u);
        CK(cudaMemsetAsync(D, 0, size_t(p.m) * p.n * d_elem, st));
        CK(cudaGetLastError());

        cublasLtMatmulDesc_t desc;
        CB(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        CB(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &p.ta, sizeof(p.ta)));
        CB(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &p.tb, sizeof(p.tb)));
        cublasLtMatrixLayout_t la, lb, lc;
        CB(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, a_rows, a_cols, a_rows));
        CB(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, b_rows, b_cols, b_rows));
        CB(cublasLtMatrixLayoutCreate(&lc, p.d_type, p.m, p.n, p.m));
        cublasLtMatmulPreference_t pref;
        CB(cublasLtMatmulPreferenceCreate(&pref));
        CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &ws_bytes, sizeof(ws_bytes)));
        cublasLtMatmulHeuristicResult_t res[32];
        int found = 0;
        CB(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 32, res, &found));
        float first = -1, best = 1e30f;
        int best_rank = -1;
        for (int i = 0; i < found; ++i) {
          const float t =
              time_algo(lt, desc, la, lb, lc, res[i].algo, A, B, D, p.beta, ws, ws_bytes, st, 15);
          if (i == 0) first = t;
          if (t > 0 && t < best) best = t, best_rank = i + 1;
        }
        const double flop = 2.0 * p.m * p.n * p.k;
        std::printf("| %s | %d %d %d | %.4f | %.4f (#%d of %d) | %.3f | %.0f |\n", p.label.c_str(),
                    p.m, p.n, p.k, first, best, best_rank, found, first / best,
                    flop / (first * 1e-3) / 1e12);
        std::fflush(stdout);
        sum_first += first;
        sum_best += best;
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatmulDescDestroy(desc);
        CK(cudaFree(A));
        CK(cudaFree(B));
        CK(cudaFree(D));
      }
    }
  }
  std::printf("\nall shapes: heuristic #1 %.3f ms, best %.3f ms, ratio %.3f\n", sum_first, sum_best,
              sum_first / sum_best);
  CK(cudaFree(ws));
  cublasLtDestroy(lt);
  return 0;
}
