// loom-preprocess / loom-data end to end: round trips, worker-count independence, merge,
// inspect, and every kind of bad input (one line on stderr, non-zero exit, nothing left behind).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <zlib.h>

#include <fstream>
#include <sstream>

#include "core/check.h"
#include "data/indexed_dataset.h"
#include "data_tools/preprocess.h"
#include "data_tools/tokenizer.h"

using namespace loom;
using namespace loom::tok;

namespace {

const std::string kBin = std::string(LOOM_BINARY_DIR) + "/bin/";
const std::string kGpt2 = std::string(LOOM_SOURCE_DIR) + "/data/tokenizer/gpt2";

std::string scratch(const std::string& name) {
  std::string dir = std::string(LOOM_BINARY_DIR) + "/tests/scratch/pp_" + name;
  EXPECT_EQ(std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()), 0);
  return dir;
}
std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
void write(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary) << data;
}
void write_gz(const std::string& path, const std::string& data) {
  gzFile g = gzopen(path.c_str(), "wb");
  gzwrite(g, data.data(), unsigned(data.size()));
  gzclose(g);
}

struct Result {
  int code;
  std::string out, err;
};
Result run(const std::string& dir, const std::string& args) {
  const std::string cmd = "cd '" + dir + "' && " + args + " >stdout.txt 2>stderr.txt";
  int status = std::system(cmd.c_str());
  Result r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(dir + "/stdout.txt"),
           slurp(dir + "/stderr.txt")};
  std::remove((dir + "/stdout.txt").c_str());
  std::remove((dir + "/stderr.txt").c_str());
  return r;
}
std::string listing(const std::string& dir) {
  FILE* p = popen(("ls -A '" + dir + "'").c_str(), "r");
  std::string out;
  char buf[512];
  while (p && fgets(buf, sizeof buf, p)) out += buf;
  if (p) pclose(p);
  return out;
}

// Every document of PREFIX decoded by `tk`.
std::vector<std::string> decode_all(const std::string& prefix, const Tokenizer& tk,
                                    bool strip_eod) {
  IndexedDataset ds(prefix);
  std::vector<std::string> docs;
  for (int64_t d = 0; d < ds.num_documents(); ++d) {
    std::vector<int32_t> ids(size_t(ds.document_tokens(d)));
    ds.read(ds.doc_begin(d), 0, int64_t(ids.size()), ids.data());
    EXPECT_EQ(ds.doc_end(d) - ds.doc_begin(d), 1);
    if (strip_eod) {
      EXPECT_FALSE(ids.empty());
      EXPECT_EQ(ids.back(), tk.eod());
      ids.pop_back();
    }
    docs.push_back(tk.decode(ids.data(), ids.size()));
  }
  return docs;
}

// A small corpus in every input form, with the documents each should yield.
struct Corpus {
  std::vector<std::string> inputs, expected;
};
Corpus make_corpus(const std::string& dir) {
  Corpus c;
  const std::string t1 = "First file.\nIt has two lines and a tab\t and a \xff bad byte.\n";
  const std::string t2 = "Grüße, Привет, 中文 👍🏽 — it's 2024!   \n\n\n";
  write(dir + "/a.txt", t1);
  write_gz(dir + "/b.txt.gz", t2);
  c.inputs = {"a.txt", "b.txt.gz"};
  c.expected = {t1, t2};
  const std::string j =
      "{\"text\": \"json \\\"one\\\"\\nline\", \"id\": 1}\n\n{\"id\": 2, \"text\": "
      "\"\\u00e9t\\u00e9 \\ud83d\\ude00\"}\r\n";
  write(dir + "/c.jsonl", j);
  write_gz(dir + "/d.jsonl.gz", "{\"text\": \"gz json\"}");  // no final newline
  c.inputs.push_back("c.jsonl");
  c.inputs.push_back("d.jsonl.gz");
  for (const char* s : {"json \"one\"\nline", "\xc3\xa9t\xc3\xa9 \xf0\x9f\x98\x80", "gz json"})
    c.expected.push_back(s);
  return c;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += " " + x;
  return s;
}

}  // namespace

TEST(Preprocess, RoundTripEveryInputFormBytesAndGpt2) {
  const std::string dir = scratch("roundtrip");
  Corpus c = make_corpus(dir);
  std::vector<std::string> tokenizers = {"bytes"};
  if (std::ifstream(kGpt2 + "/encoder.json").good())
    tokenizers.push_back("gpt2");
  else
    std::cerr << "note: GPT-2 files missing, gpt2 round trip skipped (run "
                 "scripts/get_gpt2_tokenizer.sh)\n";
  for (const std::string& t : tokenizers) {
    Result r = run(dir, kBin + "loom-preprocess --tokenizer " + t +
                            " --append-eod --workers 2 --output-prefix out/" + t + " --input" +
                            join(c.inputs));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("5 documents"), std::string::npos) << r.out;
    auto tk = make_tokenizer(t, "", "");
    EXPECT_EQ(decode_all(dir + "/out/" + t, *tk, true), c.expected) << t;
    // loom-data decode prints the exact bytes (the EOD becomes "<|endoftext|>").
    r = run(dir, kBin + "loom-data decode out/" + t + " --doc 1 --tokenizer " + t);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, c.expected[1] + "<|endoftext|>");
  }
}

