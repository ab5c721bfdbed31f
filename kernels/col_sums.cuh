// Deterministic column sums over rows, two-stage: row chunks summed by separate blocks into
// scratch, then the chunk partials added in chunk order (bias and LayerNorm weight gradients).
#pragma once
#include <algorithm>

#include "kernels/cuda_common.cuh"

namespace loom::cuda {

// Block (32, kColRows): 32 columns, kColRows threads down the rows of each.
constexpr int kColRows = 16;
// A chunk has at least this many rows (kColRows threads x 4 rows each), so that chunking only
// happens where it pays.
constexpr int kMinChunkRows = 64;
// Chunks are added until the grid has about this many blocks (4 per SM of a 132-SM GPU). A
// constant, not the device's SM count: the summation order, hence every bit of the result,
// depends only on (N, C) and the scratch size.
constexpr int kTargetBlocks = 512;

// The S output rows: out[s][c] += sum over rows n of term_s(n, c).
template <int S>
struct ColOut {
  float* p[S];
};

// Row chunking of an (N, C) column reduction with S sums per column into `scratch`.
struct ColChunks {
  int chunks = 1;  // 1: a single stage, the blocks add straight into out
  int rows = 0;    // rows per chunk (the last may have fewer)
};

inline ColChunks col_chunks(int N, int C, int S, Workspace scratch) {
  ColChunks r;
  r.rows = N;
  const int col_blocks = (C + 31) / 32;
  size_t chunks = (size_t)((kTargetBlocks + col_blocks - 1) / col_blocks);
  chunks = std::min(chunks, (size_t)((N + kMinChunkRows - 1) / kMinChunkRows));
  chunks = std::min(chunks, scratch.ptr ? scratch.bytes / (sizeof(float) * S * (size_t)C) : 0);
  if (chunks < 2) return r;
  r.rows = (int)((N + chunks - 1) / chunks);
  r.chunks = (N + r.rows - 1) / r.rows;  // no empty chunk
  return r;
}

// Stage 1. Block (x, y) sums columns 32x.. of rows [y rows, (y + 1) rows): thread row ty adds
// rows ty, ty + kColRows, ... in order, then the kColRows partials are added in a fixed order.
// With one chunk the block adds its sums into out; else it writes them to part (S, chunks, C).
// f(n, c, acc) adds the S = F::kSums terms of element (n, c) to acc[0..S).
template <typename F>
__global__ void col_sums_kernel(F f, ColOut<F::kSums> out, float* part, int N, int C, int rows) {
  constexpr int S = F::kSums;
  __shared__ float sh[S][kColRows][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int c = blockIdx.x * 32 + tx;
  const int r0 = blockIdx.y * rows;
  const int r1 = min(N, r0 + rows);
  float acc[S];
#pragma unroll
  for (int s = 0; s < S; s++) acc[s] = 0.0f;
  if (c < C) {
    for (int n = r0 + ty; n < r1; n += kColRows) f(n, c, acc);
  }
#pragma unroll
  for (int s = 0; s < S; s++) sh[s][ty][tx] = acc[s];
  __syncthreads();  // reached by every thread (no early exit above)
  if (ty == 0 && c < C) {
#pragma unroll
    for (int s = 0; s < S; s++) {
      float t = 0.0f;
      for (int k = 0; k < kColRows; k++) t += sh[s][k][tx];
      if (gridDim.y == 1)
        out.p[s][c] += t;
      else
        part[((size_t)s * gridDim.y + blockIdx.y) * C + c] = t;
    }
  }
}

// Stage 2: out[s][c] += sum over chunks k, in order, of part[s][k][c]; one thread per (s, c).
template <int S>
__global__ void col_sums_finish_kernel(ColOut<S> out, const float* part, int C, int chunks) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (size_t)S * C) return;
  const int s = (int)(i / C), c = (int)(i % C);
  const float* p = part + (size_t)s * chunks * C + c;
  float t = 0.0f;
  for (int k = 0; k < chunks; k++) t += p[(size_t)k * C];
  out.p[s][c] += t;
}

// Enqueues the reduction of an (N, C) array of terms (N, C > 0).
template <typename F>
void col_sums(F f, ColOut<F::kSums> out, int N, int C, Workspace scratch, cudaStream_t stream) {
  constexpr int S = F::kSums;
  const ColChunks ch = col_chunks(N, C, S, scratch);
  const dim3 grid((unsigned)((C + 31) / 32), (unsigned)ch.chunks);
  const dim3 block(32, kColRows);
  float* part = static_cast<float*>(scratch.ptr);
  LOOM_LAUNCH(col_sums_kernel<F>, grid, block, 0, stream)(f, out, part, N, C, ch.rows);
  LOOM_CUDA_CHECK_LAUNCH();
  if (ch.chunks == 1) return;
  const size_t total = (size_t)S * C;
  LOOM_LAUNCH(col_sums_finish_kernel<S>, (unsigned)((total + 255) / 256), 256, 0, stream)
  (out, part, C, ch.chunks);
  LOOM_CUDA_CHECK_LAUNCH();
}

}  // namespace loom::cuda
