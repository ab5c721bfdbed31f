// The tokenizer factory, the bytes tokenizer, the gpt2 adapter over gpt2_bpe and the rank-BPE
// adapter (tiktoken and tokenizer.json files) over rank_bpe.
#include "data_tools/tokenizer.h"

#include <unistd.h>

#include "core/check.h"
#include "data_tools/gpt2_bpe.h"
#include "data_tools/hf_tokenizer.h"
#include "data_tools/tiktoken_file.h"

namespace loom::tok {

namespace {

class BytesEncoder : public Encoder {
 public:
  void encode(std::string_view text, std::vector<int32_t>& out) override {
    for (unsigned char c : text) out.push_back(int32_t(c));
  }
};

class BytesTokenizer : public Tokenizer {
 public:
  std::string name() const override { return "bytes"; }
  int vocab_size() const override { return 257; }
  int eod() const override { return 256; }
  std::unique_ptr<Encoder> make_encoder() const override {
    return std::make_unique<BytesEncoder>();
  }
  std::string decode(const int32_t* ids, size_t n) const override {
    std::string out;
    out.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      LOOM_USER_CHECK(ids[i] >= 0 && ids[i] <= 256, "token id ", ids[i],
                      " is outside the bytes tokenizer's vocabulary (0..256)");
      if (ids[i] == 256)
        out += "<|endoftext|>";
      else
        out += char(ids[i]);
    }
    return out;
  }
};

class Gpt2TokenEncoder : public Encoder {
 public:
  explicit Gpt2TokenEncoder(const Gpt2Model& m) : enc_(m) {}
  void encode(std::string_view text, std::vector<int32_t>& out) override { enc_.encode(text, out); }

 private:
  Gpt2Encoder enc_;
};

class Gpt2Tokenizer : public Tokenizer {
 public:
  Gpt2Tokenizer(const std::string& vocab, const std::string& merges) : model_(vocab, merges) {}
  std::string name() const override { return "gpt2"; }
  int vocab_size() const override { return model_.vocab_size(); }
  int eod() const override { return model_.eod(); }
  std::unique_ptr<Encoder> make_encoder() const override {
    return std::make_unique<Gpt2TokenEncoder>(model_);
  }
  std::string decode(const int32_t* ids, size_t n) const override {
    std::string out;
    for (size_t i = 0; i < n; ++i) {
      LOOM_USER_CHECK(ids[i] >= 0 && ids[i] < model_.vocab_size(), "token id ", ids[i],
                      " is outside the gpt2 vocabulary (0..", model_.vocab_size() - 1, ")");
      out += model_.token_bytes(ids[i]);
    }
    return out;
  }

 private:
  Gpt2Model model_;
};

// What a rank-BPE encoder does before splitting (tokenizer.json's normalizer and prefix space).
struct TextPrep {
  bool nfc = false, add_prefix_space = false;
};

class RankTokenEncoder : public Encoder {
 public:
  RankTokenEncoder(const RankBpeModel& m, Pattern p, TextPrep prep) : enc_(m, p), prep_(prep) {}
  void encode(std::string_view text, std::vector<int32_t>& out) override {
    if (prep_.nfc && nfc_normalize(text, &scratch_)) text = scratch_;
    if (prep_.add_prefix_space && !text.empty() && text[0] != ' ') {
      if (text.data() != scratch_.data()) scratch_.assign(text);
      scratch_.insert(scratch_.begin(), ' ');
      text = scratch_;
    }
    enc_.encode(text, out);
  }

 private:
  RankBpeEncoder enc_;
  TextPrep prep_;
  std::string scratch_;
};

class RankTokenizer : public Tokenizer {
 public:
  RankTokenizer(std::string name, std::unique_ptr<RankBpeModel> m, Pattern p, int32_t eod,
                TextPrep prep)
      : name_(std::move(name)), m_(std::move(m)), pattern_(p), eod_(eod), prep_(prep) {}
  std::string name() const override { return name_; }
  int vocab_size() const override { return m_->vocab_size(); }
  int eod() const override { return eod_; }
  std::unique_ptr<Encoder> make_encoder() const override {
    return std::make_unique<RankTokenEncoder>(*m_, pattern_, prep_);
  }
  std::string decode(const int32_t* ids, size_t n) const override {
    std::string out;
    for (size_t i = 0; i < n; ++i) {
      LOOM_USER_CHECK(m_->valid(ids[i]), "token id ", ids[i], " is not in the ", name_,
                      " vocabulary (", m_->source(), ")");
      out += m_->token_bytes(ids[i]);
    }
    return out;
  }

