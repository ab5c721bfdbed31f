// Chunked gathers of whole tensors to world rank 0: each tensor is cut into row-major chunks
// of at most LOOM_GATHER_CHUNK_BYTES, and rank 0 receives and hands on one chunk at a time,
// so no MPI count exceeds INT_MAX and rank 0 never holds more than one chunk of the model.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "layout/param_layout.h"
#include "parallel/parallel_ctx.h"

namespace loom {

// A rectangle [row0, row0 + rows) x [col0, col0 + cols) of a tensor seen as 2-D.
struct Rect {
  int64_t row0 = 0, col0 = 0, rows = 0, cols = 0;
  bool operator==(const Rect& o) const {
    return row0 == o.row0 && col0 == o.col0 && rows == o.rows && cols == o.cols;
  }
};

constexpr int64_t kDefaultGatherChunkBytes = int64_t(64) << 20;
constexpr int64_t kMaxGatherChunkBytes = int64_t(1) << 30;  // wire buffers stay below INT_MAX

// The chunk size: LOOM_GATHER_CHUNK_BYTES when set (a byte count from 4 to 2^30), else 64 MiB.
// UserError naming the variable for anything else.
int64_t gather_chunk_bytes();

// The chunks of a rows x cols tensor of at most chunk_elems elements each, in row-major order
// (each starts where the previous ended): whole rows, chunk_elems / cols of them at a time, or,
// when one row holds more than chunk_elems, pieces of one row. Pure arithmetic.
int64_t chunk_count(int64_t rows, int64_t cols, int64_t chunk_elems);
Rect chunk_rect(int64_t rows, int64_t cols, int64_t chunk_elems, int64_t i);

// One tensor of a written file and where its values come from: output element (i, j) is
// canonical tensor `source`'s (i, col0 + j), or (j, col0 + i) when transposed (an HF Linear
// weight is [out, in], loom's [in, out]).
struct OutTensor {
  std::string name;
  std::vector<int64_t> shape;  // [cols] or [rows, cols]
  std::string source;
  int64_t col0 = 0;
  bool transposed = false;
  int64_t rows() const { return shape.size() == 1 ? 1 : shape[0]; }
  int64_t cols() const { return shape.back(); }
};

// The canonical rectangle that output rectangle `r` of `t` reads.
Rect source_rect(const OutTensor& t, const Rect& r);

// Called on world rank 0 for each chunk in order: the output index, the chunk's rectangle in
// output coordinates and its values (rows x cols, row-major).
using ChunkSink = std::function<void(size_t out, const Rect& r, const float* values)>;

// Collective over pc.world; every rank passes the same `outs`. Each chunk of each output, in
// order, is gathered to world rank 0 from the ranks that export it (the (dp0, cp0) replica's
// norm owner of each shard block, so every element comes from exactly one rank) and passed to
// `sink`. When `sink` throws on rank 0, the remaining chunks are still gathered (so no rank
// waits forever) but not passed on, and rank 0 rethrows at the end.
void gather_chunks(const std::vector<OutTensor>& outs, const ParamLayout& layout,
                   const float* params, ParallelCtx& pc, const ChunkSink& sink);

// Chunk `r` of output `t` (rows x cols values into `out`) on a process whose `params` (laid out by
// `layout`) hold every block of t's source tensor: the same pieces gather_chunks would send,
// unpacked locally. InternalError when `layout` lacks the tensor or does not cover the chunk.
void local_chunk(const OutTensor& t, const Rect& r, const ParamLayout& layout, const float* params,
                 float* out);

}  // namespace loom
