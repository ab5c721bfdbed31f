// The key/value cache of one pipeline stage for generation: per local layer, per sequence slot,
// the rotated keys and the values of every position so far, this TP rank's kv heads only.
#pragma once
#include <cstddef>
#include <vector>

#include "backend/backend.h"
#include "core/buffer.h"
#include "layout/block_memory.h"

namespace loom {

// The rows one decode step appends: sequence slot `slot` gets n new tokens at positions
// [start, start + n) (start = the tokens it has cached so far); rows of the step are the spans'
// rows one after the other.
struct RowSpan {
  int slot, start, n;
};

class KvCache {
 public:
  // layers local layers, seqs slots of T positions each, kv heads and head size of d (this TP
  // rank's: d.KV() heads of d.D()), in the backend's act dtype.
  KvCache(Backend& be, int layers, int seqs, int T, const BlockDims& d);
  int seqs() const { return seqs_; }
  int positions() const { return T_; }
  size_t bytes() const { return buf_.bytes(); }
  // (T, W) rows of layer `layer`, slot `slot`: W = 2*KV*D, [k | v] per position.
  void* rows(int layer, int slot) const;
  size_t width() const { return W_; }  // W elements per row

 private:
  Buffer buf_;  // (layers, seqs, T, W)
  int layers_, seqs_, T_;
  size_t W_, esize_;
};

// Scratch of the cached attention for spans of up to T query rows against up to T keys: fp32
// online-softmax state and the cpu backend's score tiles.
struct CachedAttnScratch {
  float *acc, *m, *l, *lse, *work;
  int32_t* pos;  // (T) 0..T-1, the positions of cache rows (and, offset, of new rows)
};
// Bytes of it for dims d (its KV, NH, D) and T positions on device dev; carve_attn_scratch
// carves it out of base and fills pos (backend memory).
size_t attn_scratch_bytes(const BlockDims& d, int T, const DeviceTraits& dev);
CachedAttnScratch carve_attn_scratch(Backend& be, void* base, const BlockDims& d, int T);

// For each span: the k|v columns of its rows of qkv (R, QKVl) (q and k already rotated) go into
// the cache at positions [start, start + n) of its slot, then its queries attend causally to the
// slot's keys 0..start+n-1; out (R, NH*D) receives the attention output of every row.
void cached_attention(Backend& be, void* out, const void* qkv, const KvCache& cache, int layer,
                      const std::vector<RowSpan>& spans, const CachedAttnScratch& s,
                      const BlockDims& d);

}  // namespace loom
