// The cl100k/qwen2/o200k pre-tokenizers by hand: each regex alternative tried in order at p.
#include "data_tools/split_patterns.h"

#include <unicode/uchar.h>

#include <vector>

#include "data_tools/pretokenize.h"

namespace loom::tok {

namespace {

const char* const kRegex[] = {
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};

// The gpt2 pattern is pretokenize.h's PreTokenizer.
class Gpt2Splitter : public Splitter {
 public:
  size_t next(const uint8_t* s, size_t n, size_t p) const override { return pre_.next(s, n, p); }

 private:
  PreTokenizer pre_;
};

// Shared scanning helpers over the bits table.
class Scanner {
 public:
  Scanner() : bits_(char_bits_table()) {}
  uint8_t at(const uint8_t* s, size_t n, size_t p, size_t* len) const {
    if (s[p] < 0x80) {
      *len = 1;
      return bits_[s[p]];
    }
    int32_t cp;
    *len = size_t(utf8_next(s + p, n - p, &cp));
    return cp < 0 ? 0 : bits_[cp];
  }
  // End of the run of characters from p that have any of `mask`.
  size_t run(const uint8_t* s, size_t n, size_t p, uint8_t mask) const {
    size_t len;
    while (p < n && (at(s, n, p, &len) & mask)) p += len;
    return p;
  }
  // (?i:'s|'t|'re|'ve|'m|'ll|'d) at p: its length, or 0.
  static size_t contraction(const uint8_t* s, size_t n, size_t p) {
    if (p + 1 >= n || s[p] != '\'') return 0;
    const uint8_t a = s[p + 1] | 0x20;  // ASCII lower case (other bytes never match below)
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (p + 2 >= n) return 0;
    const uint8_t b = s[p + 2] | 0x20;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
  }
  // The last four alternatives, from p: " ?[^\s\p{L}\p{N}]+[\r\n]*" (with '/' in the trailing
  // class when `slash`), "\s*[\r\n]+", "\s+(?!\S)", "\s+". Every earlier alternative failed.
  size_t tail(const uint8_t* s, size_t n, size_t p, bool slash) const {
    constexpr uint8_t kWordOrSpace = kLetter | kNumber | kSpace;
    size_t len;
    const uint8_t b = at(s, n, p, &len);
    size_t start = n;  // where the [^\s\p{L}\p{N}]+ run starts, if it matches
    if (!(b & kWordOrSpace)) {
      start = p;
    } else if (s[p] == ' ' && p + 1 < n) {
      size_t l2;
      if (!(at(s, n, p + 1, &l2) & kWordOrSpace)) start = p + 1;
    }
    if (start < n) {
      size_t e = start;
      while (e < n && !(at(s, n, e, &len) & kWordOrSpace)) e += len;
      while (e < n && (s[e] == '\r' || s[e] == '\n' || (slash && s[e] == '/'))) ++e;
      return e;
    }
    // s[p] is white space. The whole run is [p, e); last = start of its last character.
    size_t e = p, last = p, newline_end = 0;
    while (e < n && (at(s, n, e, &len) & kSpace)) {
      if (s[e] == '\r' || s[e] == '\n') newline_end = e + 1;
      last = e;
      e += len;
    }
    if (newline_end) return newline_end;  // \s* backs off to the run's last \r or \n
    if (e == n) return n;                 // \s+(?!\S) at the end of the text
    return last > p ? last : e;           // leave the last space to the next piece, or \s+
  }

 private:
  const uint8_t* bits_;
};

class Cl100kSplitter : public Splitter {
 public:
  explicit Cl100kSplitter(int max_digits) : max_digits_(max_digits) {}
  size_t next(const uint8_t* s, size_t n, size_t p) const override {
    if (size_t c = Scanner::contraction(s, n, p)) return p + c;
    size_t len;
    const uint8_t b = sc_.at(s, n, p, &len);
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (b & kLetter) return sc_.run(s, n, p, kLetter);
    if (!(b & (kNumber | kNewline)) && p + len < n) {
      size_t l2;
      if (sc_.at(s, n, p + len, &l2) & kLetter) return sc_.run(s, n, p + len, kLetter);
    }
    // \p{N}{1,max}
    if (b & kNumber) {
      size_t e = p + len;
      for (int k = 1; k < max_digits_ && e < n && (sc_.at(s, n, e, &len) & kNumber); ++k) e += len;
      return e;
    }
    return sc_.tail(s, n, p, false);
  }

