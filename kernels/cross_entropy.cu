// Vocab-parallel softmax cross-entropy cuda twin: block-per-row statistics, loss, in-place
// backward.
#include "kernels/cross_entropy.h"
#include "kernels/cuda_common.cuh"

namespace loom::cuda {
namespace {

constexpr int kBlock = 256;

__device__ __forceinline__ int valid_cols(int Vl, int vstart, int V) {
  return min(max(V - vstart, 0), Vl);
}

// Row n of logits is visited in packs of VW columns starting at lane offsets; columns >= nv
// are padding and skipped. VW > 1 needs Vl % VW == 0 and a 16-byte aligned base.
template <int VW, typename T>
__global__ void ce_row_max_kernel(float* maxv, const T* logits, int Vl, int vstart, int V) {
  const int n = blockIdx.x, nv = valid_cols(Vl, vstart, V);
  const T* row = logits + (size_t)n * Vl;
  float mx = -INFINITY;
  for (int j = threadIdx.x * VW; j < nv; j += blockDim.x * VW) {
    float x[VW];
    load_f<VW>(row + j, x);
#pragma unroll
    for (int k = 0; k < VW; k++)
      if (j + k < nv) mx = fmaxf(mx, x[k]);
  }
  mx = block_max(mx);
  if (threadIdx.x == 0) maxv[n] = mx;
}

template <int VW, typename T>
__global__ void ce_row_sums_kernel(float* sums, const T* logits, const float* maxv,
                                   const int32_t* targets, int Vl, int vstart, int V) {
  const int n = blockIdx.x, nv = valid_cols(Vl, vstart, V);
  const T* row = logits + (size_t)n * Vl;
  const float mx = maxv[n];
  float s = 0.0f;
  for (int j = threadIdx.x * VW; j < nv; j += blockDim.x * VW) {
    float x[VW];
    load_f<VW>(row + j, x);
#pragma unroll
    for (int k = 0; k < VW; k++)
      if (j + k < nv) s += expf(x[k] - mx);
  }
  s = block_sum(s);
  if (threadIdx.x == 0) {
    const int tl = targets[n] - vstart;
    sums[2 * n] = s;
    sums[2 * n + 1] = (tl >= 0 && tl < nv) ? to_f32(row[tl]) : 0.0f;
  }
}

// Online max and sum in one pass (classifier_forward's statistics): each thread keeps its own
// (max, sum relative to it); the block combines them by rescaling to the block max.
template <int VW, typename T>
__global__ void ce_row_stats_kernel(float* maxv, float* sums, const T* logits,
                                    const int32_t* targets, int Vl, int vstart, int V) {
  const int n = blockIdx.x, nv = valid_cols(Vl, vstart, V);
  const T* row = logits + (size_t)n * Vl;
  float m = -INFINITY, s = 0.0f;
  for (int j = threadIdx.x * VW; j < nv; j += blockDim.x * VW) {
    float x[VW];
    load_f<VW>(row + j, x);
#pragma unroll
    for (int k = 0; k < VW; k++) {
      if (j + k >= nv) continue;
      if (x[k] > m) {
        s = (m == -INFINITY) ? 0.0f : s * expf(m - x[k]);
        m = x[k];
      }
      s += expf(x[k] - m);
    }
  }
  const float mb = block_max(m);
  s = (m == -INFINITY) ? 0.0f : s * expf(m - mb);
  s = block_sum(s);
  if (threadIdx.x == 0) {
    const int tl = targets[n] - vstart;
    maxv[n] = mb;
    sums[2 * n] = s;
    sums[2 * n + 1] = (tl >= 0 && tl < nv) ? to_f32(row[tl]) : 0.0f;
  }
}

__global__ void ce_rescale_sums_kernel(float* sums, const float* local_max, const float* global_max,
                                       int N) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  sums[2 * n] = local_max[n] == -INFINITY ? 0.0f : sums[2 * n] * expf(local_max[n] - global_max[n]);
}

__global__ void ce_loss_kernel(float* losses, const float* maxv, const float* sums, int N) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  losses[n] = logf(sums[2 * n]) + maxv[n] - sums[2 * n + 1];
}

