// The cl100k/qwen2/o200k pre-tokenizers on strings whose pieces follow by hand from the regexes
// (split_patterns.h): each expectation is the leftmost-first match of the alternatives in order.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data_tools/split_patterns.h"

using namespace loom::tok;

namespace {

std::vector<std::string> pieces(Pattern p, const std::string& text) {
  auto sp = make_splitter(p);
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size();) {
    const size_t e = sp->next(s, text.size(), i);
    EXPECT_GT(e, i) << "no progress at " << i << " in \"" << text << "\"";
    if (e <= i) break;
    out.push_back(text.substr(i, e - i));
    i = e;
  }
  return out;
}

using V = std::vector<std::string>;

}  // namespace

TEST(SplitPatterns, Cl100k) {
  const Pattern c = Pattern::Cl100k;
  EXPECT_EQ(pieces(c, "Hello world"), (V{"Hello", " world"}));
  // (?i:'s|...) folds ASCII case; the contraction is a piece of its own.
  EXPECT_EQ(pieces(c, "I'M don't"), (V{"I", "'M", " don", "'t"}));
  EXPECT_EQ(pieces(c, "WE'VE 'LL"), (V{"WE", "'VE", " '", "LL"}));
  EXPECT_EQ(pieces(c, "12345"), (V{"123", "45"}));  // \p{N}{1,3}
  // [^\r\n\p{L}\p{N}]?\p{L}+: one non-letter prefix, but never \r or \n.
  EXPECT_EQ(pieces(c, "\tword (x ((y"), (V{"\tword", " (", "x", " ((", "y"}));
  EXPECT_EQ(pieces(c, "(x"), (V{"(x"}));
  EXPECT_EQ(pieces(c, "\nword"), (V{"\n", "word"}));
  // \s*[\r\n]+ backs off to the last newline of a whitespace run; \s+(?!\S) leaves one space.
  EXPECT_EQ(pieces(c, "a  \n\n b"), (V{"a", "  \n\n", " b"}));
  EXPECT_EQ(pieces(c, "  x"), (V{" ", " x"}));
  EXPECT_EQ(pieces(c, "ab  "), (V{"ab", "  "}));
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*' keeps following newlines, not '/'.
  EXPECT_EQ(pieces(c, "x...\n\ny"), (V{"x", "...\n\n", "y"}));
  EXPECT_EQ(pieces(c, "!\n/x"), (V{"!\n", "/x"}));
  // A combining mark is not \p{L}: it is punctuation-like here.
  EXPECT_EQ(pieces(c, "e\u0301"), (V{"e", "\u0301"}));
  // Invalid UTF-8 bytes are characters of their own outside every class.
  EXPECT_EQ(pieces(c,
                   "\xff\xfe"
                   "ab \xff"
                   "c"),
            (V{"\xff\xfe", "ab", " \xff", "c"}));
}

TEST(SplitPatterns, Qwen2HasSingleDigits) {
  EXPECT_EQ(pieces(Pattern::Qwen2, "x12345"), (V{"x", "1", "2", "3", "4", "5"}));
  EXPECT_EQ(pieces(Pattern::Qwen2, "I'm 1st"), (V{"I", "'m", " ", "1", "st"}));
}

TEST(SplitPatterns, O200k) {
  const Pattern o = Pattern::O200k;
  // Upper-case runs end before a lower-case run starts a new word only when they are one
  // character: [Lu..]*[Ll..]+ takes "HTTPServer" whole, camelCase splits before each capital.
  EXPECT_EQ(pieces(o, "camelCaseWord"), (V{"camel", "Case", "Word"}));
  EXPECT_EQ(pieces(o, "HTTPServer"), (V{"HTTPServer"}));
  EXPECT_EQ(pieces(o, "ABC def"), (V{"ABC", " def"}));
  // Contractions attach to the word; there is no stand-alone contraction alternative.
  EXPECT_EQ(pieces(o, "HELLO's don't I'M"), (V{"HELLO's", " don't", " I'M"}));
  EXPECT_EQ(pieces(o, " 's"), (V{" '", "s"}));
  // Marks are in both classes: "e\u0301" is one word, and so is " \u0301abc".
  EXPECT_EQ(pieces(o, "e\u0301 \u0301abc"), (V{"e\u0301", " \u0301abc"}));
  EXPECT_EQ(pieces(o, "\u01C5emal"), (V{"\u01C5emal"}));  // titlecase Lt then lower
  EXPECT_EQ(pieces(o, "1234567"), (V{"123", "456", "7"}));
  // ' ?[^\s\p{L}\p{N}]+[\r\n/]*' also takes trailing slashes.
  EXPECT_EQ(pieces(o, "!\n/x"), (V{"!\n/", "x"}));
  EXPECT_EQ(pieces(o, "a  \n\n b"), (V{"a", "  \n\n", " b"}));
}

TEST(SplitPatterns, NamesAndRegexText) {
  Pattern p;
  ASSERT_TRUE(pattern_from_name("o200k", &p));
  EXPECT_EQ(p, Pattern::O200k);
  ASSERT_TRUE(pattern_from_name("r50k", &p));
  EXPECT_EQ(p, Pattern::Gpt2);
  EXPECT_FALSE(pattern_from_name("p50k", &p));
  EXPECT_EQ(pattern_regex(Pattern::Cl100k).substr(0, 30), "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[");
  EXPECT_NE(pattern_regex(Pattern::Qwen2).find("|\\p{N}| ?"), std::string::npos);
}
