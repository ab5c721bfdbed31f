// GPT-2 tokenizer: exact ids against the committed reference fixture (js-tiktoken + Python
// regex), decode round trips, both merge strategies, the bytes tokenizer and bad vocab files.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"
#include "core/rng.h"
#include "data_tools/gpt2_bpe.h"
#include "data_tools/tokenizer.h"

using namespace loom;
using namespace loom::tok;

namespace {

const std::string kGpt2Dir = std::string(LOOM_SOURCE_DIR) + "/data/tokenizer/gpt2";

bool have_gpt2() {
  return std::ifstream(kGpt2Dir + "/encoder.json").good() &&
         std::ifstream(kGpt2Dir + "/vocab.bpe").good();
}

#define REQUIRE_GPT2()                                                                        \
  if (!have_gpt2())                                                                           \
  GTEST_SKIP() << "GPT-2 files not in " << kGpt2Dir << ": run scripts/get_gpt2_tokenizer.sh " \
               << "(scripts/test.sh does) to run this test"

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out += char(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

struct Case {
  std::string name, text;
  std::vector<int32_t> ids;
};

std::vector<Case> fixture() {
  auto j = nlohmann::json::parse(
      slurp(std::string(LOOM_SOURCE_DIR) + "/tests/reference/tokenizer/gpt2_fixture.json"));
  std::vector<Case> cases;
  for (const auto& c : j.at("cases")) {
    Case k;
    k.name = c.at("name").get<std::string>();
    k.text = c.contains("hex") ? from_hex(c.at("hex").get<std::string>())
                               : c.at("text").get<std::string>();
    k.ids = c.at("ids").get<std::vector<int32_t>>();
    cases.push_back(k);
  }
  return cases;
}

std::string expect_user_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no UserError";
  return "";
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

}  // namespace

TEST(Gpt2Tokenizer, MatchesReferenceFixtureExactly) {
  REQUIRE_GPT2();
  auto tk = make_tokenizer("gpt2", kGpt2Dir + "/encoder.json", kGpt2Dir + "/vocab.bpe");
  EXPECT_EQ(tk->vocab_size(), 50257);
  EXPECT_EQ(tk->eod(), 50256);
  auto cases = fixture();
  ASSERT_GE(cases.size(), 60u);
  auto enc = tk->make_encoder();
  for (int pass = 0; pass < 2; ++pass) {  // the second pass is served from the piece cache
    for (const Case& c : cases) {
      std::vector<int32_t> ids;
      enc->encode(c.text, ids);
      EXPECT_EQ(ids, c.ids) << "case \"" << c.name << "\" (pass " << pass << ")";
      EXPECT_EQ(tk->decode(ids.data(), ids.size()), c.text) << "decode of \"" << c.name << "\"";
    }
  }
}

TEST(Gpt2Tokenizer, HuggingFaceFileNamesAndDefaultLookup) {
  REQUIRE_GPT2();
  const std::string dir = std::string(LOOM_BINARY_DIR) + "/tests";
  write(dir + "/hf_vocab.json", slurp(kGpt2Dir + "/encoder.json"));
  write(dir + "/hf_merges.txt", slurp(kGpt2Dir + "/vocab.bpe"));
  auto hf = make_tokenizer("gpt2", dir + "/hf_vocab.json", dir + "/hf_merges.txt");
  auto def = make_tokenizer("gpt2", "", "");  // data/tokenizer/gpt2 in the source tree
  std::vector<int32_t> a, b;
  hf->make_encoder()->encode("Hello world, it's 2024!", a);
  def->make_encoder()->encode("Hello world, it's 2024!", b);
  // Ids from js-tiktoken getEncoding("gpt2").
  EXPECT_EQ(a, (std::vector<int32_t>{15496, 995, 11, 340, 338, 48609, 0}));
  EXPECT_EQ(a, b);
}

TEST(Gpt2Tokenizer, MergeStrategiesAgreeOnRandomText) {
  REQUIRE_GPT2();
  Gpt2Model model(kGpt2Dir + "/encoder.json", kGpt2Dir + "/vocab.bpe");
  Gpt2Encoder enc(model);
  SplitMix64 rng(5);
  const std::string alphabets[] = {"abcdefghijklmnopqrstuvwxyz", "aeiou tnrs", "ab", "0123456789",
                                   "=-_ "};
  for (int trial = 0; trial < 300; ++trial) {
    const std::string& al = alphabets[trial % 5];
    std::string s;
    const size_t len = 2 + rng.below(400);
    for (size_t i = 0; i < len; ++i) {
      if (trial % 7 == 6)
        s += char(rng.below(256));  // arbitrary bytes, invalid UTF-8 included
      else
        s += al[rng.below(al.size())];
    }
    std::vector<int32_t> a, b;
    enc.bpe_passes(reinterpret_cast<const uint8_t*>(s.data()), s.size(), a);
    enc.bpe_heap(reinterpret_cast<const uint8_t*>(s.data()), s.size(), b);
    ASSERT_EQ(a, b) << "trial " << trial << ": \"" << s << "\"";
  }
}

TEST(BytesTokenizer, IdsAreBytesPlusEod) {
  auto tk = make_tokenizer("bytes", "", "");
  EXPECT_EQ(tk->vocab_size(), 257);
  EXPECT_EQ(tk->eod(), 256);
  std::string text = std::string("a\xff\x00z", 4);
  std::vector<int32_t> ids;
  tk->make_encoder()->encode(text, ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{97, 255, 0, 122}));
  ids.push_back(256);
  EXPECT_EQ(tk->decode(ids.data(), ids.size()), text + "<|endoftext|>");
  int32_t bad = 257;
  EXPECT_THROW(tk->decode(&bad, 1), UserError);
}

