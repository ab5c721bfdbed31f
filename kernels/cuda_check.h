// Host-only CUDA/cuBLAS error checks throwing loom::cuda::CudaError (usable from g++ .cpp files).
#pragma once
#include <cuda_runtime_api.h>

#include <stdexcept>

namespace loom::cuda {

// A failed CUDA or cuBLAS call, or a broken argument contract of a cuda kernel's host wrapper.
// The message carries file:line, the call and the device. (kernels/ depends on nothing else of
// loom, so this is its own type; callers treat it like any internal error.)
class CudaError : public std::runtime_error {
 public:
  explicit CudaError(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
// Throw CudaError "file:line: CUDA call 'call' failed: name (code): text [on device d: name]".
[[noreturn]] void cuda_failed(const char* call, const char* file, int line, int err);
[[noreturn]] void cublas_failed(const char* call, const char* file, int line, int status);
// Throw CudaError "file:line: what" (argument checks of the host wrappers).
[[noreturn]] void check_failed(const char* file, int line, const char* what);
}  // namespace detail
}  // namespace loom::cuda

#define LOOM_CUDA_CHECK(call)                                                       \
  do {                                                                              \
    const cudaError_t loom_err_ = (call);                                           \
    if (loom_err_ != cudaSuccess)                                                   \
      ::loom::cuda::detail::cuda_failed(#call, __FILE__, __LINE__, (int)loom_err_); \
  } while (0)

// After a kernel launch: reports launch-configuration errors (not asynchronous faults).
#define LOOM_CUDA_CHECK_LAUNCH() LOOM_CUDA_CHECK(cudaGetLastError())

#define LOOM_CUBLAS_CHECK(call)                                                                  \
  do {                                                                                           \
    const int loom_st_ = (int)(call);                                                            \
    if (loom_st_ != 0) ::loom::cuda::detail::cublas_failed(#call, __FILE__, __LINE__, loom_st_); \
  } while (0)

#define LOOM_CUDA_REQUIRE(cond, what)                                          \
  do {                                                                         \
    if (!(cond)) ::loom::cuda::detail::check_failed(__FILE__, __LINE__, what); \
  } while (0)
