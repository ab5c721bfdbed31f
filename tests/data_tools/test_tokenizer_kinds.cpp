// tiktoken and tokenizer.json tokenizers: exact ids against the multilingual fixture (reference
// ids from js-tiktoken and the JavaScript port of HF tokenizers), decode round trips, a GPT-2
// tokenizer.json built from encoder.json + vocab.bpe, and both merge loops on random text.
#include <gtest/gtest.h>
#include <zlib.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"
#include "core/rng.h"
#include "data_tools/tiktoken_file.h"
#include "data_tools/tokenizer.h"

using namespace loom;
using namespace loom::tok;

namespace {

const std::string kTokDir = std::string(LOOM_SOURCE_DIR) + "/data/tokenizer";
const std::string kRefDir = std::string(LOOM_SOURCE_DIR) + "/tests/reference/tokenizer";

bool readable(const std::string& p) { return std::ifstream(p).good(); }

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string gunzip(const std::string& path) {
  gzFile g = gzopen(path.c_str(), "rb");
  std::string out;
  char buf[1 << 16];
  int n;
  while (g && (n = gzread(g, buf, sizeof buf)) > 0) out.append(buf, size_t(n));
  if (g) gzclose(g);
  return out;
}

struct Fixture {
  std::vector<std::string> names, texts;
  nlohmann::json ids;  // tokenizer -> [[ids of document 0], ...]
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture x;
    const auto docs = nlohmann::json::parse(slurp(kRefDir + "/multilingual_fixture.json"));
    for (const auto& d : docs.at("documents")) {
      x.names.push_back(d.at("name").get<std::string>());
      x.texts.push_back(d.at("text").get<std::string>());
    }
    x.ids = nlohmann::json::parse(gunzip(kRefDir + "/multilingual_ids.json.gz")).at("ids");
    return x;
  }();
  return f;
}

// Encodes every fixture document twice (the second pass comes from the piece cache) and compares
// with the reference ids of `ref`; decoding must give the text back.
void expect_fixture(const Tokenizer& tk, const std::string& ref) {
  const Fixture& f = fixture();
  ASSERT_GE(f.texts.size(), 400u);
  const auto& want = f.ids.at(ref);
  ASSERT_EQ(want.size(), f.texts.size());
  auto enc = tk.make_encoder();
  size_t tokens = 0, failures = 0;
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < f.texts.size() && failures < 5; ++i) {
      std::vector<int32_t> ids;
      enc->encode(f.texts[i], ids);
      const auto expected = want[i].get<std::vector<int32_t>>();
      tokens += ids.size();
      if (ids != expected) ++failures;
      EXPECT_EQ(ids, expected) << tk.name() << " vs " << ref << ": document \"" << f.names[i]
                               << "\" (pass " << pass << ")";
      if (tk.name() != "hf:qwen2") {  // Qwen normalizes to NFC, so its decode is the NFC text
        EXPECT_EQ(tk.decode(ids.data(), ids.size()), f.texts[i]) << "decode of " << f.names[i];
      }
    }
  EXPECT_GT(tokens, 60000u);
}

#define REQUIRE_FILE(path, script)                                                     \
  if (!readable(path))                                                                 \
  GTEST_SKIP() << path << " is missing: run scripts/" script " (downloads it) to run " \
               << "this test"

}  // namespace

TEST(TiktokenTokenizer, Cl100kMatchesJsTiktoken) {
  const std::string f = kTokDir + "/cl100k_base.tiktoken";
  REQUIRE_FILE(f, "get_tiktoken_ranks.sh");
  auto tk = make_tokenizer("tiktoken:" + f, "", "");
  EXPECT_EQ(tk->name(), "tiktoken:cl100k");
  EXPECT_EQ(tk->vocab_size(), 100277);
  EXPECT_EQ(tk->eod(), 100257);
  expect_fixture(*tk, "cl100k_base");
}

TEST(TiktokenTokenizer, O200kMatchesJsTiktoken) {
  const std::string f = kTokDir + "/o200k_base.tiktoken";
  REQUIRE_FILE(f, "get_tiktoken_ranks.sh");
  auto tk = make_tokenizer("tiktoken:" + f, "", "", "o200k");
  EXPECT_EQ(tk->vocab_size(), 200019);
  EXPECT_EQ(tk->eod(), 199999);
  expect_fixture(*tk, "o200k_base");
}

TEST(TiktokenTokenizer, R50kMatchesJsTiktokenAndTheGpt2Tokenizer) {
  const std::string f = kTokDir + "/r50k_base.tiktoken";
  REQUIRE_FILE(f, "get_tiktoken_ranks.sh");
  auto tk = make_tokenizer("tiktoken:" + f, "", "");
  EXPECT_EQ(tk->vocab_size(), 50257);
  EXPECT_EQ(tk->eod(), 50256);
  expect_fixture(*tk, "r50k_base");
  REQUIRE_FILE(kTokDir + "/gpt2/encoder.json", "get_gpt2_tokenizer.sh");
  expect_fixture(*make_tokenizer("gpt2", "", ""), "r50k_base");  // the same ids as GPT-2's files
}

