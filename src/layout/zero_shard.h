// ZeRO shard arithmetic: which elements of a flat buffer each data-parallel rank owns, and with
// expert parallelism the two sharding groups (dense tensors over the dp ranks, the experts'
// tensors over the expert replicas).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace loom {

class ParamLayout;

// Elements [lo, hi) of a flat buffer of `total` elements owned by DP rank `rank`: the buffer is
// padded to dp * shard_size and cut into equal contiguous shards (a tensor may straddle two).
struct ShardRange {
  size_t lo = 0, hi = 0;
};
size_t zero_shard_size(size_t total, int dp);
ShardRange zero_shard(size_t total, int dp, int rank);

// The sizes of a rank's ZeRO state. A rank keeps its shard of each group one after the other:
// the dense group's shard (dense_shard slots), then the experts' (expert_shard slots; 0 without
// a group of their own). stage 0: one group of one rank holding the whole flat buffer.
struct ZeroSizes {
  bool split = false;         // the experts form their own group (ep > 1 with experts)
  uint64_t dense_shard = 0;   // slots per rank of the dense group
  uint64_t expert_shard = 0;  // slots per rank of the experts' group
  uint64_t state_elems = 0;   // AdamW moments: up to this rank's last owned element
  uint64_t shard_elems = 0;   // ZeRO-2 gradient / ZeRO-3 parameter shard: every slot
};
// total: elements of the rank's flat buffer; expert: of them, the experts' tensors (E/ep
// experts); dp_rank: index among the dp (x cp) replicas; the expert replica index is
// dp_rank / ep (experts never run with cp > 1).
ZeroSizes zero_sizes(uint64_t total, uint64_t expert, int dp, int dp_rank, int ep, int zero);

// One sharding group: its flat runs, concatenated in flat order, form a virtual buffer of
// `elems` elements cut into `ranks` shards of `shard` elements, like one flat buffer would be.
struct ShardGroup {
  bool expert = false;  // the expert replicas' group (its collectives run on them)
  int ranks = 1;        // group size
  int rank = 0;         // this rank's index in the group
  std::vector<ShardRange> runs;
  size_t elems = 0, shard = 0;
  size_t base = 0;  // where this group's shard starts in a rank's local state
};

// Flat elements [lo, hi), held at local [local, local + hi - lo) of their owner's state.
struct ShardPiece {
  size_t lo = 0, hi = 0, local = 0;
};

class ZeroShards {
 public:
  ZeroShards() = default;
  // The rank's layout sharded over dp replicas (this rank dp_rank) at ZeRO stage `zero`; with
  // layout.ep() > 1 and experts in the layout, the experts' tensors form a second group over
  // the dp / ep expert replicas (index dp_rank / ep).
  ZeroShards(const ParamLayout& layout, int dp, int dp_rank, int zero);

  const std::vector<ShardGroup>& groups() const { return groups_; }
  const ZeroSizes& sizes() const { return sizes_; }
  // One group whose one run is the whole buffer: shards are contiguous flat ranges.
  bool contiguous() const { return groups_.size() == 1 && groups_[0].runs.size() <= 1; }
  // The group's runs clipped to flat [begin, end).
  std::vector<ShardRange> runs(const ShardGroup& g, size_t begin, size_t end) const;
  // Pieces of flat [begin, end) owned by rank `owner` of group g; local is relative to the
  // group's base (at most one piece per run).
  std::vector<ShardPiece> owned(const ShardGroup& g, size_t begin, size_t end, int owner) const;
  // This rank's pieces of [begin, end) in every group, local in its state, in flat order.
  std::vector<ShardPiece> mine(size_t begin, size_t end) const;
  const std::vector<ShardPiece>& mine() const { return mine_; }  // over the whole buffer

 private:
  std::vector<ShardGroup> groups_;
  std::vector<ShardPiece> mine_;
  ZeroSizes sizes_;
};

}  // namespace loom
