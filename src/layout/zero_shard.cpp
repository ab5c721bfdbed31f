// ZeRO shard arithmetic.
#include "layout/zero_shard.h"

#include <algorithm>

namespace loom {

size_t zero_shard_size(size_t total, int dp) { return (total + size_t(dp) - 1) / size_t(dp); }

ShardRange zero_shard(size_t total, int dp, int rank) {
  size_t s = zero_shard_size(total, dp);
  return {std::min(total, size_t(rank) * s), std::min(total, size_t(rank + 1) * s)};
}

}  // namespace loom
