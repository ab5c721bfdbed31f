// Hugging Face tokenizer.json files of byte-level BPE models (GPT-2, Llama 3, Qwen 2/3, ...):
// model.type BPE with a ByteLevel pre-tokenizer, optionally after one regex Split whose pattern
// is one loom implements (split_patterns.h), and a null or NFC normalizer. Anything else is
// refused with one line naming the file, the kind found and what is supported.
#pragma once
#include <memory>
#include <string>

#include "data_tools/rank_bpe.h"

namespace loom::tok {

struct HfTokenizer {
  std::unique_ptr<RankBpeModel> model;  // vocab + merges; added_tokens decode only
  Pattern pattern = Pattern::Gpt2;
  bool add_prefix_space = false;  // ByteLevel's: a space before text that does not start with one
  bool nfc = false;               // normalizer NFC
  int32_t eod = -1;  // <|endoftext|>, <|end_of_text|>, </s> or <eos>, the first one present
};

HfTokenizer load_hf_tokenizer(const std::string& path);

// Text normalized to NFC (ICU); invalid UTF-8 bytes are kept as they are. Returns false (and
// leaves `out` alone) when `text` is already in NFC.
bool nfc_normalize(std::string_view text, std::string* out);

}  // namespace loom::tok
