// cuBLASLt for the cuda twins: the GemmHandle, its per-key plans (descriptor, layouts, algorithm).
#include <array>
#include <map>
#include <memory>

#include "kernels/gemm_lt.cuh"

namespace loom::cuda {
namespace {

// ---- plans ------------------------------------------------------------------------------
// One GEMM's cuBLASLt objects, built once per key (below) and owned by the handle.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo = {};
  bool ok = false;  // false: cuBLASLt has no algorithm (the caller's fallback runs instead)
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (lc) cublaslt().cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublaslt().cublasLtMatrixLayoutDestroy(lb);
    if (la) cublaslt().cublasLtMatrixLayoutDestroy(la);
    if (desc) cublaslt().cublasLtMatmulDescDestroy(desc);
  }
};

// Everything the heuristic's answer depends on: types, compute type, transposes, M, N, K, the
// leading dimensions, the epilogue and its aux leading dimension, and the alignments of A, B,
// C and of the bias and aux pointers (a plan chosen for 16-byte operands must not run on
// 4-byte ones). Pointers and alpha, beta are given per call.
using PlanKey = std::array<int64_t, 16>;

}  // namespace

struct GemmHandle::Plans {
  std::map<PlanKey, std::unique_ptr<Plan>> map;
};

GemmHandle::Plans& plans_of(GemmHandle& h) { return *h.plans_; }

// ---- handle ----------------------------------------------------------------------------
GemmHandle::GemmHandle(size_t workspace_bytes) : plans_(std::make_unique<Plans>()) {
  cublasLtHandle_t h = nullptr;
  LOOM_CUBLAS_CHECK(cublaslt().cublasLtCreate(&h));
  lt_ = h;
  if (workspace_bytes > 0) {
    const cudaError_t e = cudaMalloc(&workspace_, workspace_bytes);
    if (e != cudaSuccess) {
      cublaslt().cublasLtDestroy(h);
      LOOM_CUDA_CHECK(e);
    }
  }
  workspace_bytes_ = workspace_bytes;
}

GemmHandle::~GemmHandle() {
  // No throwing from a destructor: errors here (e.g. a dying context at exit) are ignored.
  plans_.reset();  // the descriptors before the handle
  if (workspace_) cudaFree(workspace_);
  if (lt_) cublaslt().cublasLtDestroy(static_cast<cublasLtHandle_t>(lt_));
}

size_t GemmHandle::plan_count() const { return plans_->map.size(); }

namespace {

// ---- cuBLASLt call --------------------------------------------------------------------
// RAII owner of a preference (only needed while a plan is built).
struct Pref {
  cublasLtMatmulPreference_t p = nullptr;
  ~Pref() {
    if (p) cublaslt().cublasLtMatmulPreferenceDestroy(p);
  }
};

// Largest power of two <= 256 dividing the address (cuBLASLt assumes 256 unless told).
uint32_t alignment_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al >>= 1;
  return al;
}

