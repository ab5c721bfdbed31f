// Small hand-made rank files and tokenizer.json files (no downloads): the merge rule on cases
// worked out by hand, int32 storage of ids above 65535, and one clear error per kind of bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "data/indexed_dataset.h"
#include "data_tools/gpt2_bpe.h"
#include "data_tools/preprocess.h"
#include "data_tools/tiktoken_file.h"
#include "data_tools/tokenizer.h"

using namespace loom;
using namespace loom::tok;

namespace {

// One directory per process: ctest runs this binary's cases as parallel processes, and a shared
// directory emptied by each at start would lose another's files mid-test.
std::string dir() {
  static const std::string d = [] {
    const std::string p = std::string(LOOM_BINARY_DIR) + "/tests/scratch/tokenizer_files_" +
                          std::to_string(::getpid());
    EXPECT_EQ(std::system(("rm -rf '" + p + "' && mkdir -p '" + p + "'").c_str()), 0);
    return p;
  }();
  return d;
}
std::string write(const std::string& name, const std::string& text) {
  const std::string path = dir() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}
std::string base64(const std::string& s) {
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < s.size(); i += 3) {
    uint32_t w = uint32_t(uint8_t(s[i])) << 16;
    if (i + 1 < s.size()) w |= uint32_t(uint8_t(s[i + 1])) << 8;
    if (i + 2 < s.size()) w |= uint8_t(s[i + 2]);
    for (size_t k = 0; k < 4; ++k) out += i + k <= s.size() ? a[(w >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}
// 256 byte tokens (rank = byte) and then `extra` with ranks 256, 257, ...
std::string rank_file(const std::vector<std::string>& extra) {
  std::string t;
  for (int b = 0; b < 256; ++b)
    t += base64(std::string(1, char(b))) + " " + std::to_string(b) + "\n";
  for (size_t i = 0; i < extra.size(); ++i)
    t += base64(extra[i]) + " " + std::to_string(256 + i) + "\n";
  return t;
}
std::vector<int32_t> encode(const Tokenizer& tk, const std::string& text) {
  std::vector<int32_t> ids;
  tk.make_encoder()->encode(text, ids);
  return ids;
}
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no UserError";
  return "";
}
#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

// A byte-level tokenizer.json: 256 byte tokens, `extra` tokens from 256 on, `merges` in order.
nlohmann::json hf_json(const std::vector<std::string>& extra,
                       const std::vector<std::string>& merges) {
  nlohmann::json vocab = nlohmann::json::object();
  auto bl = [](const std::string& bytes) {
    std::string s;
    for (unsigned char c : bytes) {
      const uint32_t cp = byte_to_unicode(c);
      if (cp < 0x80) {
        s += char(cp);
      } else {
        s += char(0xC0 | (cp >> 6));
        s += char(0x80 | (cp & 0x3F));
      }
    }
    return s;
  };
  for (int b = 0; b < 256; ++b) vocab[bl(std::string(1, char(b)))] = b;
  for (size_t i = 0; i < extra.size(); ++i) vocab[bl(extra[i])] = 256 + i;
  nlohmann::json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}};
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", pattern_regex(Pattern::Cl100k)}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["added_tokens"] = {{{"id", 300}, {"content", "<|end_of_text|>"}, {"special", true}}};
  return j;
}

}  // namespace

TEST(TokenizerFiles, TiktokenMergesLowestRankLeftmostFirst) {
  // aa=256 ab=257 bc=258 abc=259 aab=260
  const std::string f = write("toy_cl100k.tiktoken", rank_file({"aa", "ab", "bc", "abc", "aab"}));
  auto tk = make_tokenizer("tiktoken:" + f, "", "");
  EXPECT_EQ(tk->vocab_size(), 100277);  // cl100k's special tokens end at 100276
  EXPECT_EQ(encode(*tk, "aaa"), (std::vector<int32_t>{256, 97}));  // leftmost of equal ranks
  EXPECT_EQ(encode(*tk, "abc"), (std::vector<int32_t>{259}));      // a whole-token piece
  // a|a|b|c: aa (256) first, then bc (258) before aab (260).
  EXPECT_EQ(encode(*tk, "aabc"), (std::vector<int32_t>{256, 258}));
  EXPECT_EQ(encode(*tk, "ab ab"), (std::vector<int32_t>{257, 32, 257}));  // " ab" is no token
}