TEST(Tokenizer, BadFilesAndChoicesAreUserErrors) {
  const std::string dir = std::string(LOOM_BINARY_DIR) + "/tests";
  std::string m = expect_user_error([] { make_tokenizer("sentencepiece", "", ""); });
  EXPECT_NE(m.find("gpt2 or bytes"), std::string::npos) << m;
  m = expect_user_error(
      [&] { make_tokenizer("gpt2", dir + "/missing.json", dir + "/missing.bpe"); });
  EXPECT_NE(m.find("missing.json: cannot read"), std::string::npos) << m;
  write(dir + "/broken.json", "{\"a\": 0, ");
  write(dir + "/ok.bpe", "#version: 0.2\n");
  m = expect_user_error([&] { make_tokenizer("gpt2", dir + "/broken.json", dir + "/ok.bpe"); });
  EXPECT_NE(m.find("broken.json: the vocabulary does not parse"), std::string::npos) << m;
  write(dir + "/array.json", "[1, 2]");
  m = expect_user_error([&] { make_tokenizer("gpt2", dir + "/array.json", dir + "/ok.bpe"); });
  EXPECT_NE(m.find("array.json"), std::string::npos) << m;
  m = expect_user_error([&] { make_tokenizer("gpt2", dir + "/x.json", ""); });
  EXPECT_NE(m.find("give both --vocab"), std::string::npos) << m;
  if (!have_gpt2()) return;
  write(dir + "/bad_merges.bpe", "#version: 0.2\n\xC4\xA0 t\nthis line has three\n");
  m = expect_user_error(
      [&] { make_tokenizer("gpt2", kGpt2Dir + "/encoder.json", dir + "/bad_merges.bpe"); });
  EXPECT_NE(m.find("bad_merges.bpe:3"), std::string::npos) << m;
  write(dir + "/unknown_merges.bpe", "#version: 0.2\nqqqqqq zzzzzz\n");
  m = expect_user_error(
      [&] { make_tokenizer("gpt2", kGpt2Dir + "/encoder.json", dir + "/unknown_merges.bpe"); });
  EXPECT_NE(m.find("unknown_merges.bpe:2"), std::string::npos) << m;
}