// dlogits = (softmax - onehot) * dloss, 0 at padding; every element written once by one thread.
template <int VW, typename T>
__global__ void ce_backward_kernel(T* logits, const float* maxv, const float* sums,
                                   const int32_t* targets, float dloss, int Vl, int vstart, int V) {
  const int n = blockIdx.x, nv = valid_cols(Vl, vstart, V);
  T* row = logits + (size_t)n * Vl;
  const float mx = maxv[n], scale = dloss / sums[2 * n];
  const int tl = targets[n] - vstart;  // may fall outside [0, nv): no onehot in this shard
  for (int j = threadIdx.x * VW; j < Vl; j += blockDim.x * VW) {
    float x[VW];
    load_f<VW>(row + j, x);
#pragma unroll
    for (int k = 0; k < VW; k++) {
      const int col = j + k;
      float d = 0.0f;
      if (col < nv) {
        d = expf(x[k] - mx) * scale;
        if (col == tl) d -= dloss;
      }
      x[k] = d;
    }
    store_f<VW>(row + j, x);
  }
}

template <typename T>
bool rows_vec(const void* p, int Vl) {
  return Vl % Pack128<T>::kSize == 0 && aligned16(p);
}

template <typename H>
void row_max(float* maxv, const H* logits, int N, int Vl, int vstart, int V, void* stream) {
  using T = dev_t<H>;
  if (N <= 0) return;
  cudaStream_t s = as_stream(stream);
  if (rows_vec<T>(logits, Vl)) {
    LOOM_LAUNCH(ce_row_max_kernel<Pack128<T>::kSize>, N, kBlock, 0, s)
    (maxv, dev_ptr(logits), Vl, vstart, V);
  } else {
    LOOM_LAUNCH(ce_row_max_kernel<1>, N, kBlock, 0, s)(maxv, dev_ptr(logits), Vl, vstart, V);
  }
  LOOM_CUDA_CHECK_LAUNCH();
}

template <typename H>
void row_sums(float* sums, const H* logits, const float* maxv, const int32_t* targets, int N,
              int Vl, int vstart, int V, void* stream) {
  using T = dev_t<H>;
  if (N <= 0) return;
  cudaStream_t s = as_stream(stream);
  if (rows_vec<T>(logits, Vl)) {
    LOOM_LAUNCH(ce_row_sums_kernel<Pack128<T>::kSize>, N, kBlock, 0, s)
    (sums, dev_ptr(logits), maxv, targets, Vl, vstart, V);
  } else {
    LOOM_LAUNCH(ce_row_sums_kernel<1>, N, kBlock, 0, s)
    (sums, dev_ptr(logits), maxv, targets, Vl, vstart, V);
  }
  LOOM_CUDA_CHECK_LAUNCH();
}

template <typename H>
void row_stats(float* maxv, float* sums, const H* logits, const int32_t* targets, int N, int Vl,
               int vstart, int V, void* stream) {
  using T = dev_t<H>;
  if (N <= 0) return;
  cudaStream_t s = as_stream(stream);
  if (rows_vec<T>(logits, Vl)) {
    LOOM_LAUNCH(ce_row_stats_kernel<Pack128<T>::kSize>, N, kBlock, 0, s)
    (maxv, sums, dev_ptr(logits), targets, Vl, vstart, V);
  } else {
    LOOM_LAUNCH(ce_row_stats_kernel<1>, N, kBlock, 0, s)
    (maxv, sums, dev_ptr(logits), targets, Vl, vstart, V);
  }
  LOOM_CUDA_CHECK_LAUNCH();
}