TEST(TokenizerFiles, HfMergesFollowTheMergeList) {
  // aa=256 bc=257 aab=258; merges: a a (0), b c (1), aa b (2).
  const std::string f =
      write("toy.json", hf_json({"aa", "bc", "aab"}, {"a a", "b c", "aa b"}).dump());
  auto tk = make_tokenizer("hf:" + f, "", "");
  EXPECT_EQ(tk->eod(), 300);
  EXPECT_EQ(tk->vocab_size(), 301);
  EXPECT_EQ(encode(*tk, "aabc"), (std::vector<int32_t>{256, 257}));
  EXPECT_EQ(encode(*tk, "aab"), (std::vector<int32_t>{258}));
  const int32_t eod = 300;
  EXPECT_EQ(tk->decode(&eod, 1), "<|end_of_text|>");
}

TEST(TokenizerFiles, VocabulariesAbove65535AreStoredAsInt32) {
  const std::string f = write("toy_o200k.tiktoken", rank_file({"ab"}));
  auto tk = make_tokenizer("tiktoken:" + f, "", "");
  ASSERT_EQ(tk->eod(), 199999);
  PreprocessOptions opt;
  opt.inputs = {write("doc.txt", "ab ab b")};
  opt.output_prefix = dir() + "/int32";
  opt.append_eod = true;
  const PreprocessSummary s = preprocess(opt, *tk);
  // Megatron-LM's rule and dtype codes: int32 (code 4) from 65500 ids on; it has no uint32.
  EXPECT_EQ(s.dtype, mmidx::IdxDType::Int32);
  IndexedDataset ds(opt.output_prefix);
  ASSERT_EQ(ds.dtype(), mmidx::IdxDType::Int32);
  // "ab", " ab" (not a token: " " + ab), " b", then the EOD above 65535.
  ASSERT_EQ(ds.num_tokens(), 6);
  std::vector<int32_t> ids(6);
  ds.read(0, 0, 6, ids.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{256, 32, 256, 32, 98, 199999}));
}

TEST(TokenizerFiles, BadRankFilesAndPatternsAreOneClearLine) {
  std::string bad = rank_file({});
  bad.insert(bad.find('\n', 0) + 1, "not-base64! 300\n");  // line 2
  std::string m =
      error_of([&] { make_tokenizer("tiktoken:" + write("bad_cl100k.tiktoken", bad), "", ""); });
  EXPECT_HAS(m, "bad_cl100k.tiktoken:2: expected \"<base64 token> <rank>\"");
  m = error_of([&] {
    make_tokenizer("tiktoken:" + write("twice_cl100k.tiktoken", rank_file({}) + "YWI= 7\n"), "",
                   "");
  });
  EXPECT_HAS(m, "twice_cl100k.tiktoken:257: rank 7 appears twice");
  m = error_of(
      [&] { make_tokenizer("tiktoken:" + write("few_o200k.tiktoken", "YQ== 0\n"), "", ""); });
  EXPECT_HAS(m, "few_o200k.tiktoken: no token for byte 0");
  const std::string ok = write("ranks.tiktoken", rank_file({}));
  m = error_of([&] { make_tokenizer("tiktoken:" + ok, "", ""); });
  EXPECT_HAS(m, "ranks.tiktoken: cannot tell the encoding from the file name");
  EXPECT_HAS(m, "--tokenizer-pattern r50k|cl100k|o200k");
  m = error_of([&] { make_tokenizer("tiktoken:" + ok, "", "", "p50k"); });
  EXPECT_HAS(m, "unknown tokenizer pattern \"p50k\"");
  EXPECT_HAS(m, "choose r50k, cl100k or o200k");
  m = error_of([&] { make_tokenizer("tiktoken:" + ok, "v.json", "", "cl100k"); });
  EXPECT_HAS(m, "--vocab/--merges are the gpt2 tokenizer's files");
  m = error_of([&] { make_tokenizer("gpt2", "", "", "cl100k"); });
  EXPECT_HAS(m, "is for tiktoken:FILE only");
  m = error_of([&] { make_tokenizer("tiktoken:" + dir() + "/none_cl100k.tiktoken", "", ""); });
  EXPECT_HAS(m, "none_cl100k.tiktoken: cannot read the tiktoken rank file");
  EXPECT_HAS(m, "scripts/get_tiktoken_ranks.sh");
}

