// Seeded, epoch-aware shuffling of a dataset's samples: a keyed bijection of [0, n), computed
// on demand (no table), the same on every platform.
#pragma once
#include <cstdint>

namespace loom {

// permute(epoch, j) is a permutation of [0, n) in j for every epoch; each (seed, stream, epoch)
// gives a different one. It is a balanced Feistel network on the smallest even number of bits
// covering n, with cycle-walking back into [0, n); round keys come from SplitMix64, so the
// result is a pure function of (seed, stream, n, epoch, j) — no std:: distributions involved.
class EpochShuffle {
 public:
  EpochShuffle(uint64_t seed, uint64_t stream, uint64_t n);
  uint64_t n() const { return n_; }
  uint64_t permute(uint64_t epoch, uint64_t j) const;

 private:
  static constexpr int kRounds = 6;
  uint64_t round_fn(uint64_t key, int round, uint64_t x) const;
  uint64_t seed_, stream_, n_;
  int half_bits_ = 1;
  uint64_t half_mask_ = 1;
};

}  // namespace loom