TEST(HfTokenizer, Llama3MatchesTokenizersJs) {
  const std::string f = kTokDir + "/llama3/tokenizer.json";
  REQUIRE_FILE(f, "get_hf_tokenizers.sh");
  auto tk = make_tokenizer("hf:" + f, "", "");
  EXPECT_EQ(tk->name(), "hf:cl100k");  // Llama 3 splits with cl100k's pattern
  EXPECT_EQ(tk->vocab_size(), 128256);
  EXPECT_EQ(tk->eod(), 128001);  // <|end_of_text|>
  expect_fixture(*tk, "llama3");
}

TEST(HfTokenizer, Qwen3MatchesTokenizersJs) {
  const std::string f = kTokDir + "/qwen3/tokenizer.json";
  REQUIRE_FILE(f, "get_hf_tokenizers.sh");
  auto tk = make_tokenizer("hf:" + f, "", "");
  EXPECT_EQ(tk->name(), "hf:qwen2");
  EXPECT_EQ(tk->eod(), 151643);  // <|endoftext|>
  expect_fixture(*tk, "qwen3");
  // NFC: a decomposed é encodes as the precomposed one.
  std::vector<int32_t> a, b;
  tk->make_encoder()->encode("cafe\u0301", a);
  tk->make_encoder()->encode("caf\u00e9", b);
  EXPECT_EQ(a, b);
}

// A tokenizer.json written from GPT-2's encoder.json + vocab.bpe must give js-tiktoken's GPT-2
// (r50k) ids: an independent check of the tokenizer.json reader on the BPE/ByteLevel form.
TEST(HfTokenizer, Gpt2TokenizerJsonMatchesJsTiktoken) {
  REQUIRE_FILE(kTokDir + "/gpt2/encoder.json", "get_gpt2_tokenizer.sh");
  nlohmann::json tj;
  tj["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"byte_fallback", false}};
  tj["model"]["vocab"] = nlohmann::json::parse(slurp(kTokDir + "/gpt2/encoder.json"));
  std::istringstream merges(slurp(kTokDir + "/gpt2/vocab.bpe"));
  nlohmann::json list = nlohmann::json::array();
  for (std::string line; std::getline(merges, line);)
    if (!line.empty() && line.rfind("#version", 0) != 0) list.push_back(line);
  tj["model"]["merges"] = list;
  tj["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  tj["decoder"] = {{"type", "ByteLevel"}};
  tj["normalizer"] = nullptr;
  tj["added_tokens"] = {{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}};
  const std::string path = std::string(LOOM_BINARY_DIR) + "/tests/gpt2_tokenizer.json";
  std::ofstream(path) << tj.dump();
  auto tk = make_tokenizer("hf:" + path, "", "");
  EXPECT_EQ(tk->vocab_size(), 50257);
  EXPECT_EQ(tk->eod(), 50256);
  expect_fixture(*tk, "r50k_base");
}

TEST(TiktokenTokenizer, SpecialTextIsOrdinaryAndBytesRoundTrip) {
  const std::string f = kTokDir + "/cl100k_base.tiktoken";
  REQUIRE_FILE(f, "get_tiktoken_ranks.sh");
  auto tk = make_tokenizer("tiktoken:" + f, "", "");
  auto enc = tk->make_encoder();
  const std::string text = "a<|endoftext|>b \xff\xfe\xc3 \xed\xa0\x80 end";  // invalid UTF-8 too
  std::vector<int32_t> ids;
  enc->encode(text, ids);
  for (int32_t id : ids) EXPECT_LT(id, 100256) << "a special id from ordinary text";
  EXPECT_EQ(tk->decode(ids.data(), ids.size()), text);
  const int32_t eod = tk->eod();
  EXPECT_EQ(tk->decode(&eod, 1), "<|endoftext|>");
  const int32_t hole = 100256;  // no token has this id
  EXPECT_THROW(tk->decode(&hole, 1), UserError);
}

TEST(TiktokenTokenizer, MergeLoopsAgreeOnRandomText) {
  const std::string f = kTokDir + "/cl100k_base.tiktoken";
  REQUIRE_FILE(f, "get_tiktoken_ranks.sh");
  auto model = load_tiktoken_file(f, Pattern::Cl100k);
  RankBpeEncoder enc(*model, Pattern::Cl100k);
  SplitMix64 rng(11);
  const std::string alphabets[] = {"abcdefghijklmnopqrstuvwxyz", "aeiou tnrs", "ab", "0123456789",
                                   "=-_ /"};
  for (int trial = 0; trial < 300; ++trial) {
    const std::string& al = alphabets[trial % 5];
    std::string s;
    const size_t len = 2 + rng.below(300);
    for (size_t i = 0; i < len; ++i)
      s += trial % 7 == 6 ? char(rng.below(256)) : al[rng.below(al.size())];
    std::vector<int32_t> a, b;
    enc.merge_linear(reinterpret_cast<const uint8_t*>(s.data()), s.size(), a);
    enc.merge_heap(reinterpret_cast<const uint8_t*>(s.data()), s.size(), b);
    ASSERT_EQ(a, b) << "trial " << trial << ": \"" << s << "\"";
  }
}