TEST(TokenizerFiles, UnsupportedTokenizerJsonKindsAreOneClearLine) {
  auto err = [&](const std::string& name, const nlohmann::json& j) {
    const std::string f = write(name, j.dump());
    return error_of([&] { make_tokenizer("hf:" + f, "", ""); });
  };
  nlohmann::json wp = {{"model", {{"type", "WordPiece"}, {"vocab", {{"a", 0}}}}}};
  std::string m = err("wordpiece.json", wp);
  EXPECT_HAS(m, "wordpiece.json: model.type is WordPiece, not BPE: loom reads byte-level BPE");
  m = err("unigram.json", {{"model", {{"type", "Unigram"}}}});
  EXPECT_HAS(m, "unigram.json: model.type is Unigram (SentencePiece), not BPE");
  nlohmann::json sp = hf_json({}, {});
  sp["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}};
  m = err("metaspace.json", sp);
  EXPECT_HAS(m, "metaspace.json: pre_tokenizer Metaspace is not supported");
  nlohmann::json rx = hf_json({}, {});
  rx["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+|\\s+";
  m = err("regex.json", rx);
  EXPECT_HAS(m, "regex.json: the Split pattern \"\\\\w+|\\\\s+\" is not one loom implements");
  nlohmann::json nf = hf_json({}, {});
  nf["normalizer"] = {{"type", "Lowercase"}};
  m = err("lower.json", nf);
  EXPECT_HAS(m, "lower.json: normalizer Lowercase is not supported");
  nlohmann::json noeod = hf_json({}, {});
  noeod["added_tokens"] = nlohmann::json::array();
  m = err("noeod.json", noeod);
  EXPECT_HAS(m, "noeod.json: no end-of-document token");
  m = err("badmerge.json", hf_json({}, {"a zz"}));
  EXPECT_HAS(m, "badmerge.json: model.merges[0] = \"a zz\" is not a pair of vocabulary tokens");
  const std::string f = write("broken.json", "{\"model\": ");
  m = error_of([&] { make_tokenizer("hf:" + f, "", ""); });
  EXPECT_HAS(m, "broken.json: not valid JSON");
  m = error_of([&] { make_tokenizer("hf:", "", ""); });
  EXPECT_HAS(m, "needs a file after the colon");
}

TEST(TokenizerFiles, LoomPreprocessReportsABadPatternInOneLine) {
  const std::string ranks = write("cli_cl100k.tiktoken", rank_file({}));
  const std::string in = write("cli.txt", "text");
  const std::string cmd = std::string(LOOM_BINARY_DIR) + "/bin/loom-preprocess --input '" + in +
                          "' --output-prefix '" + dir() + "/cli' --tokenizer tiktoken:'" + ranks +
                          "' --tokenizer-pattern o300k 2>'" + dir() + "/err.txt'";
  const int status = std::system(cmd.c_str());
  EXPECT_NE(status, 0);
  std::ifstream f(dir() + "/err.txt");
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all,
            "loom-preprocess: error: unknown tokenizer pattern \"o300k\" for a tiktoken rank file: "
            "choose r50k, cl100k or o200k\n");
  EXPECT_FALSE(std::ifstream(dir() + "/cli.bin").good());
}
