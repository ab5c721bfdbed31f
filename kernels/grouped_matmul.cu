// Grouped GEMMs over expert segments, cuda twin: cublasGemmGroupedBatchedEx, one problem per
// segment, in column-major terms (a row-major (R, C) matrix is a column-major (C, R) one).
#include <cstring>

#include "kernels/cublas_api.cuh"
#include "kernels/cuda_check.h"
#include "kernels/cuda_common.cuh"
#include "kernels/grouped_matmul.h"
#include "kernels/matmul.h"

namespace loom::cuda {

namespace {

using cpu::GemmSegment;

// out rows of segment blockIdx.y += bias of its expert; threads across the OC columns.
__global__ void segment_bias_kernel(float* out, const float* bias, const int* segs, int OC) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= OC) return;
  const int row = segs[3 * blockIdx.y], rows = segs[3 * blockIdx.y + 1],
            e = segs[3 * blockIdx.y + 2];
  const float b = bias[(size_t)e * OC + c];
  for (int r = 0; r < rows; ++r) out[(size_t)(row + r) * OC + c] += b;
}

// One grouped call of P problems (a group of one problem each: their n or k differ) sharing
// transposes, m or n, and scalars; ptrs holds A, B, C pointers (3 x P) for the device arrays.
struct Problems {
  std::vector<int> m, n, k, lda, ldb, ldc;
  std::vector<const void*> a, b;
  std::vector<void*> c;
  void add(int m_, int n_, int k_, int lda_, int ldb_, int ldc_, const void* a_, const void* b_,
           void* c_) {
    m.push_back(m_), n.push_back(n_), k.push_back(k_);
    lda.push_back(lda_), ldb.push_back(ldb_), ldc.push_back(ldc_);
    a.push_back(a_), b.push_back(b_), c.push_back(c_);
  }
};

void run(GroupedGemm& g, const Problems& p, bool ta, bool tb, float beta, void* stream) {
  const int P = int(p.a.size());
  if (P == 0) return;
  // The three pointer arrays, one upload.
  std::vector<const void*> host(3 * size_t(P));
  for (int i = 0; i < P; ++i) host[size_t(i)] = p.a[size_t(i)];
  for (int i = 0; i < P; ++i) host[size_t(P + i)] = p.b[size_t(i)];
  for (int i = 0; i < P; ++i) host[size_t(2 * P + i)] = p.c[size_t(i)];
  auto* dev = static_cast<void**>(g.upload(host.data(), host.size() * sizeof(void*), stream));
  const std::vector<cublasOperation_t> opa(size_t(P), ta ? CUBLAS_OP_T : CUBLAS_OP_N),
      opb(size_t(P), tb ? CUBLAS_OP_T : CUBLAS_OP_N);
  const std::vector<float> alpha(size_t(P), 1.0f), betas(size_t(P), beta);
  const std::vector<int> sizes(size_t(P), 1);
  auto h = static_cast<cublasHandle_t>(g.blas());
  LOOM_CUBLAS_CHECK(cublas().cublasSetStream(h, as_stream(stream)));
  LOOM_CUBLAS_CHECK(cublas().cublasGemmGroupedBatchedEx(
      h, opa.data(), opb.data(), p.m.data(), p.n.data(), p.k.data(), alpha.data(),
      const_cast<const void* const*>(dev), CUDA_R_32F, p.lda.data(),
      const_cast<const void* const*>(dev + P), CUDA_R_32F, p.ldb.data(), betas.data(), dev + 2 * P,
      CUDA_R_32F, p.ldc.data(), P, sizes.data(), CUBLAS_COMPUTE_32F));
}

}  // namespace

GroupedGemm::GroupedGemm() {
  cublasHandle_t h = nullptr;
  LOOM_CUBLAS_CHECK(cublas().cublasCreate(&h));
  blas_ = h;
}

GroupedGemm::~GroupedGemm() {  // teardown: errors ignored (no throw)
  if (blas_) cublas().cublasDestroy(static_cast<cublasHandle_t>(blas_));
  if (dev_) cudaFree(dev_);
}

