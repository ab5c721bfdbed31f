// Residual add and gradient accumulation, cuda twin (elementwise, 128-bit packs, fp32/bf16/fp16).
#include "kernels/cuda_common.cuh"
#include "kernels/residual.h"

namespace loom::cuda {
namespace {

struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};

template <typename T>
void add(T* out, const T* a, const T* b, size_t n, void* stream) {
  launch_map2(dev_ptr(out), dev_ptr(a), dev_ptr(b), n, Add{}, as_stream(stream));
}

}  // namespace

void residual_forward(float* out, const float* a, const float* b, size_t n, void* stream) {
  add(out, a, b, n, stream);
}
void residual_forward(bf16* out, const bf16* a, const bf16* b, size_t n, void* stream) {
  add(out, a, b, n, stream);
}
void residual_forward(f16* out, const f16* a, const f16* b, size_t n, void* stream) {
  add(out, a, b, n, stream);
}
void add_inplace(float* acc, const float* x, size_t n, void* stream) {
  add(acc, acc, x, n, stream);
}
void add_inplace(bf16* acc, const bf16* x, size_t n, void* stream) { add(acc, acc, x, n, stream); }
void add_inplace(f16* acc, const f16* x, size_t n, void* stream) { add(acc, acc, x, n, stream); }

}  // namespace loom::cuda
