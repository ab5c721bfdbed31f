// Buffer: one owning, 64-byte aligned allocation; every activation and parameter is allocated
// once at start-up (a stage's arenas are planned in layout/stage_memory.h).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace loom {

// p moved on by `bytes` bytes: tensors of any dtype (or on a device) are offset in bytes.
inline char* byte_at(void* p, size_t bytes) { return static_cast<char*>(p) + bytes; }
inline const char* byte_at(const void* p, size_t bytes) {
  return static_cast<const char*>(p) + bytes;
}

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

}  // namespace loom
