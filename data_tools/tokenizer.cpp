// The tokenizer factory, the bytes tokenizer and the gpt2 adapter over gpt2_bpe.
#include "data_tools/tokenizer.h"

#include <unistd.h>

#include "core/check.h"
#include "data_tools/gpt2_bpe.h"

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

bool readable(const std::string& p) { return ::access(p.c_str(), R_OK) == 0; }

}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& type, const std::string& vocab,
                                          const std::string& merges) {
  if (type == "bytes") return std::make_unique<BytesTokenizer>();
  LOOM_USER_CHECK(type == "gpt2", "unknown tokenizer \"", type, "\": choose gpt2 or bytes");
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
