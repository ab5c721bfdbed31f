// Rotary position embedding cuda twin: one thread per rotated pair, fp32/bf16/fp16 storage.
#include "kernels/cuda_common.cuh"
#include "kernels/rope.h"

namespace loom::cuda {
namespace {

constexpr int kBlock = 256;

// cos, sin (T, D/2) from double angles, one thread per entry.
__global__ void rope_table_kernel(float* cos, float* sin, int T, int D, double log_theta) {
  const int half = D / 2;
  const size_t n = (size_t)T * half, stride = (size_t)gridDim.x * blockDim.x;
  for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += stride) {
    const int t = (int)(j / half), i = (int)(j % half);
    const double a = (double)t * exp(-2.0 * i / (double)D * log_theta);
    cos[j] = (float)::cos(a);
    sin[j] = (float)::sin(a);
  }
}

// Pair (i, i + D/2) of q/k head h of row bt, one thread each; sign -1 rotates backwards.
template <typename T>
__global__ void rope_kernel(T* x, const float* cos, const float* sin, int B, int T_, int NH,
                            int NKV, int D, float sign) {
  const int half = D / 2, heads = NH + NKV;
  const size_t row = (size_t)(NH + 2 * NKV) * D;
  const size_t n = (size_t)B * T_ * heads * half, stride = (size_t)gridDim.x * blockDim.x;
  for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += stride) {
    const int i = (int)(j % half);
    const size_t rest = j / half;
    const int h = (int)(rest % heads);
    const size_t bt = rest / heads;
    const int t = (int)(bt % T_);
    T* v = x + bt * row + (size_t)h * D;
    const float c = cos[(size_t)t * half + i], s = sign * sin[(size_t)t * half + i];
    const float a = to_f32(v[i]), b = to_f32(v[i + half]);
    v[i] = from_f32<T>(a * c - b * s);
    v[i + half] = from_f32<T>(b * c + a * s);
  }
}

void check(int B, int T, int NH, int NKV, int D) {
  LOOM_CUDA_REQUIRE(B >= 0 && T >= 0 && NH > 0 && NKV > 0 && D > 0 && D % 2 == 0,
                    "rope: need B, T >= 0, NH, NKV > 0 and an even head size D");
}

template <typename H>
void rotate(H* x, const float* cos, const float* sin, int B, int T, int NH, int NKV, int D,
            float sign, void* stream) {
  check(B, T, NH, NKV, D);
  const size_t n = (size_t)B * T * (NH + NKV) * (D / 2);
  if (n == 0) return;
  LOOM_LAUNCH(rope_kernel<dev_t<H>>, grid_for(n, kBlock), kBlock, 0, as_stream(stream))
  (dev_ptr(x), cos, sin, B, T, NH, NKV, D, sign);
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void rope_table(float* cos, float* sin, int T, int D, float theta, void* stream) {
  LOOM_CUDA_REQUIRE(T >= 0 && D > 0 && D % 2 == 0 && theta > 0.0f,
                    "rope_table: need T >= 0, an even head size D and theta > 0");
  const size_t n = (size_t)T * (D / 2);
  if (n == 0) return;
  LOOM_LAUNCH(rope_table_kernel, grid_for(n, kBlock), kBlock, 0, as_stream(stream))
  (cos, sin, T, D, std::log((double)theta));
  LOOM_CUDA_CHECK_LAUNCH();
}

void rope_forward(float* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                  int D, void* stream) {
  rotate(qkv, cos, sin, B, T, NH, NKV, D, 1.0f, stream);
}
void rope_forward(bf16* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                  int D, void* stream) {
  rotate(qkv, cos, sin, B, T, NH, NKV, D, 1.0f, stream);
}
void rope_forward(f16* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                  int D, void* stream) {
  rotate(qkv, cos, sin, B, T, NH, NKV, D, 1.0f, stream);
}
void rope_backward(float* dqkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                   int D, void* stream) {
  rotate(dqkv, cos, sin, B, T, NH, NKV, D, -1.0f, stream);
}
void rope_backward(bf16* dqkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                   int D, void* stream) {
  rotate(dqkv, cos, sin, B, T, NH, NKV, D, -1.0f, stream);
}
void rope_backward(f16* dqkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                   int D, void* stream) {
  rotate(dqkv, cos, sin, B, T, NH, NKV, D, -1.0f, stream);
}

}  // namespace loom::cuda
