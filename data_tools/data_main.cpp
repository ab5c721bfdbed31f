// loom-data: inspect, decode and merge Megatron MMIDIDX datasets.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/check.h"
#include "data/indexed_dataset.h"
#include "data_tools/tokenizer.h"

using namespace loom;

namespace {

const char* kUsage = R"(usage: loom-data COMMAND ...

  inspect PREFIX [--tokenizer T [--vocab F --merges F | --tokenizer-pattern P]]
      counts, document length distribution, token id summary and a consistency check of
      PREFIX.idx against PREFIX.bin; with a tokenizer, also the text of the most frequent ids,
      the EOD count and a check that every id is inside the vocabulary
  decode PREFIX --doc I [--ids] [--tokenizer T [--vocab F --merges F | --tokenizer-pattern P]]
      writes document I (0-based) to stdout as text (exact bytes, no newline added), or its
      ids with --ids; the tokenizer defaults to gpt2
  merge OUT IN...
      concatenates datasets of the same dtype into OUT.bin/.idx without re-tokenizing

T is gpt2, bytes, tiktoken:FILE.tiktoken (P: r50k|cl100k|o200k, by default from the file name)
or hf:tokenizer.json; gpt2 files default to data/tokenizer/gpt2 (scripts/get_gpt2_tokenizer.sh).
)";

struct Options {
  std::vector<std::string> positional;
  std::string tokenizer, vocab, merges, pattern;
  long long doc = -1;
  bool ids = false;
};

Options parse(int argc, char** argv, int first) {
  Options o;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      LOOM_USER_CHECK(i + 1 < argc, a, " needs a value (see loom-data --help)");
      return argv[++i];
    };
    if (a == "--tokenizer")
      o.tokenizer = next();
    else if (a == "--vocab")
      o.vocab = next();
    else if (a == "--merges")
      o.merges = next();
    else if (a == "--tokenizer-pattern")
      o.pattern = next();
    else if (a == "--ids")
      o.ids = true;
    else if (a == "--doc") {
      const std::string v = next();
      char* end = nullptr;
      o.doc = std::strtoll(v.c_str(), &end, 10);
      LOOM_USER_CHECK(!v.empty() && *end == '\0' && o.doc >= 0, "--doc \"", v,
                      "\" must be a document number >= 0");
    } else if (a.rfind("--", 0) == 0) {
      throw UserError(str("unknown option \"", a, "\" (see loom-data --help)"));
    } else {
      o.positional.push_back(a);
    }
  }
  return o;
}

double percentile(const std::vector<int64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  return double(sorted[size_t(p * double(sorted.size() - 1) + 0.5)]);
}

std::string printable(std::string s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7F)
      out += str("\\x", "0123456789abcdef"[c >> 4], "0123456789abcdef"[c & 15]);
    else
      out += char(c);
  }
  return out;
}