TEST(Preprocess, ParagraphsAndDirectoriesAndGlobs) {
  const std::string dir = scratch("paragraph");
  ASSERT_EQ(std::system(("mkdir -p '" + dir + "/corpus/sub'").c_str()), 0);
  write(dir + "/corpus/sub/z.txt", "\n\npara one\nstill one\n  \t\npara two\r\n\n\n\npara three");
  write(dir + "/corpus/a.txt", "alpha\n\nbeta\n");
  write(dir + "/corpus/skip.md", "not a corpus file");
  Result r = run(dir, kBin +
                          "loom-preprocess --tokenizer bytes --split-docs paragraph "
                          "--output-prefix p --input corpus");
  ASSERT_EQ(r.code, 0) << r.err;
  auto tk = make_tokenizer("bytes", "", "");
  // Sorted paths: corpus/a.txt before corpus/sub/z.txt; blank (whitespace-only) lines separate.
  std::vector<std::string> want = {"alpha", "beta", "para one\nstill one", "para two\r",
                                   "para three"};
  EXPECT_EQ(decode_all(dir + "/p", *tk, false), want);
  r = run(dir, kBin +
                   "loom-preprocess --tokenizer bytes --output-prefix g --input 'corpus/*.[tm]*' "
                   "corpus/sub/z.txt");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(IndexedDataset(dir + "/g").num_documents(), 2);  // a.txt and z.txt; skip.md passed over
}

TEST(Preprocess, OutputIdenticalForAnyWorkerCount) {
  const std::string dir = scratch("workers");
  // ~3 MB of mixed JSONL so that the 1 MB batches split it several times.
  std::string jsonl;
  for (int i = 0; i < 12000; ++i) {
    jsonl += "{\"text\": \"Document " + std::to_string(i) + ": ";
    for (int k = 0; k < 1 + i % 23; ++k)
      jsonl += "word" + std::to_string((i * 31 + k * 7) % 997) + " it's Ünïcödé 42, ";
    jsonl += "\"}\n";
  }
  write(dir + "/in.jsonl", jsonl);
  const std::string tok = std::ifstream(kGpt2 + "/encoder.json").good() ? "gpt2" : "bytes";
  for (int w : {1, 4}) {
    Result r =
        run(dir, kBin + "loom-preprocess --input in.jsonl --append-eod --tokenizer " + tok +
                     " --output-prefix w" + std::to_string(w) + " --workers " + std::to_string(w));
    ASSERT_EQ(r.code, 0) << r.err;
  }
  EXPECT_EQ(slurp(dir + "/w1.bin"), slurp(dir + "/w4.bin"));
  EXPECT_EQ(slurp(dir + "/w1.idx"), slurp(dir + "/w4.idx"));
  // Small batches through the library: many more batch boundaries, same bytes.
  auto tk = make_tokenizer(tok, "", "");
  for (int w : {1, 2, 3}) {
    PreprocessOptions o;
    o.inputs = {dir + "/in.jsonl"};
    o.output_prefix = dir + "/lib" + std::to_string(w);
    o.append_eod = true;
    o.workers = w;
    o.batch_bytes = 3000;
    preprocess(o, *tk);
    EXPECT_EQ(slurp(o.output_prefix + ".bin"), slurp(dir + "/w1.bin")) << w << " workers";
    EXPECT_EQ(slurp(o.output_prefix + ".idx"), slurp(dir + "/w1.idx")) << w << " workers";
  }
}

TEST(LoomData, MergeAndInspect) {
  const std::string dir = scratch("merge");
  write(dir + "/a.txt", "first");
  write(dir + "/b.txt", "second doc");
  ASSERT_EQ(
      run(dir, kBin + "loom-preprocess --tokenizer bytes --output-prefix a --input a.txt").code, 0);
  ASSERT_EQ(
      run(dir, kBin + "loom-preprocess --tokenizer bytes --output-prefix b --input b.txt a.txt")
          .code,
      0);
  Result r = run(dir, kBin + "loom-data merge m a b");
  ASSERT_EQ(r.code, 0) << r.err;
  auto tk = make_tokenizer("bytes", "", "");
  EXPECT_EQ(decode_all(dir + "/m", *tk, false),
            (std::vector<std::string>{"first", "second doc", "first"}));
  r = run(dir, kBin + "loom-data inspect m --tokenizer bytes");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("documents  3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokens     20"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("check      OK"), std::string::npos) << r.out;
  for (const char* tool :
       {"loom-preprocess --help", "loom-data --help", "loom-data inspect --help"}) {
    r = run(dir, kBin + tool);
    EXPECT_EQ(r.code, 0) << tool;
    EXPECT_NE(r.out.find("usage:"), std::string::npos) << tool;
  }
}

