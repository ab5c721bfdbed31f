// Buffer: one owning, 64-byte aligned allocation. Arena: carves tensors out of a Buffer,
// so every activation and parameter is allocated once at start-up.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace loom {

class Buffer {
 public:
  Buffer() = default;
  Buffer(size_t bytes, Device device);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  void zero();

 private:
  void release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_ = Device::CPU;
};

// Two passes: reserve() every tensor's size (returns its offset), allocate(), then tensor(offset).
class Arena {
 public:
  explicit Arena(Device device = Device::CPU) : device_(device) {}
  size_t reserve(size_t bytes);  // aligned to 64 bytes
  void allocate();
  size_t bytes() const { return size_; }
  Tensor tensor(size_t offset, DType t, std::initializer_list<int64_t> dims) const;
  Buffer& buffer() { return buf_; }

 private:
  Device device_;
  size_t size_ = 0;
  Buffer buf_;
};

}  // namespace loom