int inspect(const Options& o) {
  LOOM_USER_CHECK(o.positional.size() == 1, "inspect takes one PREFIX (see loom-data --help)");
  IndexedDataset ds(o.positional[0]);
  std::unique_ptr<tok::Tokenizer> tk;
  if (!o.tokenizer.empty()) tk = tok::make_tokenizer(o.tokenizer, o.vocab, o.merges, o.pattern);
  std::printf("dataset    %s\n", ds.prefix().c_str());
  std::printf("dtype      %s (code %d)\n", mmidx::dtype_name(ds.dtype()), int(ds.dtype()));
  std::printf("documents  %lld\nsequences  %lld\ntokens     %lld\n",
              static_cast<long long>(ds.num_documents()),
              static_cast<long long>(ds.num_sequences()), static_cast<long long>(ds.num_tokens()));
  std::vector<int64_t> lens(size_t(ds.num_documents()));
  for (int64_t d = 0; d < ds.num_documents(); ++d) lens[size_t(d)] = ds.document_tokens(d);
  std::sort(lens.begin(), lens.end());
  if (!lens.empty())
    std::printf(
        "doc length min %lld  p10 %.0f  p50 %.0f  p90 %.0f  p99 %.0f  max %lld  mean %.1f tokens\n",
        static_cast<long long>(lens.front()), percentile(lens, 0.1), percentile(lens, 0.5),
        percentile(lens, 0.9), percentile(lens, 0.99), static_cast<long long>(lens.back()),
        double(ds.num_tokens()) / double(lens.size()));
  if (!mmidx::is_integer_dtype(ds.dtype())) {
    std::printf("check      OK: header, document index and .bin size agree (not token ids)\n");
    return 0;
  }
  // Counts per id: a table for the usual ids (< 2^24), a map for anything else.
  std::vector<int64_t> table;
  std::unordered_map<int32_t, int64_t> others;
  int32_t lo = INT32_MAX, hi = INT32_MIN;
  int64_t eod_count = 0, eod_ends = 0;
  std::vector<int32_t> buf;
  for (int64_t d = 0; d < ds.num_documents(); ++d) {
    int32_t last = -1;
    for (int64_t s = ds.doc_begin(d); s < ds.doc_end(d); ++s) {
      buf.resize(size_t(ds.sequence_length(s)));
      ds.read(s, 0, int64_t(buf.size()), buf.data());
      for (int32_t t : buf) {
        if (t >= 0 && t < (1 << 24)) {
          if (size_t(t) >= table.size()) table.resize(size_t(t) + 1, 0);
          ++table[size_t(t)];
        } else {
          ++others[t];
        }
        lo = std::min(lo, t), hi = std::max(hi, t);
        if (tk && t == tk->eod()) ++eod_count;
      }
      if (!buf.empty()) last = buf.back();
    }
    if (tk && last == tk->eod()) ++eod_ends;
  }
  std::vector<std::pair<int64_t, int32_t>> top;  // (-count, id)
  for (size_t id = 0; id < table.size(); ++id)
    if (table[id]) top.push_back({-table[id], int32_t(id)});
  for (auto& [id, n] : others) top.push_back({-n, id});
  std::sort(top.begin(), top.end());
  std::printf("token ids  %zu distinct, min %d, max %d\n", top.size(), top.empty() ? 0 : lo,
              top.empty() ? 0 : hi);
  std::printf("most frequent:");
  for (size_t i = 0; i < std::min<size_t>(10, top.size()); ++i) {
    std::printf(" %d (%.1f%%)", top[i].second,
                100.0 * double(-top[i].first) / double(ds.num_tokens()));
    if (tk && top[i].second >= 0 && top[i].second < tk->vocab_size())
      std::printf(" \"%s\"", printable(tk->decode(&top[i].second, 1)).c_str());
  }
  std::printf("\n");
  if (tk) {
    std::printf("eod        id %d: %lld occurrences, ends %lld of %lld documents\n", tk->eod(),
                static_cast<long long>(eod_count), static_cast<long long>(eod_ends),
                static_cast<long long>(ds.num_documents()));
    LOOM_USER_CHECK(top.empty() || (lo >= 0 && hi < tk->vocab_size()), ds.bin_path(), ": token id ",
                    lo < 0 ? lo : hi, " is outside the ", tk->name(), " vocabulary (0..",
                    tk->vocab_size() - 1, "): the dataset was made with another tokenizer");
  }
  std::printf("check      OK: header, document index and .bin size agree\n");
  return 0;
}

int decode(const Options& o) {
  LOOM_USER_CHECK(o.positional.size() == 1,
                  "decode takes one PREFIX and --doc I (see loom-data --help)");
  LOOM_USER_CHECK(o.doc >= 0, "decode needs --doc I (a 0-based document number)");
  IndexedDataset ds(o.positional[0]);
  LOOM_USER_CHECK(o.doc < ds.num_documents(), "--doc ", o.doc, " is out of range: ", ds.prefix(),
                  " has ", ds.num_documents(), " documents (0..", ds.num_documents() - 1, ")");
  std::vector<int32_t> ids;
  for (int64_t s = ds.doc_begin(o.doc); s < ds.doc_end(o.doc); ++s) {
    const size_t at = ids.size();
    ids.resize(at + size_t(ds.sequence_length(s)));
    ds.read(s, 0, ds.sequence_length(s), ids.data() + at);
  }
  if (o.ids) {
    for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
    std::printf("\n");
    return 0;
  }
  auto tk =
      tok::make_tokenizer(o.tokenizer.empty() ? "gpt2" : o.tokenizer, o.vocab, o.merges, o.pattern);
  const std::string text = tk->decode(ids.data(), ids.size());
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

int merge(const Options& o) {
  LOOM_USER_CHECK(o.positional.size() >= 2,
                  "merge takes OUT and at least one IN prefix (see loom-data --help)");
  std::vector<std::unique_ptr<IndexedDataset>> ins;
  for (size_t i = 1; i < o.positional.size(); ++i)
    ins.push_back(std::make_unique<IndexedDataset>(o.positional[i]));
  IndexedDatasetWriter w(o.positional[0], ins[0]->dtype());
  for (const auto& d : ins) w.append(*d);
  w.finish();
  std::printf("loom-data: merged %zu datasets: %lld documents, %lld tokens (%s) -> %s.bin/.idx\n",
              ins.size(), static_cast<long long>(w.num_documents()),
              static_cast<long long>(w.num_tokens()), mmidx::dtype_name(w.dtype()),
              o.positional[0].c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "--help" || cmd == "-h" || cmd == "help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    for (int i = 2; i < argc; ++i)
      if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
        std::fputs(kUsage, stdout);
        return 0;
      }
    LOOM_USER_CHECK(!cmd.empty(),
                    "missing command: inspect, decode or merge (see loom-data --help)");
    const Options o = parse(argc, argv, 2);
    if (cmd == "inspect") return inspect(o);
    if (cmd == "decode") return decode(o);
    if (cmd == "merge") return merge(o);
    throw UserError(str("unknown command \"", cmd,
                        "\": choose inspect, decode or merge (see loom-data --help)"));
  } catch (const UserError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "loom-data: error: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom-data: internal error: %s\n", e.what());
  }
  return 1;
}
