// Tokenizers for loom-preprocess / loom-data / loom generate: "gpt2", "tiktoken:FILE",
// "hf:tokenizer.json" (byte-level BPE) and "bytes". Immutable and shared; each thread encodes
// with its own Encoder. Text is always encoded as ordinary text: special-token strings such as
// <|endoftext|> inside a document are not turned into special ids.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace loom::tok {

class Encoder {
 public:
  virtual ~Encoder() = default;
  virtual void encode(std::string_view text, std::vector<int32_t>& out) = 0;  // appends ids
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;  // "gpt2", "bytes", "tiktoken:cl100k", "hf:qwen2", ...
  virtual int vocab_size() const = 0;
  virtual int eod() const = 0;  // end-of-document id (GPT-2: <|endoftext|> = 50256)
  virtual std::unique_ptr<Encoder> make_encoder() const = 0;
  // Ids back to bytes; special ids decode to their text (EOD: "<|endoftext|>" or the model's).
  // Throws UserError for an id outside the vocabulary.
  virtual std::string decode(const int32_t* ids, size_t n) const = 0;
};

// type "gpt2": vocab/merges are encoder.json + vocab.bpe or vocab.json + merges.txt; when both
// are empty they are looked up in ./data/tokenizer/gpt2 and then <source tree>/data/tokenizer/gpt2.
// type "bytes": needs no files.
// type "tiktoken:PATH": a .tiktoken rank file; `pattern` (r50k | cl100k | o200k) picks the
// pre-tokenization pattern and special tokens, by default read from the file name.
// type "hf:PATH": a byte-level BPE tokenizer.json (hf_tokenizer.h says which ones).
// Anything else is a UserError naming the choices; so are vocab/merges or a pattern given to a
// type that does not use them.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& type, const std::string& vocab,
                                          const std::string& merges,
                                          const std::string& pattern = "");

}  // namespace loom::tok
