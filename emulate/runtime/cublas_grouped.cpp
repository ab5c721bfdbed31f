// CUDA emulator: the subset of cuBLAS (not Lt) that loom uses: a handle bound to a stream, and
// cublasGemmGroupedBatchedEx, each of its problems computed by the cuBLASLt emulation's
// arithmetic and operand checks. Anything else (other pointer modes, types, graph capture) is
// refused with a message.
#include <cublas_v2.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cublaslt_impl.h"
#include "state.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace loom_emu::rt {
namespace {

cublasStatus_t refuse_blas(cublasStatus_t st, const std::string& why) {
  std::fprintf(stderr, "loom CUDA emulator: cuBLAS: %s\n", why.c_str());
  return st;
}

bool grouped_types(cudaDataType a, cudaDataType b, cudaDataType c, cublasComputeType_t compute) {
  if (a != b) return false;
  if (compute == CUBLAS_COMPUTE_32F_FAST_TF32) return a == CUDA_R_32F && c == CUDA_R_32F;
  if (compute != CUBLAS_COMPUTE_32F) return false;
  if (a == CUDA_R_32F) return c == CUDA_R_32F;
  return (a == CUDA_R_16BF || a == CUDA_R_16F) && (c == a || c == CUDA_R_32F);
}

}  // namespace
}  // namespace loom_emu::rt

using namespace loom_emu::rt;

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

// Groups g = 0..group_count-1 of group_size[g] problems each, sharing the group's shapes and
// (host) scalars; the problems' operand pointers are read from the device arrays in order.
cublasStatus_t cublasGemmGroupedBatchedEx(
    cublasHandle_t handle, const cublasOperation_t transa_array[],
    const cublasOperation_t transb_array[], const int m_array[], const int n_array[],
    const int k_array[], const void* alpha_array, const void* const Aarray[], cudaDataType_t Atype,
    const int lda_array[], const void* const Barray[], cudaDataType_t Btype, const int ldb_array[],
    const void* beta_array, void* const Carray[], cudaDataType_t Ctype, const int ldc_array[],
    int group_count, const int group_size[], cublasComputeType_t computeType) {
  LOOM_EMU_LOCK;
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (sticky() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  if (group_count < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (!valid_stream(handle->stream))
    return refuse_blas(CUBLAS_STATUS_INVALID_VALUE, "invalid stream");
  if (capturing(handle->stream))
    return refuse_blas(CUBLAS_STATUS_NOT_SUPPORTED,
                       "cublasGemmGroupedBatchedEx under graph capture is not emulated");
  if (!grouped_types(Atype, Btype, Ctype, computeType))
    return refuse_blas(CUBLAS_STATUS_NOT_SUPPORTED, "type combination not emulated");
  int problems = 0;
  for (int g = 0; g < group_count; ++g) {
    if (group_size[g] < 0) return CUBLAS_STATUS_INVALID_VALUE;
    problems += group_size[g];
  }
  // The pointer arrays live in device memory, as on a GPU.
  for (const void* arr : {(const void*)Aarray, (const void*)Barray, (const void*)Carray})
    if (problems > 0 && !device_range_ok(arr, size_t(problems) * sizeof(void*)))
      return refuse_blas(CUBLAS_STATUS_INVALID_VALUE,
                         "a pointer array is not device memory of one pointer per problem");
  // The problems' operand pointers, read as the GPU would read them: from device memory.
  const size_t count = static_cast<size_t>(problems);
  std::vector<const void*> As(count), Bs(count);
  std::vector<void*> Cs(count);
  {
    DeviceWindow window;
    for (int q = 0; q < problems; ++q)
      As[size_t(q)] = Aarray[q], Bs[size_t(q)] = Barray[q], Cs[size_t(q)] = Carray[q];
  }
  // Problems run concurrently on a GPU: two that write overlapping C have no defined result.
  {
    std::vector<std::pair<uintptr_t, uintptr_t>> spans;
    int q = 0;
    for (int g = 0; g < group_count; ++g)
      for (int i = 0; i < group_size[g]; ++i, ++q) {
        if (m_array[g] == 0 || n_array[g] == 0) continue;
        const uintptr_t lo = reinterpret_cast<uintptr_t>(Cs[size_t(q)]);
        const size_t bytes = (size_t(n_array[g] - 1) * size_t(ldc_array[g]) + size_t(m_array[g])) *
                             type_bytes(Ctype);
        spans.push_back({lo, lo + bytes});
      }
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i)
      if (spans[i].first < spans[i - 1].second)
        return refuse_blas(
            CUBLAS_STATUS_INVALID_VALUE,
            "two problems of one grouped call write overlapping C (a race on a GPU)");
  }
  const float* alphas = static_cast<const float*>(alpha_array);
  const float* betas = static_cast<const float*>(beta_array);
  int p = 0;
  for (int g = 0; g < group_count; ++g) {
    const int m = m_array[g], n = n_array[g], k = k_array[g];
    const bool ta = transa_array[g] != CUBLAS_OP_N, tb = transb_array[g] != CUBLAS_OP_N;
    if (m < 0 || n < 0 || k < 0 || lda_array[g] < (ta ? k : m) || ldb_array[g] < (tb ? n : k) ||
        ldc_array[g] < m || lda_array[g] < 1 || ldb_array[g] < 1 || ldc_array[g] < 1) {
      std::ostringstream os;
      os << "group " << g << ": m " << m << ", n " << n << ", k " << k << ", lda " << lda_array[g]
         << ", ldb " << ldb_array[g] << ", ldc " << ldc_array[g];
      return refuse_blas(CUBLAS_STATUS_INVALID_VALUE, os.str());
    }
    LtDesc desc;
    desc.compute = computeType;
    desc.scale = CUDA_R_32F;
    desc.trans_a = transa_array[g], desc.trans_b = transb_array[g];
    const LtLayout a{Atype, uint64_t(ta ? k : m), uint64_t(ta ? m : k), lda_array[g]};
    const LtLayout b{Btype, uint64_t(tb ? n : k), uint64_t(tb ? k : n), ldb_array[g]};
    const LtLayout c{Ctype, uint64_t(m), uint64_t(n), ldc_array[g]};
    for (int i = 0; i < group_size[g]; ++i, ++p) {
      if (m == 0 || n == 0) continue;
      const size_t q = size_t(p);
      LtCall call{desc,        a,           b,         c,        c,     uint64_t(m),
                  uint64_t(n), uint64_t(k), alphas[g], betas[g], As[q], Bs[q],
                  Cs[q],       Cs[q],       {},        nullptr,  0};
      execute(call);
      if (sticky() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
