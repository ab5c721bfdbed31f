// Aligned host allocations and cudaMalloc'd device allocations (CUDA builds).
#include "core/buffer.h"
#include "core/check.h"

#include <cstdlib>
#include <cstring>

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace loom {

Buffer::Buffer(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  if (bytes == 0) return;
  if (device == Device::CUDA) {
#ifdef LOOM_HAVE_CUDA
    const cudaError_t err = cudaMalloc(&data_, bytes);
    if (err != cudaSuccess) {
      size_t free_b = 0, total_b = 0;
      cudaGetLastError();
      cudaMemGetInfo(&free_b, &total_b);
      throw UserError(str("out of GPU memory allocating ", bytes, " bytes (", free_b,
                          " bytes free of ", total_b, "): ", cudaGetErrorString(err),
                          "; lower parallel.micro_batch_size, raise zero_stage or use "
                          "train.recompute"));
    }
    return;
#else
    throw InternalError("cuda buffer requested in a build without CUDA");
#endif
  }
  size_t rounded = (bytes + 63) / 64 * 64;
  data_ = std::aligned_alloc(64, rounded);
  LOOM_CHECK(data_ != nullptr, "out of host memory allocating ", bytes, " bytes");
}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_), device_(o.device_) {
  o.data_ = nullptr;
  o.bytes_ = 0;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = o.data_;
    bytes_ = o.bytes_;
    device_ = o.device_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void Buffer::release() {
#ifdef LOOM_HAVE_CUDA
  if (device_ == Device::CUDA) {
    if (data_) cudaFree(data_);
    data_ = nullptr;
    bytes_ = 0;
    return;
  }
#endif
  std::free(data_);
  data_ = nullptr;
  bytes_ = 0;
}

void Buffer::zero() {
  if (!data_) return;
#ifdef LOOM_HAVE_CUDA
  if (device_ == Device::CUDA) {
    // Start-up only (kernels use the backend's stream): complete before anything else runs.
    cudaError_t err = cudaMemset(data_, 0, bytes_);
    if (err == cudaSuccess) err = cudaDeviceSynchronize();
    LOOM_CHECK(err == cudaSuccess, "cudaMemset of ", bytes_, " bytes: ", cudaGetErrorString(err));
    return;
  }
#endif
  std::memset(data_, 0, bytes_);
}

}  // namespace loom
