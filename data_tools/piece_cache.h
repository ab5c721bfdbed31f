// A bounded per-thread cache of pre-tokenized piece -> token ids (real text repeats its pieces,
// so most pieces are served from here instead of being merged again).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace loom::tok {

class PieceCache {
 public:
  static constexpr size_t kMaxPiece = 128;  // longer pieces are not cached

  PieceCache() { reset(size_t(1) << 14); }

  static uint64_t hash(const uint8_t* s, size_t n) {
    uint64_t h = 0xCBF29CE484222325ull + n;
    for (; n >= 8; s += 8, n -= 8) {
      uint64_t v;
      std::memcpy(&v, s, 8);
      h = (h ^ v) * 0x9FB21C651E98DF25ull;
      h ^= h >> 29;
    }
    if (n) {
      uint64_t v = 0;
      std::memcpy(&v, s, n);
      h = (h ^ v) * 0xD6E8FEB86659FD93ull;
    }
    h ^= h >> 32;
    h *= 0x9FB21C651E98DF25ull;
    h ^= h >> 29;
    return h | 1;  // 0 marks an empty slot
  }

  // The cached ids of piece s[0, n) with hash h (appended to out), or false.
  bool get(uint64_t h, const uint8_t* s, size_t n, std::vector<int32_t>& out) const {
    const size_t mask = slots_.size() - 1;
    for (size_t i = h & mask; slots_[i].hash; i = (i + 1) & mask) {
      const Slot& e = slots_[i];
      if (e.hash == h && e.key_len == n && std::memcmp(keys_.data() + e.key_off, s, n) == 0) {
        out.insert(out.end(), vals_.begin() + e.val_off, vals_.begin() + e.val_off + e.val_len);
        return true;
      }
    }
    return false;
  }

  void put(uint64_t h, const uint8_t* s, size_t n, const int32_t* ids, size_t m) {
    if (2 * (used_ + 1) > slots_.size()) {
      if (slots_.size() >= kMaxSlots)
        reset(slots_.size());  // bounded memory: start over
      else
        grow();
    }
    if (keys_.size() + n > kMaxKeyBytes) reset(slots_.size());
    const size_t mask = slots_.size() - 1;
    size_t i = h & mask;
    while (slots_[i].hash) i = (i + 1) & mask;
    slots_[i] = Slot{h, uint32_t(keys_.size()), uint32_t(n), uint32_t(vals_.size()), uint32_t(m)};
    keys_.append(reinterpret_cast<const char*>(s), n);
    vals_.insert(vals_.end(), ids, ids + m);
    ++used_;
  }

 private:
  static constexpr size_t kMaxSlots = size_t(1) << 20, kMaxKeyBytes = size_t(16) << 20;
  struct Slot {
    uint64_t hash = 0;  // 0: empty
    uint32_t key_off = 0, key_len = 0, val_off = 0, val_len = 0;
  };
  void reset(size_t slots) {
    slots_.assign(slots, Slot());
    used_ = 0;
    keys_.clear();
    vals_.clear();
  }
  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(old.size() * 2, Slot());
    const size_t mask = slots_.size() - 1;
    for (const Slot& e : old)
      if (e.hash) {
        size_t i = e.hash & mask;
        while (slots_[i].hash) i = (i + 1) & mask;
        slots_[i] = e;
      }
  }
  std::vector<Slot> slots_;
  size_t used_ = 0;
  std::string keys_;
  std::vector<int32_t> vals_;
};

}  // namespace loom::tok