template <typename H>
void backward(H* logits, const float* maxv, const float* sums, const int32_t* targets, float dloss,
              int N, int Vl, int vstart, int V, void* stream) {
  using T = dev_t<H>;
  if (N <= 0) return;
  cudaStream_t s = as_stream(stream);
  if (rows_vec<T>(logits, Vl)) {
    LOOM_LAUNCH(ce_backward_kernel<Pack128<T>::kSize>, N, kBlock, 0, s)
    (dev_ptr(logits), maxv, sums, targets, dloss, Vl, vstart, V);
  } else {
    LOOM_LAUNCH(ce_backward_kernel<1>, N, kBlock, 0, s)
    (dev_ptr(logits), maxv, sums, targets, dloss, Vl, vstart, V);
  }
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void ce_row_max(float* maxv, const float* logits, int N, int Vl, int vstart, int V, void* stream) {
  row_max(maxv, logits, N, Vl, vstart, V, stream);
}
void ce_row_max(float* maxv, const bf16* logits, int N, int Vl, int vstart, int V, void* stream) {
  row_max(maxv, logits, N, Vl, vstart, V, stream);
}
void ce_row_max(float* maxv, const f16* logits, int N, int Vl, int vstart, int V, void* stream) {
  row_max(maxv, logits, N, Vl, vstart, V, stream);
}
void ce_row_sums(float* sums, const float* logits, const float* maxv, const int32_t* targets, int N,
                 int Vl, int vstart, int V, void* stream) {
  row_sums(sums, logits, maxv, targets, N, Vl, vstart, V, stream);
}
void ce_row_sums(float* sums, const bf16* logits, const float* maxv, const int32_t* targets, int N,
                 int Vl, int vstart, int V, void* stream) {
  row_sums(sums, logits, maxv, targets, N, Vl, vstart, V, stream);
}
void ce_row_sums(float* sums, const f16* logits, const float* maxv, const int32_t* targets, int N,
                 int Vl, int vstart, int V, void* stream) {
  row_sums(sums, logits, maxv, targets, N, Vl, vstart, V, stream);
}
void ce_row_stats(float* maxv, float* sums, const float* logits, const int32_t* targets, int N,
                  int Vl, int vstart, int V, void* stream) {
  row_stats(maxv, sums, logits, targets, N, Vl, vstart, V, stream);
}
void ce_row_stats(float* maxv, float* sums, const bf16* logits, const int32_t* targets, int N,
                  int Vl, int vstart, int V, void* stream) {
  row_stats(maxv, sums, logits, targets, N, Vl, vstart, V, stream);
}
void ce_row_stats(float* maxv, float* sums, const f16* logits, const int32_t* targets, int N,
                  int Vl, int vstart, int V, void* stream) {
  row_stats(maxv, sums, logits, targets, N, Vl, vstart, V, stream);
}

void ce_rescale_sums(float* sums, const float* local_max, const float* global_max, int N,
                     void* stream) {
  if (N <= 0) return;
  LOOM_LAUNCH(ce_rescale_sums_kernel, (N + kBlock - 1) / kBlock, kBlock, 0, as_stream(stream))
  (sums, local_max, global_max, N);
  LOOM_CUDA_CHECK_LAUNCH();
}

void ce_loss(float* losses, const float* maxv, const float* sums, int N, void* stream) {
  if (N <= 0) return;
  LOOM_LAUNCH(ce_loss_kernel, (N + kBlock - 1) / kBlock, kBlock, 0, as_stream(stream))
  (losses, maxv, sums, N);
  LOOM_CUDA_CHECK_LAUNCH();
}

void ce_backward_inplace(float* logits, const float* maxv, const float* sums,
                         const int32_t* targets, float dloss, int N, int Vl, int vstart, int V,
                         void* stream) {
  backward(logits, maxv, sums, targets, dloss, N, Vl, vstart, V, stream);
}
void ce_backward_inplace(bf16* logits, const float* maxv, const float* sums, const int32_t* targets,
                         float dloss, int N, int Vl, int vstart, int V, void* stream) {
  backward(logits, maxv, sums, targets, dloss, N, Vl, vstart, V, stream);
}
void ce_backward_inplace(f16* logits, const float* maxv, const float* sums, const int32_t* targets,
                         float dloss, int N, int Vl, int vstart, int V, void* stream) {
  backward(logits, maxv, sums, targets, dloss, N, Vl, vstart, V, stream);
}

}  // namespace loom::cuda
