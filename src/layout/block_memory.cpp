// Carving of a block's activations and backward scratch (measuring with a null base).
#include "layout/block_memory.h"

namespace loom {

namespace {
// Lays out one BlockActs (the attention state in `shared_att` when given); returns its bytes.
size_t carve_acts(BlockActs& a, void* base, const BlockDims& d, const ActFormat& f, bool with_att,
                  float* shared_att) {
  const size_t n = size_t(d.N()), ns = size_t(d.Ns()), e = f.act;
  Carver c(base, f.align);
  a.ln1 = c.take(ns * d.C * e);
  a.ln1_mean = d.gated ? nullptr : c.floats(ns);
  a.ln1_rstd = c.floats(ns);
  a.qkv = c.take(n * d.QKVl() * e);
  a.att = with_att ? c.floats(f.att_saved) : shared_att;
  a.atty = c.take(n * d.Cl() * e);
  a.res2 = c.take(ns * d.C * e);
  a.ln2 = c.take(ns * d.C * e);
  a.ln2_mean = d.gated ? nullptr : c.floats(ns);
  a.ln2_rstd = c.floats(ns);
  const bool moe = d.E > 0;
  const size_t rows = moe ? size_t(d.Mmax()) : n, E = size_t(d.E), k = size_t(d.k);
  const size_t expert_rows = moe ? size_t(d.Rmax()) : n;
  a.fch = c.take(expert_rows * d.FCl() * e);
  a.fchg = c.take(expert_rows * d.Hl() * e);
  auto ints = [&c](size_t count) { return static_cast<int32_t*>(c.take(count * sizeof(int32_t))); };
  a.moe_probs = moe ? c.floats(n * E) : nullptr;
  a.moe_lse = moe ? c.floats(n) : nullptr;
  a.moe_gate = moe ? c.floats(n * k) : nullptr;
  a.moe_choice = moe ? ints(n * k) : nullptr;
  a.moe_slot = moe ? ints(n * k) : nullptr;
  a.moe_offsets = moe ? ints(E + 1) : nullptr;
  a.moe_rows = moe ? ints(rows) : nullptr;
  a.moe_counts = moe ? ints(size_t(d.B) * E) : nullptr;
  a.moe_y = moe ? c.take(rows * d.C * e) : nullptr;
  a.moe_xr = moe && d.ep > 1 ? c.take(expert_rows * d.C * e) : nullptr;
  return c.used();
}

size_t carve_scratch(BlockScratch& s, void* base, const BlockDims& d, const ActFormat& f) {
  const size_t n = size_t(d.N()), ns = size_t(d.Ns()), e = f.act;
  Carver c(base, f.align);
  s.proj = c.take(n * d.C * e);
  s.dres2 = c.take(ns * d.C * e);
  s.dln = c.take(n * d.C * e);
  s.dfchg = c.take(n * d.Hl() * e);
  s.dfch = c.take(n * d.FCl() * e);
  s.datty = c.take(n * d.Cl() * e);
  s.dqkv = c.take(n * d.QKVl() * e);
  s.datt = c.floats(f.att_scratch);
  s.shard = d.sp ? c.take(ns * d.C * e) : nullptr;
  s.normg = d.sp ? c.floats(4 * size_t(d.C)) : nullptr;
  const size_t table = d.gated ? size_t(d.T) * size_t(d.D() / 2) : 0;
  s.rope_cos = d.gated ? c.floats(table) : nullptr;
  s.rope_sin = d.gated ? c.floats(table) : nullptr;
  const bool ring = d.cp > 1;
  const size_t kvw = n * 2 * size_t(d.KV()) * size_t(d.D()), rows = size_t(d.B) * d.NH * d.T;
  for (int i = 0; i < 2; ++i) {
    s.ring_kv[i] = ring ? c.take(kvw * e) : nullptr;
    s.ring_dkv[i] = ring ? c.floats(kvw) : nullptr;
  }
  s.ring_acc = ring ? c.floats(n * size_t(d.QKVl())) : nullptr;
  s.ring_m = ring ? c.floats(rows) : nullptr;
  s.ring_l = ring ? c.floats(rows) : nullptr;
  s.ring_pos = ring ? static_cast<int32_t*>(c.take(size_t(d.cp) * d.T * sizeof(int32_t))) : nullptr;
  const bool moe = d.E > 0;
  const size_t M = moe ? size_t(d.Mmax()) : 0, R = moe ? size_t(d.Rmax()) : 0;
  // moe_x also takes the router's (N, C) input gradient in the backward.
  s.moe_x = moe ? c.take(std::max(M, n) * d.C * e) : nullptr;
  s.moe_dy = moe ? c.take(M * d.C * e) : nullptr;
  s.moe_dh = moe ? c.take(R * d.FCl() * e) : nullptr;
  s.moe_dhg = moe ? c.take(R * d.Hl() * e) : nullptr;
  s.moe_dxp = moe ? c.take(M * d.C * e) : nullptr;
  s.moe_yr = moe && d.ep > 1 ? c.take(R * d.C * e) : nullptr;
  s.moe_logits = moe ? c.floats(n * size_t(d.E)) : nullptr;
  s.moe_dgate = moe ? c.floats(n * size_t(d.k)) : nullptr;
  return c.used();
}
}  // namespace

ActFormat act_format(const DeviceTraits& dev, const BlockDims& d) {
  if (d.cp > 1)  // ring attention: the log-sum-exp of each row, and one step's work
    return ActFormat{dev.act_size(), size_t(d.B) * d.NH * d.T,
                     dev.ring_attention_work_floats(d.B, d.NH, d.T), dev.align()};
  return ActFormat{dev.act_size(), dev.attention_saved_floats(d.B, d.NH, d.T),
                   dev.attention_scratch_floats(d.B, d.NH, d.KV(), d.T, d.D()), dev.align()};
}

bool attention_keeps_probabilities(const DeviceTraits& dev, const BlockDims& d) {
  return dev.attention_saves_probabilities() && d.cp == 1;
}

size_t BlockDims::acts_bytes(const ActFormat& f, bool with_att) const {
  BlockActs a;
  return carve_acts(a, nullptr, *this, f, with_att, nullptr);
}

size_t BlockScratch::bytes(const BlockDims& d, const ActFormat& f) {
  BlockScratch s;
  return carve_scratch(s, nullptr, d, f);
}

BlockActs block_acts_at(void* base, const BlockDims& d, const ActFormat& f, float* shared_att) {
  BlockActs a;
  carve_acts(a, base, d, f, shared_att == nullptr, shared_att);
  return a;
}

BlockScratch block_scratch_at(void* base, const BlockDims& d, const ActFormat& f) {
  BlockScratch s;
  carve_scratch(s, base, d, f);
  return s;
}

}  // namespace loom
