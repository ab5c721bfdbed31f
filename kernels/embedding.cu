// Token + position embedding cuda twin: gather forward; backward by sorted (token, row) keys.
#include <string>

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

// ---- dwte: sort (token, row) keys, then one block per run of equal tokens -------------------
// Key of row n: (local token << 32) | n, or kNoKey for a token outside the shard and for the
// padding up to a power of two (sorted last, skipped).
constexpr uint64_t kNoKey = ~uint64_t(0);
constexpr int kSortTile = 2048;  // keys sorted in shared memory per block (16 KiB)
constexpr int kSortBlock = 512;

__global__ void embedding_keys_kernel(uint64_t* keys, const int32_t* tokens, int N, size_t npad,
                                      int vstart, int Vl) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < npad; i += stride) {
    uint64_t k = kNoKey;
    if (i < (size_t)N) {
      const int local = tokens[i] - vstart;
      if (local >= 0 && local < Vl) k = ((uint64_t)local << 32) | (uint64_t)i;
    }
    keys[i] = k;
  }
}

// One compare-exchange of the bitonic network: stage k (the size of the bitonic sequences being
// merged), distance j; pair p has its lower element at 2p - (p mod j).
__device__ __forceinline__ void bitonic_step(uint64_t* v, size_t base, size_t p, size_t k,
                                             size_t j) {
  const size_t i = 2 * p - (p & (j - 1)), l = i + j;
  const uint64_t a = v[i], b = v[l];
  const bool ascending = ((base + i) & k) == 0;
  if ((a > b) == ascending) {
    v[i] = b;
    v[l] = a;
  }
}

// Global steps (j >= kSortTile): one thread per pair of the whole array.
__global__ void bitonic_global_kernel(uint64_t* keys, size_t npad, size_t k, size_t j) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < npad / 2; p += stride)
    bitonic_step(keys, 0, p, k, j);
}

// The steps with j < tile of stages k_first..k_last (powers of two), on the block's tile of
// `tile` keys held in shared memory.
__global__ void bitonic_tile_kernel(uint64_t* keys, int tile, size_t k_first, size_t k_last) {
  __shared__ uint64_t v[kSortTile];
  const size_t base = (size_t)blockIdx.x * tile;
  for (int i = threadIdx.x; i < tile; i += blockDim.x) v[i] = keys[base + i];
  __syncthreads();
  for (size_t k = k_first; k <= k_last; k <<= 1) {
    for (size_t j = (k / 2 < (size_t)tile ? k / 2 : (size_t)tile / 2); j > 0; j >>= 1) {
      for (int p = threadIdx.x; p < tile / 2; p += blockDim.x) bitonic_step(v, base, p, k, j);
      __syncthreads();
    }
  }
  for (int i = threadIdx.x; i < tile; i += blockDim.x) keys[base + i] = v[i];
}

// Sorts npad (a power of two) keys ascending.
void sort_keys(uint64_t* keys, size_t npad, cudaStream_t s) {
  const int tile = (int)(npad < (size_t)kSortTile ? npad : (size_t)kSortTile);
  const unsigned tiles = (unsigned)(npad / tile);
  LOOM_LAUNCH(bitonic_tile_kernel, tiles, kSortBlock, 0, s)(keys, tile, 2, (size_t)tile);
  LOOM_CUDA_CHECK_LAUNCH();
  for (size_t k = 2 * (size_t)tile; k <= npad; k <<= 1) {
    for (size_t j = k / 2; j >= (size_t)tile; j >>= 1) {
      LOOM_LAUNCH(bitonic_global_kernel, grid_for(npad / 2, 256), 256, 0, s)(keys, npad, k, j);
      LOOM_CUDA_CHECK_LAUNCH();
    }
    LOOM_LAUNCH(bitonic_tile_kernel, tiles, kSortBlock, 0, s)(keys, tile, k, k);
    LOOM_CUDA_CHECK_LAUNCH();
  }
}

// One block per sorted position i; the block at the first key of a run of equal tokens owns
// wte row `local` alone and adds, column by column, dout[n] for the run's rows n in increasing
// order (the key's low half): the cpu twin's order, so the same bits in fp32.
template <typename T>
__global__ void embedding_backward_wte_kernel(float* dwte, const T* dout, const uint64_t* keys,
                                              int N, int C) {
  const int i = blockIdx.x;
  const uint64_t key = keys[i];
  if (key == kNoKey) return;
  const uint32_t tok = (uint32_t)(key >> 32);
  if (i > 0 && (uint32_t)(keys[i - 1] >> 32) == tok) return;  // not the first of its run
  float* drow = dwte + (size_t)tok * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = drow[c];
    for (int m = i; m < N; m++) {
      const uint64_t km = keys[m];
      if ((uint32_t)(km >> 32) != tok || km == kNoKey) break;
      acc += to_f32(dout[(size_t)(uint32_t)km * C + c]);
    }
    drow[c] = acc;
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
              int vstart, int Vl, void* stream, Workspace scratch) {
  const int N = B * T_;
  if (N <= 0 || C <= 0) return;
  cudaStream_t s = as_stream(stream);
  const size_t need = embedding_backward_scratch_bytes(N);
  if (scratch.bytes < need || !scratch.ptr) {
    const std::string msg = "embedding_backward: B*T = " + std::to_string(N) + " rows need " +
                            std::to_string(need) + " bytes of scratch, the workspace has " +
                            std::to_string(scratch.bytes) + " (a smaller micro-batch fits)";
    LOOM_CUDA_REQUIRE(false, msg.c_str());
  }
  uint64_t* keys = static_cast<uint64_t*>(scratch.ptr);
  const size_t npad = need / sizeof(uint64_t);
  LOOM_LAUNCH(embedding_keys_kernel, grid_for(npad, 256), 256, 0, s)
  (keys, tokens, N, npad, vstart, Vl);
  LOOM_CUDA_CHECK_LAUNCH();
  sort_keys(keys, npad, s);
  LOOM_LAUNCH(embedding_backward_wte_kernel, (unsigned)N, kBlock, 0, s)
  (dwte, dev_ptr(dout), keys, N, C);
  LOOM_CUDA_CHECK_LAUNCH();
  if (!dwpe) return;
  LOOM_LAUNCH(embedding_backward_wpe_kernel, grid_for((size_t)T_ * C, 256), 256, 0, s)
  (dwpe, dev_ptr(dout), B, T_, C);
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace

size_t embedding_backward_scratch_bytes(int N) {
  size_t npad = 1;
  while (npad < (size_t)N) npad <<= 1;
  return npad * sizeof(uint64_t);
}

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
                        int T, int C, int vocab_start, int vocab_local, void* stream,
                        Workspace scratch) {
  backward(dwte, dwpe, dout, tokens, B, T, C, vocab_start, vocab_local, stream, scratch);
}
void embedding_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens, int B,
                        int T, int C, int vocab_start, int vocab_local, void* stream,
                        Workspace scratch) {
  backward(dwte, dwpe, dout, tokens, B, T, C, vocab_start, vocab_local, stream, scratch);
}
void embedding_backward(float* dwte, float* dwpe, const f16* dout, const int32_t* tokens, int B,
                        int T, int C, int vocab_start, int vocab_local, void* stream,
                        Workspace scratch) {
  backward(dwte, dwpe, dout, tokens, B, T, C, vocab_start, vocab_local, stream, scratch);
}

}  // namespace loom::cuda
