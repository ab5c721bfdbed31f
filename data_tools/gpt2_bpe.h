// GPT-2 byte-level BPE: the vocabulary and merge ranks (encoder.json + vocab.bpe, or the same
// files under their Hugging Face names vocab.json + merges.txt) and a per-thread encoder.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data_tools/merge_table.h"
#include "data_tools/pretokenize.h"

namespace loom::tok {

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the other 68 bytes
// for U+0100.. in byte order. Vocabulary strings are written in these characters.
uint32_t byte_to_unicode(uint8_t b);

// The immutable model: shared by every encoder thread.
class Gpt2Model {
 public:
  Gpt2Model(const std::string& vocab_path, const std::string& merges_path);

  int vocab_size() const { return int(id_bytes_.size()); }
  int eod() const { return eod_; }
  const std::string& token_bytes(int id) const { return id_bytes_[size_t(id)]; }
  int32_t byte_id(uint8_t b) const { return byte_id_[b]; }

  // Rank and result of merging the adjacent tokens (a, b), or false if they do not merge.
  bool merge(int32_t a, int32_t b, int32_t* rank, int32_t* merged) const {
    return merges_.merge(a, b, rank, merged);
  }

 private:
  std::vector<std::string> id_bytes_;
  int32_t byte_id_[256];
  MergeTable merges_;
  int eod_ = -1;
};

// One per worker thread: pre-tokenizes, then BPE-merges each piece, with a bounded cache of
// piece -> ids (most pieces of real text repeat, so most of the time is in the cache lookup).
class Gpt2Encoder {
 public:
  explicit Gpt2Encoder(const Gpt2Model& model);
  void encode(std::string_view text, std::vector<int32_t>& out);  // appends
  // The two merge strategies, public for tests: GPT-2's "merge every occurrence of the
  // lowest-ranked pair, left to right" (quadratic, used for short pieces) and a heap over a
  // linked list taking the leftmost lowest-ranked pair first (used for long pieces).
  void bpe_passes(const uint8_t* s, size_t n, std::vector<int32_t>& out);
  void bpe_heap(const uint8_t* s, size_t n, std::vector<int32_t>& out);

 private:
  struct Entry {
    uint64_t hash = 0;  // 0: empty slot
    uint32_t key_off = 0, key_len = 0, val_off = 0, val_len = 0;
  };
  void piece(const uint8_t* s, size_t n, std::vector<int32_t>& out);
  void cache_insert(uint64_t h, const uint8_t* s, size_t n, const int32_t* ids, size_t m);
  void cache_reset(size_t slots);

  const Gpt2Model& m_;
  PreTokenizer pre_;
  std::vector<Entry> slots_;
  size_t used_ = 0;
  std::string keys_;
  std::vector<int32_t> vals_;
  std::vector<int32_t> syms_, ranks_, tmp_;  // scratch for the merges
};

}  // namespace loom::tok
