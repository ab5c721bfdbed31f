// GPT-2's pre-tokenizer: splits UTF-8 bytes into the pieces of the reference regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// without a regex engine. Invalid UTF-8 bytes are characters of their own in [^\s\p{L}\p{N}].
#pragma once
#include <cstddef>
#include <cstdint>

namespace loom::tok {

// \p{L} = general category L*, \p{N} = N*, \s = Unicode White_Space (what Python's `regex`
// module, used by OpenAI's encoder.py, matches; JavaScript's \s differs on U+0085 and U+FEFF).
enum class CharClass : uint8_t { Other = 0, Letter = 1, Number = 2, Space = 3 };

// The class of every code point 0..0x10FFFF as a CharClass byte, built once from ICU (thread-safe).
const uint8_t* class_table();

// Strict UTF-8 (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF). Returns the
// length of the character at s[0] (1..4) and stores its code point, or returns 1 and stores
// -1 when s[0] does not start a valid character: that byte is then one character by itself.
inline int utf8_next(const uint8_t* s, size_t n, int32_t* cp) {
  const uint8_t b0 = s[0];
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  auto cont = [&](size_t i, uint8_t lo, uint8_t hi) { return i < n && s[i] >= lo && s[i] <= hi; };
  if (b0 >= 0xC2 && b0 <= 0xDF && cont(1, 0x80, 0xBF)) {
    *cp = ((b0 & 0x1F) << 6) | (s[1] & 0x3F);
    return 2;
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    const uint8_t lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
    if (cont(1, lo, hi) && cont(2, 0x80, 0xBF)) {
      *cp = ((b0 & 0x0F) << 12) | ((s[1] & 0x3F) << 6) | (s[2] & 0x3F);
      return 3;
    }
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    const uint8_t lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
    if (cont(1, lo, hi) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF)) {
      *cp = ((b0 & 0x07) << 18) | ((s[1] & 0x3F) << 12) | ((s[2] & 0x3F) << 6) | (s[3] & 0x3F);
      return 4;
    }
  }
  *cp = -1;
  return 1;
}

// Walks `text` piece by piece: next(p) is the end of the piece that starts at p (< n).
class PreTokenizer {
 public:
  PreTokenizer() : table_(class_table()) {}
  size_t next(const uint8_t* s, size_t n, size_t p) const;

 private:
  CharClass class_at(const uint8_t* s, size_t n, size_t p, int* len) const {
    if (s[p] < 0x80) {
      *len = 1;
      return static_cast<CharClass>(table_[s[p]]);
    }
    int32_t cp;
    *len = utf8_next(s + p, n - p, &cp);
    return cp < 0 ? CharClass::Other : static_cast<CharClass>(table_[cp]);
  }
  size_t run_end(const uint8_t* s, size_t n, size_t p, CharClass k) const;
  const uint8_t* table_;
};

}  // namespace loom::tok
