// Tokenizers for loom-preprocess / loom-data: "gpt2" (byte-level BPE) and "bytes" (ids 0..255
// plus EOD 256). A Tokenizer is immutable and shared; each thread encodes with its own Encoder.
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
  virtual std::string name() const = 0;  // "gpt2" | "bytes"
  virtual int vocab_size() const = 0;
  virtual int eod() const = 0;  // end-of-document id (GPT-2: <|endoftext|> = 50256)
  virtual std::unique_ptr<Encoder> make_encoder() const = 0;
  // Ids back to bytes; EOD decodes to "<|endoftext|>". Throws UserError for an id out of range.
  virtual std::string decode(const int32_t* ids, size_t n) const = 0;
};

// type "gpt2": vocab/merges are encoder.json + vocab.bpe or vocab.json + merges.txt; when both
// are empty they are looked up in ./data/tokenizer/gpt2 and then <source tree>/data/tokenizer/gpt2.
// type "bytes": needs no files. Anything else is a UserError naming the choices.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& type, const std::string& vocab,
                                          const std::string& merges);

}  // namespace loom::tok