cublasComputeType_t compute_of(const GemmHandle& h, const Call& c) {
  return (c.ab_type == CUDA_R_32F && h.allow_tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                   : CUBLAS_COMPUTE_32F;
}

PlanKey key_of(const GemmHandle& h, const Call& c) {
  return PlanKey{c.ab_type,
                 c.cd_type,
                 compute_of(h, c),
                 (c.ta ? 1 : 0) | (c.tb ? 2 : 0),
                 c.M,
                 c.N,
                 c.K,
                 c.lda,
                 c.ldb,
                 c.ldc,
                 c.epilogue,
                 c.aux_ld,
                 (int64_t)alignment_of(c.A) | (int64_t)alignment_of(c.B) << 16 |
                     (int64_t)alignment_of(c.C) << 32,
                 c.bias ? (int64_t)alignment_of(c.bias) : 0,
                 c.aux ? (int64_t)alignment_of(c.aux) : 0,
                 0};
}

// Writes this call's bias and aux pointers into the plan's descriptor.
void set_call_pointers(Plan& p, const Call& c) {
  if (c.bias) {
    LOOM_CUBLAS_CHECK(cublaslt().cublasLtMatmulDescSetAttribute(
        p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c.bias, sizeof(c.bias)));
  }
  if (c.aux) {
    LOOM_CUBLAS_CHECK(cublaslt().cublasLtMatmulDescSetAttribute(
        p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &c.aux, sizeof(c.aux)));
  }
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a row-major (r, c)
// matrix with leading dimension ld is the column-major (c, r) matrix with the same ld: so
// cuBLASLt computes D' (N x M) = op'(B) (N x K) * op'(A) (K x M) on the unchanged buffers.
// Builds the descriptor, the layouts and asks the heuristic for one algorithm (ok = false when
// it has none for this combination: epilogue, alignment).
void build_plan(GemmHandle& h, const Call& c, Plan& p) {
  LOOM_CUBLAS_CHECK(cublaslt().cublasLtMatmulDescCreate(&p.desc, compute_of(h, c), CUDA_R_32F));
  const cublasOperation_t op_a = c.tb ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLAS "A" is our B
  const cublasOperation_t op_b = c.ta ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLAS "B" is our A
  LOOM_CUBLAS_CHECK(cublaslt().cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                              &op_a, sizeof(op_a)));
  LOOM_CUBLAS_CHECK(cublaslt().cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                              &op_b, sizeof(op_b)));
  if (c.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    LOOM_CUBLAS_CHECK(cublaslt().cublasLtMatmulDescSetAttribute(
        p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &c.epilogue, sizeof(c.epilogue)));
  }
  // The heuristic sees this call's bias and aux pointers (their alignment is in the key).
  set_call_pointers(p, c);
  if (c.aux) {
    LOOM_CUBLAS_CHECK(cublaslt().cublasLtMatmulDescSetAttribute(
        p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &c.aux_ld, sizeof(c.aux_ld)));
  }
  // Stored (column-major) shapes: cuBLAS A = our B, cuBLAS B = our A, D = C^T (N x M).
  LOOM_CUBLAS_CHECK(cublaslt().cublasLtMatrixLayoutCreate(&p.la, c.ab_type, c.tb ? c.K : c.N,
                                                          c.tb ? c.N : c.K, c.ldb));
  LOOM_CUBLAS_CHECK(cublaslt().cublasLtMatrixLayoutCreate(&p.lb, c.ab_type, c.ta ? c.M : c.K,
                                                          c.ta ? c.K : c.M, c.lda));
  LOOM_CUBLAS_CHECK(cublaslt().cublasLtMatrixLayoutCreate(&p.lc, c.cd_type, c.N, c.M, c.ldc));

  Pref pref;
  LOOM_CUBLAS_CHECK(cublaslt().cublasLtMatmulPreferenceCreate(&pref.p));
  const size_t ws = h.workspace_bytes();
  LOOM_CUBLAS_CHECK(cublaslt().cublasLtMatmulPreferenceSetAttribute(
      pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t al_a = alignment_of(c.B), al_b = alignment_of(c.A), al_c = alignment_of(c.C);
  LOOM_CUBLAS_CHECK(cublaslt().cublasLtMatmulPreferenceSetAttribute(
      pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
  LOOM_CUBLAS_CHECK(cublaslt().cublasLtMatmulPreferenceSetAttribute(
      pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
  LOOM_CUBLAS_CHECK(cublaslt().cublasLtMatmulPreferenceSetAttribute(
      pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
  LOOM_CUBLAS_CHECK(cublaslt().cublasLtMatmulPreferenceSetAttribute(
      pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c)));

  cublasLtMatmulHeuristicResult_t result = {};
  int found = 0;
  const cublasStatus_t st =
      cublaslt().cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(h.lt()), p.desc, p.la,
                                                p.lb, p.lc, p.lc, pref.p, 1, &result, &found);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0)) return;
  LOOM_CUBLAS_CHECK(st);
  p.algo = result.algo;
  p.ok = true;
}

// The plan for this call's key: found, or built (and kept) on the first call with the key.
Plan& plan_for(GemmHandle& h, const Call& c) {
  std::unique_ptr<Plan>& slot = plans_of(h).map[key_of(h, c)];
  if (!slot) {
    auto p = std::make_unique<Plan>();
    build_plan(h, c, *p);  // a throw leaves the slot empty: the next call builds again
    slot = std::move(p);
  }
  return *slot;
}

}  // namespace

// The per-call pointers (bias, aux) are written into the plan's descriptor: cublasLtMatmul reads
// the descriptor when it enqueues, so the next call may change them.
bool lt_matmul(GemmHandle& h, const Call& c, cudaStream_t stream) {
  Plan& p = plan_for(h, c);
  if (!p.ok) return false;
  set_call_pointers(p, c);
  const cublasStatus_t run = cublaslt().cublasLtMatmul(
      static_cast<cublasLtHandle_t>(h.lt()), p.desc, &c.alpha, c.B, p.la, c.A, p.lb, &c.beta, c.C,
      p.lc, c.C, p.lc, &p.algo, h.workspace(), h.workspace_bytes(), stream);
  if (run == CUBLAS_STATUS_NOT_SUPPORTED) {  // checked before any work is enqueued
    p.ok = false;                            // the fallback from now on, without asking again
    return false;
  }
  LOOM_CUBLAS_CHECK(run);
  return true;
}

}  // namespace loom::cuda
