// Token + position embedding cuda twin: gather forward; deterministic row-owner backward (no
// atomics).
#include "kernels/cuda_common.cuh"
#include "kernels/embedding.h"

namespace loom::cuda {
namespace {

constexpr int kBlock = 128;

// One block per token row n: out[n] = (tok in shard ? wte[tok - vstart] : 0) + (wpe ? wpe[t] : 0).
template <int V, typename T>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                                         int T_, int C, int vstart, int Vl) {
  const int n = blockIdx.x;
  const int local = tokens[n] - vstart;
  const bool in_shard = local >= 0 && local < Vl;
  const T* e = in_shard ? wte + (size_t)local * C : nullptr;
  const T* p = wpe ? wpe + (size_t)(n % T_) * C : nullptr;
  T* o = out + (size_t)n * C;
  for (int c = threadIdx.x * V; c < C; c += blockDim.x * V) {
    float x[V], y[V];
#pragma unroll
    for (int k = 0; k < V; k++) x[k] = 0.0f;
    if (e) load_f<V>(e + c, x);
    if (p) {
      load_f<V>(p + c, y);
#pragma unroll
      for (int k = 0; k < V; k++) x[k] += y[k];
    }
    store_f<V>(o + c, x);
  }
}

// One block per token row n. The block continues only when n is the first row holding its
// token (and the token is in the shard); it then owns wte row `local` alone and adds, column by
// column, dout[m] for every row m >= n holding the same token, in increasing m: the cpu twin's
// order (bitwise equal in fp32). The matching rows are gathered a blockDim-sized window at a
// time by an ordered compaction (warp ballots + per-warp offsets) into shared memory.
template <typename T>
__global__ void embedding_backward_wte_kernel(float* dwte, const T* dout, const int32_t* tokens,
                                              int N, int C, int vstart, int Vl) {
  __shared__ int rows[kBlock];
  __shared__ int warp_count[kBlock / 32];
  const int n = blockIdx.x;
  const int tok = tokens[n];
  const int local = tok - vstart;
  if (local < 0 || local >= Vl) return;  // uniform over the block
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int m0 = 0; m0 < n; m0 += kBlock) {  // an earlier row with this token owns the row
    const int m = m0 + (int)threadIdx.x;
    const int hit = m < n && tokens[m] == tok;
    if (__syncthreads_or(hit)) return;  // same answer in every thread
  }
  float* drow = dwte + (size_t)local * C;
  for (int m0 = n; m0 < N; m0 += kBlock) {
    const int m = m0 + (int)threadIdx.x;
    const bool hit = m < N && tokens[m] == tok;
    const unsigned ballot = __ballot_sync(kFullMask, hit);
    if (lane == 0) warp_count[warp] = __popc(ballot);
    __syncthreads();
    int offset = 0, total = 0;
    for (int w = 0; w < kBlock / 32; w++) {
      if (w < warp) offset += warp_count[w];
      total += warp_count[w];
    }
    if (hit) rows[offset + __popc(ballot & ((1u << lane) - 1u))] = m;
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += kBlock) {
      float acc = drow[c];
      for (int k = 0; k < total; k++) acc += to_f32(dout[(size_t)rows[k] * C + c]);
      drow[c] = acc;
    }
    __syncthreads();  // rows and warp_count are rewritten by the next window
  }
}

// dwpe[t, c] += sum over b (in order) of dout[b, t, c]; one thread per (t, c).
template <typename T>
__global__ void embedding_backward_wpe_kernel(float* dwpe, const T* dout, int B, int T_, int C) {
  const size_t total = (size_t)T_ * C;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    float acc = dwpe[i];
    for (int b = 0; b < B; b++) acc += to_f32(dout[(size_t)b * total + i]);
    dwpe[i] = acc;
  }
}

template <typename H>
void forward(H* out, const int32_t* tokens, const H* wte, const H* wpe, int B, int T_, int C,
             int vstart, int Vl, void* stream) {
  using T = dev_t<H>;
  const int N = B * T_;
  if (N <= 0 || C <= 0) return;
  constexpr int kV = Pack128<T>::kSize;
  const bool vec = C % kV == 0 && aligned16(out) && aligned16(wte) && (!wpe || aligned16(wpe));
  cudaStream_t s = as_stream(stream);
  if (vec) {
    LOOM_LAUNCH(embedding_forward_kernel<kV>, (unsigned)N, kBlock, 0, s)
    (dev_ptr(out), tokens, dev_ptr(wte), dev_ptr(wpe), T_, C, vstart, Vl);
  } else {
    LOOM_LAUNCH(embedding_forward_kernel<1>, (unsigned)N, kBlock, 0, s)
    (dev_ptr(out), tokens, dev_ptr(wte), dev_ptr(wpe), T_, C, vstart, Vl);
  }
  LOOM_CUDA_CHECK_LAUNCH();
}

template <typename H>
void backward(float* dwte, float* dwpe, const H* dout, const int32_t* tokens, int B, int T_, int C,
              int vstart, int Vl, void* stream) {
  const int N = B * T_;
  if (N <= 0 || C <= 0) return;
  cudaStream_t s = as_stream(stream);
  LOOM_LAUNCH(embedding_backward_wte_kernel, (unsigned)N, kBlock, 0, s)
  (dwte, dev_ptr(dout), tokens, N, C, vstart, Vl);
  LOOM_CUDA_CHECK_LAUNCH();
  if (!dwpe) return;
  LOOM_LAUNCH(embedding_backward_wpe_kernel, grid_for((size_t)T_ * C, 256), 256, 0, s)
  (dwpe, dev_ptr(dout), B, T_, C);
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C, int vocab_start, int vocab_local, void* stream) {
  forward(out, tokens, wte, wpe, B, T, C, vocab_start, vocab_local, stream);
}
void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B,
                       int T, int C, int vocab_start, int vocab_local, void* stream) {
  forward(out, tokens, wte, wpe, B, T, C, vocab_start, vocab_local, stream);
}
void embedding_forward(f16* out, const int32_t* tokens, const f16* wte, const f16* wpe, int B,
                       int T, int C, int vocab_start, int vocab_local, void* stream) {
  forward(out, tokens, wte, wpe, B, T, C, vocab_start, vocab_local, stream);
}
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C, int vocab_start, int vocab_local, void* stream) {
  backward(dwte, dwpe, dout, tokens, B, T, C, vocab_start, vocab_local, stream);
}
void embedding_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens, int B,
                        int T, int C, int vocab_start, int vocab_local, void* stream) {
  backward(dwte, dwpe, dout, tokens, B, T, C, vocab_start, vocab_local, stream);
}
void embedding_backward(float* dwte, float* dwpe, const f16* dout, const int32_t* tokens, int B,
                        int T, int C, int vocab_start, int vocab_local, void* stream) {
  backward(dwte, dwpe, dout, tokens, B, T, C, vocab_start, vocab_local, stream);
}

}  // namespace loom::cuda
