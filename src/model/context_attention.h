// Context parallelism: a sequence of T*cp tokens is cut into 2*cp chunks and cp rank r holds
// chunks r and 2*cp-1-r (the causal work is then the same on every rank). Attention runs as a
// ring: each rank's keys and values travel once around the cp group, forward and backward, and
// their gradients travel with them back to their owner (docs/context-parallel.md).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "layout/block_memory.h"
#include "parallel/comm.h"

namespace loom {

// The global position of the first row of each of cp rank r's two chunks of T/2 rows
// (T = seq_len / cp): chunks r and 2*cp-1-r of the sequence.
std::array<size_t, 2> cp_chunk_starts(int T, int cp, int r);

// The global positions of cp rank r's T local rows.
std::vector<int32_t> cp_positions(int T, int cp, int r);

// out (rows, T) = cp rank r's two chunks of each row of full (rows, T*cp): the tokens (and
// targets) of its share of every sequence.
void take_cp_rows(int32_t* out, const int32_t* full, int rows, int T, int cp, int r);

// Fills s.ring_pos (every cp rank's positions) and, on llama, the RoPE tables of this rank's
// rows (global positions); without context parallelism only the RoPE tables. Once, at start.
void fill_position_tables(Backend& be, const BlockScratch& s, const BlockDims& d, int cp_rank);

// out (N, NH*D) and lse (B, NH, T) from this rank's qkv (N, QKVl) against the keys of every cp
// rank, causally by global position.
void ring_attention_forward(Backend& be, void* out, float* lse, const void* qkv,
                            const BlockScratch& s, const BlockDims& d, Comm& cp);

// dqkv (N, QKVl) overwritten: dq from every rank's keys, and dk, dv of this rank's keys summed
// over every rank's queries. out and lse are the forward's.
void ring_attention_backward(Backend& be, void* dqkv, const void* dout, const void* qkv,
                             const void* out, const float* lse, const BlockScratch& s,
                             const BlockDims& d, Comm& cp);

}  // namespace loom
