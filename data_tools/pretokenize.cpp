// GPT-2 pre-tokenization by hand: the regex alternatives tried in order at each position.
#include "data_tools/pretokenize.h"

#include <unicode/uchar.h>

#include <vector>

namespace loom::tok {

const uint8_t* class_table() {
  static const std::vector<uint8_t> table = [] {
    std::vector<uint8_t> t(0x110000, uint8_t(CharClass::Other));
    for (UChar32 c = 0; c < 0x110000; ++c) {
      const uint32_t mask = U_GET_GC_MASK(c);
      if (u_hasBinaryProperty(c, UCHAR_WHITE_SPACE))
        t[size_t(c)] = uint8_t(CharClass::Space);
      else if (mask & U_GC_L_MASK)
        t[size_t(c)] = uint8_t(CharClass::Letter);
      else if (mask & U_GC_N_MASK)
        t[size_t(c)] = uint8_t(CharClass::Number);
    }
    return t;
  }();
  return table.data();
}

size_t PreTokenizer::run_end(const uint8_t* s, size_t n, size_t p, CharClass k) const {
  int len;
  while (p < n && class_at(s, n, p, &len) == k) p += size_t(len);
  return p;
}

size_t PreTokenizer::next(const uint8_t* s, size_t n, size_t p) const {
  const uint8_t c = s[p];
  // 's 't 're 've 'm 'll 'd (ASCII apostrophe, lower case only, as in the reference).
  if (c == '\'' && p + 1 < n) {
    const uint8_t a = s[p + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return p + 2;
    if (p + 2 < n) {
      const uint8_t b = s[p + 2];
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return p + 3;
    }
  }
  int len;
  const CharClass k = class_at(s, n, p, &len);
  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": an optional U+0020, then a run of one class.
  if (c == ' ' && p + 1 < n) {
    int len2;
    const CharClass k2 = class_at(s, n, p + 1, &len2);
    if (k2 != CharClass::Space) return run_end(s, n, p + 1, k2);
  }
  if (k != CharClass::Space) return run_end(s, n, p, k);
  // "\s+(?!\S)" then "\s+": a whitespace run that reaches the end is taken whole; one followed
  // by a non-space gives up its last character (which then starts the next piece), unless it
  // is a single character, which "\s+" takes alone.
  size_t e = p, last = p;
  while (e < n) {
    int l;
    if (class_at(s, n, e, &l) != CharClass::Space) break;
    last = e;
    e += size_t(l);
  }
  if (e == n) return n;
  return last > p ? last : e;
}

}  // namespace loom::tok
