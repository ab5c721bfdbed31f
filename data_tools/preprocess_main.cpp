// loom-preprocess: raw text/JSONL corpora -> Megatron MMIDIDX datasets (PREFIX.bin/.idx).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/check.h"
#include "data/indexed_dataset.h"
#include "data_tools/preprocess.h"

using namespace loom;
using namespace loom::tok;

namespace {

const char* kUsage = R"(usage: loom-preprocess --input PATH... --output-prefix PREFIX [options]

Tokenizes text corpora into a Megatron-LM compatible indexed dataset PREFIX.bin + PREFIX.idx
(uint16 tokens when the vocabulary has fewer than 65500 ids, else int32, as Megatron-LM does).

  --input PATH...        files, directories (searched recursively) or quoted globs of .txt,
                         .jsonl/.json (one JSON object per line), each optionally .gz;
                         may be repeated
  --output-prefix P      writes P.bin and P.idx (created under temporary names, renamed at the end)
  --tokenizer T          gpt2 (default), bytes (ids 0..255, EOD 256),
                         tiktoken:FILE.tiktoken (a tiktoken rank file: cl100k_base, o200k_base,
                         r50k_base; see scripts/get_tiktoken_ranks.sh) or
                         hf:FILE.json (a byte-level BPE Hugging Face tokenizer.json: GPT-2,
                         Llama 3, Qwen 2/3, ...)
  --tokenizer-pattern P  tiktoken only: r50k, cl100k or o200k (pre-tokenization pattern and
                         special tokens; default: from the rank file's name)
  --vocab F --merges F   GPT-2 files: encoder.json + vocab.bpe, or vocab.json + merges.txt
                         (default: data/tokenizer/gpt2, see scripts/get_gpt2_tokenizer.sh)
  --json-key K           JSONL field holding the text (default: text)
  --split-docs M         text files: file (one document per file, default) or paragraph
                         (one document per blank-line separated paragraph)
  --append-eod           end every document with the EOD token (<|endoftext|>; a tokenizer.json's
                         <|endoftext|>, <|end_of_text|>, </s> or <eos>)
  --skip-bad             count and skip malformed JSONL lines instead of stopping
  --workers N            tokenizing threads (default: the number of cores); the output is
                         byte-identical for every N
  --help                 this text
)";

int parse_int(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  long x = std::strtol(v.c_str(), &end, 10);
  LOOM_USER_CHECK(!v.empty() && end && *end == '\0' && x >= -1000000 && x <= 1000000, flag, " \"",
                  v, "\" is not an integer");
  return int(x);
}

std::string mb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MB", bytes / 1e6);
  return buf;
}

int run(int argc, char** argv) {
  PreprocessOptions opt;
  opt.workers = int(std::max(1u, std::thread::hardware_concurrency()));
  std::string tokenizer = "gpt2", vocab, merges, pattern;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], value;
    const size_t eq = a.find('=');
    const bool inline_value = a.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inline_value) value = a.substr(eq + 1), a = a.substr(0, eq);
    auto next = [&]() -> std::string {
      if (inline_value) return value;
      LOOM_USER_CHECK(i + 1 < argc, a, " needs a value (see loom-preprocess --help)");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--input") {
      if (inline_value)
        opt.inputs.push_back(value);
      else {
        const size_t before = opt.inputs.size();
        while (i + 1 < argc && std::strncmp(argv[i + 1], "--", 2) != 0)
          opt.inputs.push_back(argv[++i]);
        LOOM_USER_CHECK(opt.inputs.size() > before, "--input needs at least one path");
      }
    } else if (a == "--output-prefix") {
      opt.output_prefix = next();
    } else if (a == "--tokenizer") {
      tokenizer = next();
    } else if (a == "--vocab") {
      vocab = next();
    } else if (a == "--merges") {
      merges = next();
    } else if (a == "--tokenizer-pattern") {
      pattern = next();
    } else if (a == "--json-key") {
      opt.json_key = next();
    } else if (a == "--split-docs") {
      opt.split_docs = next();
    } else if (a == "--workers") {
      opt.workers = parse_int("--workers", next());
    } else if (a == "--append-eod" && !inline_value) {
      opt.append_eod = true;
    } else if (a == "--skip-bad" && !inline_value) {
      opt.skip_bad = true;
    } else {
      throw UserError(str("unknown argument \"", argv[i], "\" (see loom-preprocess --help)"));
    }
  }
  LOOM_USER_CHECK(!opt.inputs.empty(), "--input is required (see loom-preprocess --help)");
  LOOM_USER_CHECK(!opt.output_prefix.empty(),
                  "--output-prefix is required (see loom-preprocess --help)");
  opt.progress = ::isatty(STDERR_FILENO) != 0;
  auto tk = make_tokenizer(tokenizer, vocab, merges, pattern);
  const PreprocessSummary s = preprocess(opt, *tk);
  std::printf(
      "loom-preprocess: %lld documents, %lld tokens (%s), %s of text from %lld file(s) in %.2f s "
      "(%.2f MB/s, %d worker%s) -> %s.bin/.idx\n",
      static_cast<long long>(s.documents), static_cast<long long>(s.tokens),
      mmidx::dtype_name(s.dtype), mb(double(s.text_bytes)).c_str(),
      static_cast<long long>(s.input_files), s.seconds,
      double(s.text_bytes) / 1e6 / std::max(s.seconds, 1e-9), opt.workers,
      opt.workers == 1 ? "" : "s", opt.output_prefix.c_str());
  if (s.empty_skipped || s.bad_skipped)
    std::printf("loom-preprocess: skipped %lld empty document(s) and %lld bad line(s)\n",
                static_cast<long long>(s.empty_skipped), static_cast<long long>(s.bad_skipped));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UserError& e) {
    if (::isatty(STDERR_FILENO)) std::fputs("\r\033[K", stderr);  // clear a progress line
    std::fprintf(stderr, "loom-preprocess: error: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom-preprocess: internal error: %s\n", e.what());
  }
  return 1;
}