 private:
  std::string name_;
  std::unique_ptr<RankBpeModel> m_;
  Pattern pattern_;
  int32_t eod_;
  TextPrep prep_;
};

bool readable(const std::string& p) { return ::access(p.c_str(), R_OK) == 0; }

std::unique_ptr<Tokenizer> make_tiktoken(const std::string& path, const std::string& pattern) {
  Pattern p;
  if (!pattern.empty()) {
    LOOM_USER_CHECK(pattern_from_name(pattern, &p) && p != Pattern::Qwen2,
                    "unknown tokenizer pattern \"", pattern,
                    "\" for a tiktoken rank file: choose r50k, cl100k or o200k");
  } else {
    LOOM_USER_CHECK(pattern_from_rank_file_name(path, &p), path,
                    ": cannot tell the encoding from the file name; name the pre-tokenization "
                    "pattern with --tokenizer-pattern r50k|cl100k|o200k");
  }
  auto m = load_tiktoken_file(path, p);
  const int32_t eod = m->find_special("<|endoftext|>");
  return std::make_unique<RankTokenizer>(str("tiktoken:", pattern_name(p)), std::move(m), p, eod,
                                         TextPrep{});
}

std::unique_ptr<Tokenizer> make_hf(const std::string& path) {
  HfTokenizer hf = load_hf_tokenizer(path);
  return std::make_unique<RankTokenizer>(str("hf:", pattern_name(hf.pattern)), std::move(hf.model),
                                         hf.pattern, hf.eod, TextPrep{hf.nfc, hf.add_prefix_space});
}

}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& type, const std::string& vocab,
                                          const std::string& merges, const std::string& pattern) {
  const bool tiktoken = type.rfind("tiktoken:", 0) == 0, hf = type.rfind("hf:", 0) == 0;
  LOOM_USER_CHECK(type == "gpt2" || type == "bytes" || tiktoken || hf, "unknown tokenizer \"", type,
                  "\": choose gpt2 or bytes, tiktoken:FILE.tiktoken (a rank file) or "
                  "hf:FILE.json (a Hugging Face tokenizer.json)");
  LOOM_USER_CHECK(pattern.empty() || tiktoken, "a tokenizer pattern (\"", pattern,
                  "\") is for tiktoken:FILE only; ", type, " has its own");
  LOOM_USER_CHECK(!(tiktoken || hf) || (vocab.empty() && merges.empty()),
                  "--vocab/--merges are the gpt2 tokenizer's files; ",
                  type.substr(0, type.find(':')), " takes its file in --tokenizer ",
                  type.substr(0, type.find(':')), ":FILE");
  if (type == "bytes") return std::make_unique<BytesTokenizer>();
  if (tiktoken || hf) {
    const std::string path = type.substr(type.find(':') + 1);
    LOOM_USER_CHECK(!path.empty(), "tokenizer \"", type, "\" needs a file after the colon");
    return tiktoken ? make_tiktoken(path, pattern) : make_hf(path);
  }
  LOOM_USER_CHECK(vocab.empty() == merges.empty(),
                  "gpt2 tokenizer: give both --vocab (encoder.json/vocab.json) and --merges "
                  "(vocab.bpe/merges.txt), or neither to use data/tokenizer/gpt2");
  if (!vocab.empty()) return std::make_unique<Gpt2Tokenizer>(vocab, merges);
  std::vector<std::string> dirs = {"data/tokenizer/gpt2"};
#ifdef LOOM_SOURCE_ROOT
  dirs.push_back(std::string(LOOM_SOURCE_ROOT) + "/data/tokenizer/gpt2");
#endif
  for (const std::string& d : dirs) {
    if (readable(d + "/encoder.json") && readable(d + "/vocab.bpe"))
      return std::make_unique<Gpt2Tokenizer>(d + "/encoder.json", d + "/vocab.bpe");
    if (readable(d + "/vocab.json") && readable(d + "/merges.txt"))
      return std::make_unique<Gpt2Tokenizer>(d + "/vocab.json", d + "/merges.txt");
  }
  throw UserError(str("gpt2 tokenizer files not found in ", dirs.back(),
                      ": run scripts/get_gpt2_tokenizer.sh, or pass --vocab and --merges"));
}

}  // namespace loom::tok
