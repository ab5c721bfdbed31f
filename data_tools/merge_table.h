// MergeTable: a byte-level BPE's merges, (left id, right id) -> (rank, merged id), in an
// open-addressing hash table read on every merge step of the encoders.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace loom::tok {

class MergeTable {
 public:
  struct Merge {
    int32_t a, b, rank, merged;
  };
  // The table of `merges`; a pair given twice keeps its first entry (the lowest rank when they
  // come in rank order). Returns the number of distinct pairs.
  size_t build(const std::vector<Merge>& merges) {
    size_t cap = 1;
    while (cap < 2 * merges.size() + 2) cap <<= 1;
    slots_.assign(cap, Slot());
    mask_ = cap - 1;
    size_t distinct = 0;
    for (const Merge& m : merges) {
      const uint64_t key = key_of(m.a, m.b);
      size_t i = mix(key) & mask_;
      while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
      if (slots_[i].key == key) continue;
      slots_[i] = Slot{key, m.rank, m.merged};
      ++distinct;
    }
    return distinct;
  }

  // Rank and result of merging the adjacent tokens (a, b), or false if they do not merge.
  bool merge(int32_t a, int32_t b, int32_t* rank, int32_t* merged) const {
    const uint64_t key = key_of(a, b);
    for (size_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) {
        *rank = s.rank;
        *merged = s.merged;
        return true;
      }
      if (s.key == kEmpty) return false;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  struct Slot {
    uint64_t key = kEmpty;
    int32_t rank = 0, merged = 0;
  };
  static uint64_t key_of(int32_t a, int32_t b) {
    return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  }
  static uint64_t mix(uint64_t x) {
    x ^= x >> 31;
    x *= 0x9E3779B97F4A7C15ull;
    return x ^ (x >> 29);
  }
  std::vector<Slot> slots_{Slot()};  // one empty slot until build(): merge() finds nothing
  size_t mask_ = 0;
};

}  // namespace loom::tok
