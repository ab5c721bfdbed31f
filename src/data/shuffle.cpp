// Feistel-network permutation with cycle-walking (see shuffle.h).
#include "data/shuffle.h"

#include "core/check.h"
#include "core/rng.h"

namespace loom {

EpochShuffle::EpochShuffle(uint64_t seed, uint64_t stream, uint64_t n)
    : seed_(seed), stream_(stream), n_(n) {
  LOOM_CHECK(n > 0, "EpochShuffle of an empty range");
  int bits = 0;
  while (bits < 64 && (uint64_t(1) << bits) < n) ++bits;  // 2^bits >= n
  half_bits_ = bits <= 2 ? 1 : (bits + 1) / 2;
  half_mask_ = (uint64_t(1) << half_bits_) - 1;
}

uint64_t EpochShuffle::round_fn(uint64_t key, int round, uint64_t x) const {
  SplitMix64 g(key ^ (uint64_t(round + 1) * 0xD1B54A32D192ED03ull) ^ (x * 0x9E3779B97F4A7C15ull));
  return g.next() & half_mask_;
}

uint64_t EpochShuffle::permute(uint64_t epoch, uint64_t j) const {
  LOOM_CHECK(j < n_, "permute index ", j, " >= ", n_);
  if (n_ == 1) return 0;
  // One key per (seed, stream, epoch): three steps of a SplitMix64 chain.
  SplitMix64 kg(seed_);
  uint64_t key = kg.next() ^ stream_;
  key = SplitMix64(key).next() ^ epoch;
  key = SplitMix64(key).next();
  uint64_t x = j;
  do {  // cycle-walk: the Feistel permutation acts on [0, 4^half), n fits in it
    uint64_t l = x >> half_bits_, r = x & half_mask_;
    for (int k = 0; k < kRounds; ++k) {
      uint64_t t = l ^ round_fn(key, k, r);
      l = r;
      r = t;
    }
    x = (l << half_bits_) | r;
  } while (x >= n_);
  return x;
}

}  // namespace loom
