// ZeRO shard arithmetic: contiguous shards of a flat buffer, and the dense and expert groups.
#include "layout/zero_shard.h"

#include <algorithm>

#include "core/check.h"
#include "layout/param_layout.h"

namespace loom {

size_t zero_shard_size(size_t total, int dp) { return (total + size_t(dp) - 1) / size_t(dp); }

ShardRange zero_shard(size_t total, int dp, int rank) {
  size_t s = zero_shard_size(total, dp);
  return {std::min(total, size_t(rank) * s), std::min(total, size_t(rank + 1) * s)};
}

namespace {
// Elements a rank owns of a virtual buffer of n elements cut into shards of s.
uint64_t owned_count(uint64_t n, uint64_t s, int rank) {
  const uint64_t lo = std::min(n, uint64_t(rank) * s);
  return std::min(n, lo + s) - lo;
}
}  // namespace

ZeroSizes zero_sizes(uint64_t total, uint64_t expert, int dp, int dp_rank, int ep, int zero) {
  ZeroSizes z;
  if (zero == 0) {
    z.dense_shard = z.state_elems = z.shard_elems = total;
    return z;
  }
  z.split = ep > 1 && expert > 0;
  const uint64_t dense = z.split ? total - expert : total;
  z.dense_shard = zero_shard_size(dense, dp);
  if (!z.split) {
    z.state_elems = owned_count(dense, z.dense_shard, dp_rank);
    z.shard_elems = z.dense_shard;
    return z;
  }
  const int replicas = dp / ep;  // ranks holding the same experts
  z.expert_shard = zero_shard_size(expert, replicas);
  z.state_elems = z.dense_shard + owned_count(expert, z.expert_shard, dp_rank / ep);
  z.shard_elems = z.dense_shard + z.expert_shard;
  return z;
}

ZeroShards::ZeroShards(const ParamLayout& layout, int dp, int dp_rank, int zero) {
  const size_t total = layout.total();
  uint64_t expert = 0;
  for (const ParamSpec& p : layout.params())
    if (p.expert) expert += p.numel();
  const int ep = layout.ep();
  sizes_ = zero_sizes(total, expert, dp, dp_rank, ep, zero);
  ShardGroup dense;
  if (zero > 0) dense.ranks = dp, dense.rank = dp_rank;
  if (!sizes_.split) {
    if (total > 0) dense.runs.push_back({0, total});
    dense.elems = total;
    dense.shard = sizes_.dense_shard;
    groups_.push_back(dense);
  } else {
    ShardGroup experts;
    experts.expert = true;
    experts.ranks = dp / ep, experts.rank = dp_rank / ep;
    for (const ParamLayout::FlatRun& r : layout.expert_runs(0, total)) {
      ShardGroup& g = r.expert ? experts : dense;
      g.runs.push_back({r.lo, r.hi});
      g.elems += r.hi - r.lo;
    }
    dense.shard = sizes_.dense_shard;
    experts.shard = sizes_.expert_shard;
    experts.base = dense.shard;
    groups_.push_back(dense);
    groups_.push_back(experts);
  }
  mine_ = mine(0, total);
}

std::vector<ShardRange> ZeroShards::runs(const ShardGroup& g, size_t begin, size_t end) const {
  std::vector<ShardRange> out;
  for (const ShardRange& r : g.runs) {
    const size_t lo = std::max(begin, r.lo), hi = std::min(end, r.hi);
    if (lo < hi) out.push_back({lo, hi});
  }
  return out;
}

std::vector<ShardPiece> ZeroShards::owned(const ShardGroup& g, size_t begin, size_t end,
                                          int owner) const {
  LOOM_CHECK(owner >= 0 && owner < g.ranks, "shard owner ", owner, " of a group of ", g.ranks);
  const size_t vlo = std::min(g.elems, size_t(owner) * g.shard);
  const size_t vhi = std::min(g.elems, vlo + g.shard);
  std::vector<ShardPiece> out;
  size_t v = 0;  // virtual index of the run's first element
  for (const ShardRange& r : g.runs) {
    const size_t n = r.hi - r.lo;
    // The owner's part of the run, as flat offsets, then clipped to [begin, end).
    const size_t a = std::max(vlo, v), b = std::min(vhi, v + n);
    if (a < b) {
      const size_t lo = std::max(begin, r.lo + (a - v)), hi = std::min(end, r.lo + (b - v));
      if (lo < hi) out.push_back({lo, hi, (v + (lo - r.lo)) - vlo});
    }
    v += n;
    if (v >= vhi) break;
  }
  return out;
}

std::vector<ShardPiece> ZeroShards::mine(size_t begin, size_t end) const {
  std::vector<ShardPiece> out;
  for (const ShardGroup& g : groups_)
    for (ShardPiece p : owned(g, begin, end, g.rank)) {
      p.local += g.base;
      out.push_back(p);
    }
  std::sort(out.begin(), out.end(),
            [](const ShardPiece& a, const ShardPiece& b) { return a.lo < b.lo; });
  return out;
}

}  // namespace loom