 private:
  Scanner sc_;
  int max_digits_;
};

class O200kSplitter : public Splitter {
 public:
  size_t next(const uint8_t* s, size_t n, size_t p) const override {
    size_t len;
    const uint8_t b = sc_.at(s, n, p, &len);
    const bool prefix = !(b & (kLetter | kNumber | kNewline));  // [^\r\n\p{L}\p{N}]
    size_t e;
    if ((prefix && (e = upper_lower(s, n, p + len))) || (e = upper_lower(s, n, p)) ||
        (prefix && (e = upper_then_lower(s, n, p + len))) || (e = upper_then_lower(s, n, p)))
      return e + Scanner::contraction(s, n, e);
    if (b & kNumber) {  // \p{N}{1,3}
      size_t e2 = p + len;
      for (int k = 1; k < 3 && e2 < n && (sc_.at(s, n, e2, &len) & kNumber); ++k) e2 += len;
      return e2;
    }
    return sc_.tail(s, n, p, true);
  }

 private:
  // U*W+ from q (U = kUpperish, W = kLowerish): the end of the match, or 0. U* takes its whole
  // run first; when the character after it is not W, U* gives back characters until W+ can
  // start on one that is in both classes (Lm, Lo, M), and then W+ is just that character.
  size_t upper_lower(const uint8_t* s, size_t n, size_t q) const {
    size_t len, e = q, last_w = n, last_w_len = 0;
    while (e < n) {
      const uint8_t b = sc_.at(s, n, e, &len);
      if (!(b & kUpperish)) break;
      if (b & kLowerish) last_w = e, last_w_len = len;
      e += len;
    }
    if (e < n && (sc_.at(s, n, e, &len) & kLowerish)) return sc_.run(s, n, e, kLowerish);
    return last_w < n ? last_w + last_w_len : 0;
  }
  // U+W* from q: the end of the match, or 0 when the character at q is not U.
  size_t upper_then_lower(const uint8_t* s, size_t n, size_t q) const {
    const size_t e = sc_.run(s, n, q, kUpperish);
    return e == q ? 0 : sc_.run(s, n, e, kLowerish);
  }
  Scanner sc_;
};

}  // namespace

bool pattern_from_name(const std::string& name, Pattern* out) {
  if (name == "gpt2" || name == "r50k")
    *out = Pattern::Gpt2;
  else if (name == "cl100k")
    *out = Pattern::Cl100k;
  else if (name == "qwen2")
    *out = Pattern::Qwen2;
  else if (name == "o200k")
    *out = Pattern::O200k;
  else
    return false;
  return true;
}

const char* pattern_name(Pattern p) {
  static const char* const names[] = {"gpt2", "cl100k", "qwen2", "o200k"};
  return names[int(p)];
}

const std::string& pattern_regex(Pattern p) {
  static const std::vector<std::string> text(std::begin(kRegex), std::end(kRegex));
  return text[size_t(p)];
}

const uint8_t* char_bits_table() {
  static const std::vector<uint8_t> table = [] {
    std::vector<uint8_t> t(0x110000, 0);
    for (UChar32 c = 0; c < 0x110000; ++c) {
      const uint32_t m = U_GET_GC_MASK(c);
      uint8_t b = 0;
      if (m & U_GC_L_MASK) b |= kLetter;
      if (m & U_GC_N_MASK) b |= kNumber;
      if (u_hasBinaryProperty(c, UCHAR_WHITE_SPACE)) b |= kSpace;
      if (m & (U_GC_LU_MASK | U_GC_LT_MASK | U_GC_LM_MASK | U_GC_LO_MASK | U_GC_M_MASK))
        b |= kUpperish;
      if (m & (U_GC_LL_MASK | U_GC_LM_MASK | U_GC_LO_MASK | U_GC_M_MASK)) b |= kLowerish;
      if (c == '\r' || c == '\n') b |= kNewline;
      t[size_t(c)] = b;
    }
    return t;
  }();
  return table.data();
}

std::unique_ptr<Splitter> make_splitter(Pattern p) {
  switch (p) {
    case Pattern::Gpt2:
      return std::make_unique<Gpt2Splitter>();
    case Pattern::Cl100k:
      return std::make_unique<Cl100kSplitter>(3);
    case Pattern::Qwen2:
      return std::make_unique<Cl100kSplitter>(1);
    case Pattern::O200k:
      return std::make_unique<O200kSplitter>();
  }
  return nullptr;
}

}  // namespace loom::tok
