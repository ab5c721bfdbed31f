// Aligned host allocations (cuda allocations arrive with the CUDA backend) and the arena.
#include "core/buffer.h"

#include <cstdlib>
#include <cstring>

namespace loom {

Buffer::Buffer(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  LOOM_CHECK(device == Device::CPU, "cuda buffers need the CUDA backend");
  if (bytes == 0) return;
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
  std::free(data_);
  data_ = nullptr;
  bytes_ = 0;
}

void Buffer::zero() {
  if (data_) std::memset(data_, 0, bytes_);
}

size_t Arena::reserve(size_t bytes) {
  LOOM_CHECK(buf_.data() == nullptr, "arena already allocated");
  size_t off = size_;
  size_ += (bytes + 63) / 64 * 64;
  return off;
}

void Arena::allocate() {
  buf_ = Buffer(size_, device_);
  buf_.zero();
}

Tensor Arena::tensor(size_t offset, DType t, std::initializer_list<int64_t> dims) const {
  LOOM_CHECK(buf_.data() != nullptr || size_ == 0, "arena not allocated");
  Tensor out(static_cast<char*>(buf_.data()) + offset, t, device_, dims);
  LOOM_CHECK(offset + out.nbytes() <= size_, "tensor ", out.shape_str(), " at ", offset,
             " overruns arena of ", size_, " bytes");
  return out;
}

}  // namespace loom
