// Byte-level BPE by merge rank, the rule of tiktoken and of Hugging Face's BPE model: merge the
// lowest-ranked adjacent pair, leftmost first, one pair at a time. The tables are built by the
// .tiktoken and tokenizer.json loaders; each worker thread encodes with its own RankBpeEncoder.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data_tools/merge_table.h"
#include "data_tools/piece_cache.h"
#include "data_tools/split_patterns.h"

namespace loom::tok {

// The immutable model, shared by every encoder thread.
class RankBpeModel {
 public:
  // ---- building (by the loaders); `source` names the file in errors ----
  explicit RankBpeModel(std::string source) : source_(std::move(source)) {}
  // Token `id` stands for `bytes`. Special tokens (<|endoftext|>, ...) only decode: they are
  // never produced from text, which is always encoded as ordinary text.
  void set_token(int32_t id, std::string bytes, bool special);
  // Adjacent tokens (a, b) merge into `merged` with priority `rank` (lower merges first); a pair
  // added twice keeps its first rank.
  void add_merge(int32_t a, int32_t b, int32_t rank, int32_t merged);
  // Indexes the tables; every byte must have a token. `whole_piece_first`: a piece that is itself
  // a (non-special) token encodes as that token without merging (tiktoken; Hugging Face with
  // model.ignore_merges).
  void finish(bool whole_piece_first);

  // ---- use ----
  const std::string& source() const { return source_; }
  int vocab_size() const { return int(bytes_.size()); }  // largest id + 1
  bool valid(int32_t id) const { return id >= 0 && size_t(id) < kind_.size() && kind_[id] != 0; }
  bool special(int32_t id) const { return valid(id) && kind_[size_t(id)] == 2; }
  const std::string& token_bytes(int32_t id) const { return bytes_[size_t(id)]; }
  int32_t byte_id(uint8_t b) const { return byte_id_[b]; }
  int32_t find_special(const std::string& text) const;  // its id, or -1
  bool whole_piece_first() const { return whole_piece_first_; }
  int64_t num_merges() const { return int64_t(merges_); }

  bool merge(int32_t a, int32_t b, int32_t* rank, int32_t* merged) const {
    return table_.merge(a, b, rank, merged);
  }
  // The id of the non-special token whose bytes are s[0, n), or -1.
  int32_t find_piece(const uint8_t* s, size_t n) const;

 private:
  std::string source_;
  std::vector<std::string> bytes_;  // by id
  std::vector<uint8_t> kind_;       // by id: 0 unused, 1 mergeable, 2 special
  int32_t byte_id_[256];
  std::vector<MergeTable::Merge> pending_;  // merges before finish()
  MergeTable table_;
  size_t merges_ = 0;
  std::vector<int32_t> piece_slots_;  // open addressing over ids, -1 empty
  size_t piece_mask_ = 0;
  bool whole_piece_first_ = false;
};

// One per worker thread: splits with the model's pattern, then merges each piece (cached).
class RankBpeEncoder {
 public:
  RankBpeEncoder(const RankBpeModel& model, Pattern pattern);
  void encode(std::string_view text, std::vector<int32_t>& out);  // appends
  // The two merge strategies, public for tests: a linear scan for the lowest rank (short
  // pieces) and a heap over a linked list (long pieces); both merge leftmost-lowest first.
  void merge_linear(const uint8_t* s, size_t n, std::vector<int32_t>& out);
  void merge_heap(const uint8_t* s, size_t n, std::vector<int32_t>& out);

 private:
  void piece(const uint8_t* s, size_t n, std::vector<int32_t>& out);
  const RankBpeModel& m_;
  std::unique_ptr<Splitter> split_;
  PieceCache cache_;
  std::vector<int32_t> syms_, ranks_, next_, prev_;  // merge scratch
};

}  // namespace loom::tok
