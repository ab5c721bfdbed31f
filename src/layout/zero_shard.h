// ZeRO shard arithmetic: which elements of a flat buffer each data-parallel rank owns.
#pragma once
#include <cstddef>

namespace loom {

// Elements [lo, hi) of a flat buffer of `total` elements owned by DP rank `rank`: the buffer is
// padded to dp * shard_size and cut into equal contiguous shards (a tensor may straddle two).
struct ShardRange {
  size_t lo = 0, hi = 0;
};
size_t zero_shard_size(size_t total, int dp);
ShardRange zero_shard(size_t total, int dp, int rank);

}  // namespace loom
