// Chunked gathers to world rank 0: chunk arithmetic, the LOOM_GATHER_CHUNK_BYTES setting, and
// per chunk one MPI_Gather of byte counts and one MPI_Gatherv of (rectangle, values) pieces.
#include "ckpt/gather_chunks.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "core/check.h"

namespace loom {

int64_t gather_chunk_bytes() {
  const char* text = std::getenv("LOOM_GATHER_CHUNK_BYTES");
  if (!text || !*text) return kDefaultGatherChunkBytes;
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (*end != '\0' || v < 4 || v > kMaxGatherChunkBytes)
    throw UserError(str("LOOM_GATHER_CHUNK_BYTES='", text, "': give a byte count from 4 to ",
                        kMaxGatherChunkBytes, ", or unset it for the default ",
                        kDefaultGatherChunkBytes));
  return v;
}

int64_t chunk_count(int64_t rows, int64_t cols, int64_t chunk_elems) {
  LOOM_CHECK(rows >= 0 && cols > 0 && chunk_elems > 0, rows, "x", cols, " by ", chunk_elems);
  if (cols <= chunk_elems) {
    const int64_t per = chunk_elems / cols;  // whole rows per chunk
    return (rows + per - 1) / per;
  }
  return rows * ((cols + chunk_elems - 1) / chunk_elems);  // pieces of each row
}

Rect chunk_rect(int64_t rows, int64_t cols, int64_t chunk_elems, int64_t i) {
  LOOM_CHECK(i >= 0 && i < chunk_count(rows, cols, chunk_elems), "chunk ", i, " of ", rows, "x",
             cols, " by ", chunk_elems);
  if (cols <= chunk_elems) {
    const int64_t per = chunk_elems / cols;
    const int64_t r0 = i * per;
    return {r0, 0, std::min(per, rows - r0), cols};
  }
  const int64_t pieces = (cols + chunk_elems - 1) / chunk_elems;
  const int64_t c0 = (i % pieces) * chunk_elems;
  return {i / pieces, c0, 1, std::min(chunk_elems, cols - c0)};
}

Rect source_rect(const OutTensor& t, const Rect& r) {
  if (!t.transposed) return {r.row0, t.col0 + r.col0, r.rows, r.cols};
  return {r.col0, t.col0 + r.row0, r.cols, r.rows};
}

namespace {
Rect intersect(const Rect& a, const Rect& b) {
  const int64_t r0 = std::max(a.row0, b.row0), r1 = std::min(a.row0 + a.rows, b.row0 + b.rows);
  const int64_t c0 = std::max(a.col0, b.col0), c1 = std::min(a.col0 + a.cols, b.col0 + b.cols);
  return {r0, c0, std::max<int64_t>(0, r1 - r0), std::max<int64_t>(0, c1 - c0)};
}

void put(std::vector<char>& out, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  out.insert(out.end(), c, c + n);
}

// This rank's pieces of canonical rectangle `want`: for each shard block, its intersection as
// a Rect header followed by rows x cols floats.
void pack(const ParamSpec& p, const std::vector<ShardBlock>& blocks, const float* params,
          const Rect& want, std::vector<char>& out) {
  for (const ShardBlock& b : blocks) {
    const Rect x = intersect({b.grow, b.gcol, b.rows, b.cols}, want);
    if (x.rows == 0 || x.cols == 0) continue;
    put(out, &x, sizeof x);
    for (int64_t r = x.row0; r < x.row0 + x.rows; ++r)
      put(out, params + p.offset + (b.lrow + r - b.grow) * p.lcols + b.lcol + (x.col0 - b.gcol),
          size_t(x.cols) * sizeof(float));
  }
}

// Places every piece of `wire` into the output chunk `r` of `t` (rows x cols, row-major).
void unpack(const OutTensor& t, const Rect& r, const std::vector<char>& wire, float* out) {
  const Rect want = source_rect(t, r);
  int64_t covered = 0;
  size_t pos = 0;
  while (pos < wire.size()) {
    LOOM_CHECK(wire.size() - pos >= sizeof(Rect), "short piece header in a chunk of ", t.name);
    Rect x;
    std::memcpy(&x, &wire[pos], sizeof x);
    pos += sizeof x;
    LOOM_CHECK(intersect(x, want) == x && wire.size() - pos >= size_t(x.rows * x.cols) * 4,
               "piece (", x.row0, ",", x.col0, ") ", x.rows, "x", x.cols, " outside the chunk of ",
               t.name);
    const float* v = reinterpret_cast<const float*>(&wire[pos]);
    for (int64_t i = 0; i < x.rows; ++i) {
      const int64_t cr = x.row0 + i;
      if (!t.transposed) {  // output (cr, cc - col0)
        std::memcpy(out + (cr - r.row0) * r.cols + (x.col0 - t.col0 - r.col0), v + i * x.cols,
                    size_t(x.cols) * 4);
      } else {  // output (cc - col0, cr)
        for (int64_t j = 0; j < x.cols; ++j)
          out[(x.col0 + j - t.col0 - r.row0) * r.cols + (cr - r.col0)] = v[i * x.cols + j];
      }
    }
    pos += size_t(x.rows * x.cols) * 4;
    covered += x.rows * x.cols;
  }
  LOOM_CHECK(covered == r.rows * r.cols, "chunk (", r.row0, ",", r.col0, ") of ", t.name,
             ": the ranks sent ", covered, " of its ", r.rows * r.cols, " values");
}
}  // namespace

void gather_chunks(const std::vector<OutTensor>& outs, const ParamLayout& layout,
                   const float* params, ParallelCtx& pc, const ChunkSink& sink) {
  // Every rank cuts alike: rank 0's chunk size (parsed on every rank, so a bad value stops each).
  int64_t bytes = gather_chunk_bytes();
  LOOM_MPI(MPI_Bcast(&bytes, 1, MPI_INT64_T, 0, pc.world.mpi()));
  const int64_t elems = bytes / int64_t(sizeof(float));
  const bool root = pc.rank == 0;
  std::vector<int> sizes(size_t(pc.world.size())), displs(sizes.size());
  std::vector<char> mine, wire;
  std::vector<float> chunk;
  std::exception_ptr failed;
  for (size_t t = 0; t < outs.size(); ++t) {
    const OutTensor& o = outs[t];
    // The first replica sends (with expert parallelism, dp < ep for the experts' tensors).
    const ParamSpec* p = layout.find(o.source);
    if (p && (p->expert ? pc.expert_replica_index() : pc.replica_index()) != 0) p = nullptr;
    const std::vector<ShardBlock> blocks =
        p && p->norm_owner ? layout.blocks(*p) : std::vector<ShardBlock>{};
    const int64_t n = chunk_count(o.rows(), o.cols(), elems);
    for (int64_t i = 0; i < n; ++i) {
      const Rect r = chunk_rect(o.rows(), o.cols(), elems, i);
      mine.clear();
      if (!blocks.empty()) pack(*p, blocks, params, source_rect(o, r), mine);
      // At most one chunk of values plus a header per piece: far below INT_MAX (chunk <= 1 GiB).
      LOOM_CHECK(mine.size() <= size_t(INT_MAX), "chunk piece of ", mine.size(), " bytes");
      const int len = int(mine.size());
      LOOM_MPI(MPI_Gather(&len, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, pc.world.mpi()));
      if (root) {
        int64_t total = 0;
        for (size_t k = 0; k < sizes.size(); ++k) displs[k] = int(total), total += sizes[k];
        LOOM_CHECK(total <= INT_MAX, "chunk of ", total, " bytes on the wire");
        wire.resize(size_t(total));
      }
      LOOM_MPI(MPI_Gatherv(mine.data(), len, MPI_BYTE, wire.data(), sizes.data(), displs.data(),
                           MPI_BYTE, 0, pc.world.mpi()));
      if (!root || failed) continue;
      try {
        chunk.resize(size_t(r.rows * r.cols));
        unpack(o, r, wire, chunk.data());
        sink(t, r, chunk.data());
      } catch (...) {
        failed = std::current_exception();  // keep gathering: the other ranks are in the loop
      }
    }
  }
  if (failed) std::rethrow_exception(failed);
}

void local_chunk(const OutTensor& t, const Rect& r, const ParamLayout& layout, const float* params,
                 float* out) {
  const ParamSpec* p = layout.find(t.source);
  LOOM_CHECK(p != nullptr, "the layout holds no tensor ", t.source, " (for ", t.name, ")");
  std::vector<char> wire;
  pack(*p, layout.blocks(*p), params, source_rect(t, r), wire);
  unpack(t, r, wire, out);
}

}  // namespace loom
