// GELU (tanh approximation) cuda twin: elementwise forward and backward, fp32/bf16/fp16 storage.
#include "kernels/cuda_common.cuh"
#include "kernels/gelu.h"

namespace loom::cuda {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCoef = 0.044715f;

// e^{-2u} with the exponent clamped to [-80, 80] as the cpu twin's exp_clamped: finite, so
// e * s below never becomes inf * 0.
__device__ __forceinline__ float exp_m2u(float u) {
  return expf(fminf(fmaxf(-2.0f * u, -80.0f), 80.0f));
}

// 0.5 x (1 + tanh(u)) = x * sigmoid(2u) = x / (1 + e^{-2u}), u = sqrt(2/pi) (x + 0.044715 x^3).
struct GeluForward {
  __device__ float operator()(float x, float) const {
    const float u = kSqrt2OverPi * (x + kCoef * x * x * x);
    return x / (1.0f + exp_m2u(u));
  }
};

// d/dx = s (1 + 2 x e s u'), s = sigmoid(2u), e = e^{-2u}; times the incoming gradient g.
struct GeluBackward {
  __device__ float operator()(float x, float g) const {
    const float u = kSqrt2OverPi * (x + kCoef * x * x * x);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCoef * x * x);
    const float e = exp_m2u(u);
    const float s = 1.0f / (1.0f + e);
    return s * (1.0f + 2.0f * x * e * s * du) * g;
  }
};

template <typename T>
void forward(T* out, const T* inp, size_t n, void* stream) {
  launch_map2(dev_ptr(out), dev_ptr(inp), (const dev_t<T>*)nullptr, n, GeluForward{},
              as_stream(stream));
}

template <typename T>
void backward(T* dinp, const T* inp, const T* dout, size_t n, void* stream) {
  launch_map2(dev_ptr(dinp), dev_ptr(inp), dev_ptr(dout), n, GeluBackward{}, as_stream(stream));
}

}  // namespace

void gelu_forward(float* out, const float* inp, size_t n, void* stream) {
  forward(out, inp, n, stream);
}
void gelu_forward(bf16* out, const bf16* inp, size_t n, void* stream) {
  forward(out, inp, n, stream);
}
void gelu_forward(f16* out, const f16* inp, size_t n, void* stream) {
  forward(out, inp, n, stream);
}
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n, void* stream) {
  backward(dinp, inp, dout, n, stream);
}
void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, size_t n, void* stream) {
  backward(dinp, inp, dout, n, stream);
}
void gelu_backward(f16* dinp, const f16* inp, const f16* dout, size_t n, void* stream) {
  backward(dinp, inp, dout, n, stream);
}

}  // namespace loom::cuda
