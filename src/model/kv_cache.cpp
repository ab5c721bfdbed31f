// KV cache storage and the cached attention over the ring-attention step kernels.
#include "model/kv_cache.h"

#include <numeric>

#include "core/buffer.h"
#include "core/check.h"
#include "kernels/attention_ring.h"

namespace loom {

KvCache::KvCache(Backend& be, int layers, int seqs, int T, const BlockDims& d)
    : layers_(layers), seqs_(seqs), T_(T), W_(size_t(2 * d.KV() * d.D())), esize_(be.act_size()) {
  LOOM_CHECK(layers >= 0 && seqs >= 1 && T >= 1, "KV cache of ", layers, " layers, ", seqs,
             " sequences, ", T, " positions");
  buf_ = Buffer(size_t(layers) * size_t(seqs) * size_t(T) * W_ * esize_, be.device());
  if (buf_.bytes() > 0) be.zero(buf_.data(), buf_.bytes());
}

void* KvCache::rows(int layer, int slot) const {
  LOOM_CHECK(layer >= 0 && layer < layers_ && slot >= 0 && slot < seqs_, "KV cache layer ", layer,
             " slot ", slot, " outside ", layers_, " x ", seqs_);
  const size_t i = size_t(layer) * size_t(seqs_) + size_t(slot);
  return byte_at(buf_.data(), i * size_t(T_) * W_ * esize_);
}

size_t attn_scratch_bytes(const BlockDims& d, int T, const DeviceTraits& dev) {
  Carver c(nullptr, dev.align());
  const size_t rows = size_t(d.NH) * size_t(T);
  c.floats(size_t(T) * size_t(d.NH * d.D()));  // acc (T, NH*D)
  c.floats(rows);                              // m
  c.floats(rows);                              // l
  c.floats(rows);                              // lse
  c.floats(dev.ring_attention_work_floats(1, d.NH, T));
  c.take(size_t(T) * sizeof(int32_t));
  return c.used();
}

CachedAttnScratch carve_attn_scratch(Backend& be, void* base, const BlockDims& d, int T) {
  Carver c(base, be.traits().align());
  const size_t rows = size_t(d.NH) * size_t(T);
  CachedAttnScratch s{};
  s.acc = c.floats(size_t(T) * size_t(d.NH * d.D()));
  s.m = c.floats(rows);
  s.l = c.floats(rows);
  s.lse = c.floats(rows);
  s.work = c.floats(be.traits().ring_attention_work_floats(1, d.NH, T));
  s.pos = static_cast<int32_t*>(c.take(size_t(T) * sizeof(int32_t)));
  std::vector<int32_t> pos(static_cast<size_t>(T));
  std::iota(pos.begin(), pos.end(), 0);
  be.from_host(s.pos, pos.data(), pos.size() * sizeof(int32_t));
  return s;
}

void cached_attention(Backend& be, void* out, const void* qkv, const KvCache& cache, int layer,
                      const std::vector<RowSpan>& spans, const CachedAttnScratch& s,
                      const BlockDims& d) {
  const size_t e = be.act_size(), W = cache.width(), QKV = size_t(d.QKVl());
  const size_t qcols = size_t(d.NH * d.D()), kvcols = size_t(d.KV() * d.D());
  size_t row = 0;
  for (const RowSpan& sp : spans) {
    LOOM_CHECK(sp.n >= 1 && sp.start >= 0 && sp.start + sp.n <= cache.positions(), "span of ", sp.n,
               " rows at position ", sp.start, " outside the cache's ", cache.positions());
    void* kv = cache.rows(layer, sp.slot);        // (T, W)
    const void* q = byte_at(qkv, row * QKV * e);  // (n, QKVl)
    // k|v of the new rows (n, W) into cache rows [start, start + n).
    be.copy_2d(byte_at(kv, size_t(sp.start) * W * e), W * e, byte_at(q, qcols * e), QKV * e, W * e,
               size_t(sp.n));
    // The n queries at positions start.. against keys 0..start+n-1 (causal by position).
    const cpu::RingDims rd{1, sp.n, sp.start + sp.n, d.NH, d.KV(), d.D(), int(QKV), int(W)};
    be.ring_attention_begin(s.acc, s.m, s.l, rd);
    be.ring_attention_forward_step(s.acc, s.m, s.l, q, kv, byte_at(kv, kvcols * e),
                                   s.pos + sp.start, s.pos, rd, s.work);
    be.ring_attention_finish(byte_at(out, row * qcols * e), s.lse, s.acc, s.m, s.l, rd);
    row += size_t(sp.n);
  }
}

}  // namespace loom
