// Chunk arithmetic of the chunked gathers at sizes beyond the old 2 GiB limit (pure functions,
// nothing of that size allocated), the output-to-canonical rectangle map and the
// LOOM_GATHER_CHUNK_BYTES setting.
#include <gtest/gtest.h>

#include <climits>
#include <cstdlib>

#include "ckpt/gather_chunks.h"
#include "core/check.h"

namespace loom {
namespace {

// Walks every chunk: each holds at most `elems` values, starts where the previous ended in
// row-major order, and together they cover rows x cols exactly once.
void expect_tiles(int64_t rows, int64_t cols, int64_t elems, int64_t want_count) {
  const int64_t n = chunk_count(rows, cols, elems);
  ASSERT_EQ(n, want_count);
  int64_t next = 0;  // row-major index where the next chunk must start
  for (int64_t i = 0; i < n; ++i) {
    const Rect r = chunk_rect(rows, cols, elems, i);
    ASSERT_GT(r.rows * r.cols, 0) << i;
    ASSERT_LE(r.rows * r.cols, elems) << i;
    ASSERT_TRUE(r.cols == cols || r.rows == 1) << i;  // whole rows, or a piece of one row
    ASSERT_EQ(r.row0 * cols + r.col0, next) << i;
    next += r.rows * r.cols;
  }
  EXPECT_EQ(next, rows * cols);
}

TEST(GatherChunks, WholeRowsBeyondTwoGiB) {
  // A 128256 x 16384 fp32 embedding is 8.4e9 bytes; 64 MiB chunks hold 1024 of its rows, so
  // 125 full chunks and one of the last 256 rows.
  const int64_t elems = kDefaultGatherChunkBytes / 4;
  EXPECT_GT(int64_t(128256) * 16384 * 4, int64_t(INT_MAX));
  expect_tiles(128256, 16384, elems, 126);
  EXPECT_EQ(chunk_rect(128256, 16384, elems, 125), (Rect{128000, 0, 256, 16384}));
}

TEST(GatherChunks, PiecesOfRowsLongerThanAChunk) {
  // Rows of 2^31 + 5 values with 2^28-value chunks: 8 full pieces and one of 5 values per row.
  const int64_t cols = (int64_t(1) << 31) + 5, elems = int64_t(1) << 28;
  expect_tiles(3, cols, elems, 27);
  EXPECT_EQ(chunk_rect(3, cols, elems, 8), (Rect{0, int64_t(1) << 31, 1, 5}));
  EXPECT_EQ(chunk_rect(3, cols, elems, 9), (Rect{1, 0, 1, elems}));
  // One value per chunk, and a chunk larger than the whole tensor.
  expect_tiles(4, 3, 1, 12);
  expect_tiles(4, 3, 1000, 1);
  expect_tiles(7, 5, 11, 4);  // 2 rows per chunk, the last chunk one row
}

TEST(GatherChunks, WireBytesStayBelowIntMax) {
  // The largest chunk plus a 32-byte header for each of thousands of pieces still fits the int
  // counts of MPI_Gatherv.
  EXPECT_LE(kMaxGatherChunkBytes + 100000 * int64_t(sizeof(Rect)), int64_t(INT_MAX));
}

TEST(GatherChunks, SourceRectangles) {
  OutTensor plain{"q", {10, 4}, "c_attn", 8, false};
  EXPECT_EQ(source_rect(plain, Rect{2, 1, 3, 2}), (Rect{2, 9, 3, 2}));
  // Transposed: output (i, j) is canonical (j, col0 + i).
  OutTensor t{"q_proj", {4, 10}, "c_attn", 8, true};
  EXPECT_EQ(source_rect(t, Rect{1, 2, 2, 5}), (Rect{2, 9, 5, 2}));
}

TEST(GatherChunks, ChunkSizeSetting) {
  unsetenv("LOOM_GATHER_CHUNK_BYTES");
  EXPECT_EQ(gather_chunk_bytes(), kDefaultGatherChunkBytes);
  setenv("LOOM_GATHER_CHUNK_BYTES", "4096", 1);
  EXPECT_EQ(gather_chunk_bytes(), 4096);
  setenv("LOOM_GATHER_CHUNK_BYTES", "1073741824", 1);
  EXPECT_EQ(gather_chunk_bytes(), kMaxGatherChunkBytes);
  for (const char* bad : {"0", "3", "-8", "12k", "1073741825", "99999999999999999999"}) {
    setenv("LOOM_GATHER_CHUNK_BYTES", bad, 1);
    try {
      gather_chunk_bytes();
      ADD_FAILURE() << bad << " accepted";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("LOOM_GATHER_CHUNK_BYTES='" + std::string(bad)),
                std::string::npos)
          << e.what();
    }
  }
  unsetenv("LOOM_GATHER_CHUNK_BYTES");
}

}  // namespace
}  // namespace loom
