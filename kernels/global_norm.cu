// Sum of squares (deterministic two-pass block reduction in double) and in-place scaling, cuda
// twin.
#include "kernels/cuda_common.cuh"
#include "kernels/global_norm.h"

namespace loom::cuda {
namespace {

constexpr int kBlock = 256;
constexpr int kFinalBlock = 1024;
static_assert(kSumSquaresPartials == kFinalBlock, "the final pass gives one thread per partial");

// Pass 1: block b writes partials[b] = sum over its grid-stride share of x^2 (sq) or x, in
// double.
template <int V>
__global__ void sum_partial_kernel(double* partials, const float* x, size_t npacks, bool sq) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  double s = 0.0;
  for (size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x; q < npacks; q += stride) {
    float xv[V];
    load_f<V>(x + q * V, xv);
#pragma unroll
    for (int k = 0; k < V; k++) {
      const double d = (double)xv[k];
      s += sq ? d * d : d;
    }
  }
  s = block_sum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

// Pass 2 (one block of kFinalBlock threads): acc[0] += the sum of the nparts partials.
__global__ void sum_final_kernel(double* acc, const double* partials, int nparts) {
  double s = (int)threadIdx.x < nparts ? partials[threadIdx.x] : 0.0;
  s = block_sum(s);
  if (threadIdx.x == 0) acc[0] += s;
}

struct Scale {
  float s;
  __device__ float operator()(float x, float) const { return x * s; }
};

void sum(bool sq, double* acc, const float* x, size_t n, double* partials, void* stream) {
  if (n == 0) return;
  const bool vec = n % 4 == 0 && aligned16(x);
  const size_t npacks = vec ? n / 4 : n;
  // The grid depends on n only (never on the device), so the summation order is fixed.
  size_t blocks = (npacks + (size_t)kBlock * 4 - 1) / ((size_t)kBlock * 4);
  if (blocks > (size_t)kSumSquaresPartials) blocks = kSumSquaresPartials;
  if (blocks == 0) blocks = 1;
  cudaStream_t s = as_stream(stream);
  if (vec) {
    LOOM_LAUNCH(sum_partial_kernel<4>, (unsigned)blocks, kBlock, 0, s)(partials, x, npacks, sq);
  } else {
    LOOM_LAUNCH(sum_partial_kernel<1>, (unsigned)blocks, kBlock, 0, s)(partials, x, npacks, sq);
  }
  LOOM_CUDA_CHECK_LAUNCH();
  LOOM_LAUNCH(sum_final_kernel, 1, kFinalBlock, 0, s)(acc, partials, (int)blocks);
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void sum_squares(double* acc, const float* x, size_t n, double* partials, void* stream) {
  sum(true, acc, x, n, partials, stream);
}
void sum_values(double* acc, const float* x, size_t n, double* partials, void* stream) {
  sum(false, acc, x, n, partials, stream);
}

void scale_inplace(float* x, float s, size_t n, void* stream) {
  launch_map2(x, (const float*)x, (const float*)nullptr, n, Scale{s}, as_stream(stream));
}

}  // namespace loom::cuda
