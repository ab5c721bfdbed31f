// Tensor views: shapes, slicing of leading rows, reshaping.
#include "core/tensor.h"

namespace loom {

Tensor::Tensor(void* p, DType t, Device d, std::initializer_list<int64_t> dims)
    : data(p), dtype(t), device(d), ndim(int(dims.size())) {
  LOOM_CHECK(dims.size() >= 1 && dims.size() <= 4, "tensor rank ", dims.size(), " not in [1,4]");
  int i = 0;
  for (int64_t v : dims) {
    LOOM_CHECK(v >= 0, "negative dimension ", v);
    shape[i++] = v;
  }
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return ndim == 0 ? 0 : n;
}

std::string Tensor::shape_str() const {
  std::string s = "(";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

Tensor Tensor::rows(int64_t r0, int64_t n) const {
  LOOM_CHECK(ndim >= 1 && r0 >= 0 && r0 + n <= shape[0], "rows [", r0, ", ", r0 + n,
             ") out of ", shape_str());
  Tensor t = *this;
  t.shape[0] = n;
  t.data = static_cast<char*>(data) + size_t(r0) * (nbytes() / size_t(shape[0] ? shape[0] : 1));
  return t;
}

Tensor Tensor::view(std::initializer_list<int64_t> dims) const {
  Tensor t(data, dtype, device, dims);
  LOOM_CHECK(t.numel() == numel(), "view ", t.shape_str(), " of ", shape_str());
  return t;
}

}  // namespace loom
