// Pre-tokenization patterns of the rank-based BPE tokenizers (gpt2/r50k, cl100k, o200k, Qwen's
// single-digit variant of cl100k), implemented by hand with the regexes' exact semantics.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace loom::tok {

// The patterns, as written by tiktoken and in Hugging Face tokenizer.json files:
//   gpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   cl100k: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+         (also Llama 3's)
//   qwen2:  cl100k with \p{N} in place of \p{N}{1,3}                     (Qwen 2 and 3)
//   o200k:  [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+C?|
//           [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*C?|
//           \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//           with C = (?i:'s|'t|'re|'ve|'m|'ll|'d)
// (?i:...) folds ASCII letters only (as js-tiktoken and the JavaScript port of Hugging Face
// tokenizers do). \s is Unicode White_Space, as in the gpt2 pre-tokenizer (pretokenize.h).
enum class Pattern { Gpt2, Cl100k, Qwen2, O200k };

// "gpt2"/"r50k" | "cl100k" | "qwen2" | "o200k" -> Pattern; false for anything else.
bool pattern_from_name(const std::string& name, Pattern* out);
const char* pattern_name(Pattern p);
// The regex text above for `p` (what tokenizer.json files hold), to recognize a Split pattern.
const std::string& pattern_regex(Pattern p);

// Property bits of one code point; invalid UTF-8 bytes have none (they are "other").
enum CharBits : uint8_t {
  kLetter = 1,     // \p{L}
  kNumber = 2,     // \p{N}
  kSpace = 4,      // \s (White_Space)
  kUpperish = 8,   // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
  kLowerish = 16,  // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
  kNewline = 32,   // \r or \n
};
// The bits of every code point 0..0x10FFFF, built once from ICU (thread-safe).
const uint8_t* char_bits_table();

// Walks text piece by piece: next(s, n, p) is the end of the piece that starts at p (< n).
class Splitter {
 public:
  virtual ~Splitter() = default;
  virtual size_t next(const uint8_t* s, size_t n, size_t p) const = 0;
};
std::unique_ptr<Splitter> make_splitter(Pattern p);

}  // namespace loom::tok