void* GroupedGemm::upload(const void* host, size_t bytes, void* stream) {
  if (bytes > cap_) {  // grows in the first step; the old array may still be read by the stream
    LOOM_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream)));
    if (dev_) LOOM_CUDA_CHECK(cudaFree(dev_));
    dev_ = nullptr;
    LOOM_CUDA_CHECK(cudaMalloc(&dev_, bytes));
    cap_ = bytes;
  }
  // From pageable memory: the call returns once the bytes are staged, so `host` may go.
  LOOM_CUDA_CHECK(cudaMemcpyAsync(dev_, host, bytes, cudaMemcpyHostToDevice, as_stream(stream)));
  return dev_;
}

void grouped_matmul_forward(GroupedGemm& g, float* out, const float* inp, const float* w,
                            const float* bias, const std::vector<GemmSegment>& segs, int IC, int OC,
                            void* stream) {
  if (segs.empty()) return;
  // out_e^T (OC, rows) = w_e^T (OC, IC) inp^T (IC, rows): column-major, no transposes.
  const size_t wsize = size_t(IC) * OC;
  Problems p;
  for (const GemmSegment& s : segs)
    p.add(OC, s.rows, IC, OC, IC, OC, w + s.expert * wsize, inp + size_t(s.row) * IC,
          out + size_t(s.row) * OC);
  run(g, p, false, false, 0.0f, stream);
  if (!bias) return;
  std::vector<int> table;
  for (const GemmSegment& s : segs) table.insert(table.end(), {s.row, s.rows, s.expert});
  const int* dsegs =
      static_cast<const int*>(g.upload(table.data(), table.size() * sizeof(int), stream));
  const dim3 grid((unsigned)((OC + 255) / 256), (unsigned)segs.size());
  LOOM_LAUNCH(segment_bias_kernel, grid, 256, 0, as_stream(stream))(out, bias, dsegs, OC);
  LOOM_CUDA_CHECK_LAUNCH();
}

void grouped_matmul_backward(GroupedGemm& g, float* dinp, float* dw, float* dbias,
                             const float* dout, const float* inp, const float* w,
                             const std::vector<GemmSegment>& segs, int IC, int OC, void* stream) {
  if (segs.empty()) return;
  const size_t wsize = size_t(IC) * OC;
  if (dinp) {  // dinp^T (IC, rows) = w_e (IC, OC) dout^T (OC, rows): A is w_e^T stored, transposed
    Problems p;
    for (const GemmSegment& s : segs)
      p.add(IC, s.rows, OC, OC, OC, IC, w + s.expert * wsize, dout + size_t(s.row) * OC,
            dinp + size_t(s.row) * IC);
    run(g, p, true, false, 0.0f, stream);
  }
  // dw_e^T (OC, IC) += dout^T (OC, rows) inp (rows, IC). Segments of one expert would write the
  // same matrix from two problems of a call: each wave takes at most one segment per expert.
  std::vector<std::vector<GemmSegment>> waves;
  std::vector<int> seen;
  for (const GemmSegment& s : segs) {
    if (size_t(s.expert) >= seen.size()) seen.resize(size_t(s.expert) + 1, 0);
    const int wave = seen[size_t(s.expert)]++;
    if (size_t(wave) >= waves.size()) waves.resize(size_t(wave) + 1);
    waves[size_t(wave)].push_back(s);
  }
  for (const std::vector<GemmSegment>& wave : waves) {
    Problems p;
    for (const GemmSegment& s : wave)
      p.add(OC, IC, s.rows, OC, IC, OC, dout + size_t(s.row) * OC, inp + size_t(s.row) * IC,
            dw + s.expert * wsize);
    run(g, p, false, true, 1.0f, stream);
  }
  if (dbias)  // per segment, in order: deterministic, and one expert's sums add up in turn
    for (const GemmSegment& s : segs)
      bias_backward(dbias + size_t(s.expert) * OC, dout + size_t(s.row) * OC, s.rows, OC, stream);
}

}  // namespace loom::cuda