TEST(Preprocess, BadInputIsOneLineNonZeroAndLeavesNothing) {
  const std::string dir = scratch("bad");
  write(dir + "/bad.jsonl",
        "{\"text\": \"ok\"}\n{\"text\": \"ok too\"}\n{\"text\": broken}\n{\"text\": \"after\"}\n");
  write(dir + "/nokey.jsonl", "{\"body\": \"x\"}\n");
  write(dir + "/number.jsonl", "{\"text\": 5}\n");
  write(dir + "/empty.txt", "");
  write(dir + "/blank.jsonl", "\n\n  \n");
  write(dir + "/notes.md", "x");
  write(dir + "/broken_vocab.json", "{\"a\": ");
  write(dir + "/ok.txt", "some text");
  std::string gz;
  {
    write_gz(dir + "/full.txt.gz", std::string(100000, 'x'));
    gz = slurp(dir + "/full.txt.gz");
    write(dir + "/trunc.txt.gz", gz.substr(0, gz.size() / 2));
  }
  struct Bad {
    std::string args, needle;
  } cases[] = {
      {"--input bad.jsonl", "bad.jsonl:3: malformed JSON"},
      {"--input nokey.jsonl", "nokey.jsonl:1: no \"text\" key"},
      {"--input nokey.jsonl --json-key content", "nokey.jsonl:1: no \"content\" key"},
      {"--input number.jsonl", "number.jsonl:1: \"text\" is not a string"},
      {"--input empty.txt", "no documents found"},
      {"--input blank.jsonl", "no documents found"},
      {"--input missing.txt", "missing.txt: no such file"},
      {"--input 'nomatch*.txt'", "nomatch*.txt: the pattern matches no file"},
      {"--input '*.md'", "*.md: the pattern matches no .txt"},
      {"--input notes.md", "notes.md: unknown input type"},
      {"--input trunc.txt.gz", "trunc.txt.gz: cannot read"},
      {"--input ok.txt --tokenizer gpt2 --vocab broken_vocab.json --merges ok.txt",
       "broken_vocab.json: the vocabulary does not parse"},
      {"--input ok.txt --tokenizer wordpiece", "unknown tokenizer"},
      {"--input ok.txt --workers 0", "--workers 0"},
      {"--input ok.txt --frobnicate", "unknown argument"},
      {"--input ok.txt --split-docs line", "--split-docs"},
  };
  for (const Bad& b : cases) {
    Result r = run(dir, kBin + "loom-preprocess --tokenizer bytes --output-prefix out/x " + b.args);
    EXPECT_NE(r.code, 0) << b.args;
    EXPECT_EQ(r.err.rfind("loom-preprocess: error: ", 0), 0u) << b.args << ": " << r.err;
    EXPECT_NE(r.err.find(b.needle), std::string::npos) << b.args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << b.args << ": " << r.err;
    EXPECT_EQ(listing(dir + "/out"), "") << b.args << " left files behind";
  }
  Result r = run(
      dir,
      kBin +
          "loom-preprocess --tokenizer bytes --output-prefix out/x --input bad.jsonl --skip-bad");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("3 documents"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 bad line"), std::string::npos) << r.out;
}

TEST(LoomData, CorruptDatasetsAreNamed) {
  const std::string dir = scratch("corrupt");
  write(dir + "/a.txt", "some text for a dataset");
  ASSERT_EQ(
      run(dir, kBin + "loom-preprocess --tokenizer bytes --output-prefix a --input a.txt").code, 0);
  const std::string idx = slurp(dir + "/a.idx"), bin = slurp(dir + "/a.bin");
  write(dir + "/t.idx", idx);
  write(dir + "/t.bin", bin.substr(0, bin.size() - 2));
  write(dir + "/i.idx", idx.substr(0, idx.size() - 3));
  write(dir + "/i.bin", bin);
  std::string bad_dtype = idx;
  bad_dtype[17] = 12;
  write(dir + "/d.idx", bad_dtype);
  write(dir + "/d.bin", bin);
  for (auto [prefix, needle] :
       {std::pair<std::string, std::string>{"t", "t.bin is 44 bytes but t.idx describes 46 bytes"},
        {"i", "i.idx: truncated"},
        {"d", "d.idx: dtype code 12 is out of range"},
        {"nothere", "nothere.idx: cannot open"}}) {
    Result r = run(dir, kBin + "loom-data inspect " + prefix);
    EXPECT_NE(r.code, 0) << prefix;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  Result r = run(dir, kBin + "loom-data decode a --doc 5 --tokenizer bytes");
  EXPECT_NE(r.err.find("--doc 5 is out of range"), std::string::npos) << r.err;
  r = run(dir, kBin + "loom-data frob");
  EXPECT_NE(r.err.find("unknown command"), std::string::npos) << r.err;
}
