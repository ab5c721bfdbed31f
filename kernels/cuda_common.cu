// CUDA backend basics: error reporting, device discovery, and the fp32 <-> bf16/fp16 cast kernels.
#include <mutex>
#include <sstream>
#include <string>

#include "kernels/cublas_api.cuh"
#include "kernels/cuda_common.cuh"

namespace loom::cuda {
namespace detail {
namespace {

std::string current_device() {
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();  // clear; the original error is the one reported
    return "unknown device";
  }
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    cudaGetLastError();
    return "device " + std::to_string(dev);
  }
  return "device " + std::to_string(dev) + " (" + prop.name + ")";
}

}  // namespace

void cuda_failed(const char* call, const char* file, int line, int err) {
  const cudaError_t e = (cudaError_t)err;
  std::ostringstream os;
  os << file << ":" << line << ": CUDA call '" << call << "' failed: " << cudaGetErrorName(e)
     << " (" << err << "): " << cudaGetErrorString(e) << " on " << current_device();
  throw CudaError(os.str());
}

void cublas_failed(const char* call, const char* file, int line, int status) {
  std::ostringstream os;
  os << file << ":" << line << ": cuBLAS call '" << call
     << "' failed: " << cublaslt().cublasLtGetStatusName((cublasStatus_t)status) << " (" << status
     << "): " << cublaslt().cublasLtGetStatusString((cublasStatus_t)status) << " on "
     << current_device();
  throw CudaError(os.str());
}

void check_failed(const char* file, int line, const char* what) {
  std::ostringstream os;
  os << file << ":" << line << ": " << what;
  throw CudaError(os.str());
}

}  // namespace detail

namespace {

struct Availability {
  bool ok = false;
  std::string reason;
};

Availability probe() {
  Availability a;
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaErrorInsufficientDriver || e == cudaErrorStubLibrary || e == cudaErrorNoDevice) {
    cudaGetLastError();
    a.reason = std::string("no usable CUDA device: ") + cudaGetErrorName(e) + " (" +
               cudaGetErrorString(e) + ")";
    return a;
  }
  LOOM_CUDA_CHECK(e);
  if (count == 0) {
    a.reason = "no CUDA device";
    return a;
  }
  for (int d = 0; d < count; d++) {
    cudaDeviceProp prop;
    LOOM_CUDA_CHECK(cudaGetDeviceProperties(&prop, d));
    if (prop.major >= 8) {
      a.ok = true;
      return a;
    }
  }
  a.reason = "no CUDA device of compute capability 8.0 or newer (loom is built for sm_80, sm_90)";
  return a;
}

const Availability& availability() {
  static std::once_flag once;
  static Availability a;
  std::call_once(once, [] { a = probe(); });
  return a;
}

}  // namespace

bool cuda_available() { return availability().ok; }

bool is_device_pointer(const void* p) {
  if (p == nullptr || !cuda_available()) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // plain host memory on old drivers: clear the sticky-free error
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

std::string cuda_unavailable_reason() { return availability().reason; }

std::string device_description(int device) {
  cudaDeviceProp prop;
  LOOM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  std::ostringstream os;
  os.precision(1);
  os << std::fixed << "device " << device << ": " << prop.name << ", sm_" << prop.major
     << prop.minor << ", " << prop.multiProcessorCount << " SMs, "
     << (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0) << " GiB";
  return os.str();
}

// ---- casts ----------------------------------------------------------------------------
namespace {

constexpr int kBlock = 256;

// Two adjacent elements <-> a float2, through the paired types (one 32-bit access). Both paired
// conversions round each element to nearest even, as the scalar ones.
__device__ __forceinline__ void store2(__nv_bfloat16* o, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(o) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void store2(__half* o, float a, float b) {
  *reinterpret_cast<__half2*>(o) = __floats2half2_rn(a, b);
}
__device__ __forceinline__ float2 load2(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}
__device__ __forceinline__ float2 load2(const __half* p) {
  return __half22float2(*reinterpret_cast<const __half2*>(p));
}

// Four elements per thread and step: four floats are one 128-bit load, four 16-bit values one
// 64-bit store (two pairs). vec: every pointer 16-byte aligned (else scalar). T: __nv_bfloat16
// or __half.
template <typename T>
__global__ void cast_from_f32_kernel(T* out, const float* in, size_t n, bool vec) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  size_t done = 0;
  if (vec) {
    const size_t nq = n / 4;
    for (size_t q = i; q < nq; q += stride) {
      const float4 x = reinterpret_cast<const float4*>(in)[q];
      store2(out + 4 * q, x.x, x.y);
      store2(out + 4 * q + 2, x.z, x.w);
    }
    done = nq * 4;
  }
  for (size_t j = done + i; j < n; j += stride) out[j] = from_f32<T>(in[j]);
}

template <typename T>
__global__ void cast_to_f32_kernel(float* out, const T* in, size_t n, bool vec) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  size_t done = 0;
  if (vec) {
    const size_t nq = n / 4;
    for (size_t q = i; q < nq; q += stride) {
      const float2 a = load2(in + 4 * q), b = load2(in + 4 * q + 2);
      reinterpret_cast<float4*>(out)[q] = make_float4(a.x, a.y, b.x, b.y);
    }
    done = nq * 4;
  }
  for (size_t j = done + i; j < n; j += stride) out[j] = to_f32(in[j]);
}

template <typename H>
void cast_from_f32(H* out, const float* in, size_t n, void* stream) {
  if (n == 0) return;
  const bool vec = aligned16(out) && aligned16(in);
  LOOM_LAUNCH(cast_from_f32_kernel, grid_for(vec ? n / 4 : n, kBlock), kBlock, 0, as_stream(stream))
  (dev_ptr(out), in, n, vec);
  LOOM_CUDA_CHECK_LAUNCH();
}

template <typename H>
void cast_to_f32(float* out, const H* in, size_t n, void* stream) {
  if (n == 0) return;
  const bool vec = aligned16(out) && aligned16(in);
  LOOM_LAUNCH(cast_to_f32_kernel, grid_for(vec ? n / 4 : n, kBlock), kBlock, 0, as_stream(stream))
  (out, dev_ptr(in), n, vec);
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void cast_f32_to_bf16(bf16* out, const float* in, size_t n, void* stream) {
  cast_from_f32(out, in, n, stream);
}
void cast_bf16_to_f32(float* out, const bf16* in, size_t n, void* stream) {
  cast_to_f32(out, in, n, stream);
}
void cast_f32_to_f16(f16* out, const float* in, size_t n, void* stream) {
  cast_from_f32(out, in, n, stream);
}
void cast_f16_to_f32(float* out, const f16* in, size_t n, void* stream) {
  cast_to_f32(out, in, n, stream);
}

}  // namespace loom::cuda
