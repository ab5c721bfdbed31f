// Tensor: a non-owning, contiguous, row-major view (pointer, dtype, device, shape up to 4-D).
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/check.h"
#include "core/dtype.h"

namespace loom {

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::F32;
  Device device = Device::CPU;
  int ndim = 0;
  std::array<int64_t, 4> shape{1, 1, 1, 1};

  Tensor() = default;
  Tensor(void* p, DType t, Device d, std::initializer_list<int64_t> dims);

  int64_t numel() const;
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }
  int64_t dim(int i) const { return shape[i < 0 ? ndim + i : i]; }
  bool empty() const { return data == nullptr; }
  std::string shape_str() const;

  float* f32() const {
    LOOM_CHECK(dtype == DType::F32, "tensor is ", dtype_name(dtype), ", not fp32");
    return static_cast<float*>(data);
  }
  int32_t* i32() const {
    LOOM_CHECK(dtype == DType::I32, "tensor is ", dtype_name(dtype), ", not int32");
    return static_cast<int32_t*>(data);
  }
  // Rows [r0, r0+n) of dimension 0, same trailing shape.
  Tensor rows(int64_t r0, int64_t n) const;
  // The same memory seen with another shape of equal numel.
  Tensor view(std::initializer_list<int64_t> dims) const;
};

}  // namespace loom
