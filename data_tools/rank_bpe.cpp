// RankBpeModel's tables (pair ranks, whole-token lookup) and RankBpeEncoder's two merge loops.
#include "data_tools/rank_bpe.h"

#include <climits>
#include <cstring>
#include <queue>

#include "core/check.h"

namespace loom::tok {

void RankBpeModel::set_token(int32_t id, std::string bytes, bool special) {
  LOOM_CHECK(id >= 0, "token id ", id);
  if (size_t(id) >= bytes_.size()) {
    bytes_.resize(size_t(id) + 1);
    kind_.resize(size_t(id) + 1, 0);
  }
  LOOM_USER_CHECK(kind_[size_t(id)] == 0, source_, ": token id ", id, " is defined twice");
  LOOM_USER_CHECK(!bytes.empty(), source_, ": token id ", id, " is empty");
  bytes_[size_t(id)] = std::move(bytes);
  kind_[size_t(id)] = special ? 2 : 1;
}

void RankBpeModel::add_merge(int32_t a, int32_t b, int32_t rank, int32_t merged) {
  pending_.push_back({a, b, rank, merged});
}

int32_t RankBpeModel::find_special(const std::string& text) const {
  for (size_t id = 0; id < kind_.size(); ++id)
    if (kind_[id] == 2 && bytes_[id] == text) return int32_t(id);
  return -1;
}

void RankBpeModel::finish(bool whole_piece_first) {
  whole_piece_first_ = whole_piece_first;
  LOOM_USER_CHECK(!bytes_.empty(), source_, ": no tokens");
  // Whole-token lookup: every non-special token by its bytes (duplicates keep the lowest id).
  size_t cap = 1;
  while (cap < 2 * bytes_.size()) cap <<= 1;
  piece_slots_.assign(cap, -1);
  piece_mask_ = cap - 1;
  for (size_t id = 0; id < bytes_.size(); ++id) {
    if (kind_[id] != 1) continue;
    const auto* s = reinterpret_cast<const uint8_t*>(bytes_[id].data());
    const size_t n = bytes_[id].size();
    if (find_piece(s, n) >= 0) continue;
    size_t i = PieceCache::hash(s, n) & piece_mask_;
    while (piece_slots_[i] >= 0) i = (i + 1) & piece_mask_;
    piece_slots_[i] = int32_t(id);
  }
  for (int b = 0; b < 256; ++b) {
    const uint8_t c = uint8_t(b);
    byte_id_[b] = find_piece(&c, 1);
    LOOM_USER_CHECK(byte_id_[b] >= 0, source_, ": no token for byte ", b,
                    " (a byte-level BPE vocabulary has all 256)");
  }
  for (const MergeTable::Merge& m : pending_)
    LOOM_USER_CHECK(valid(m.a) && valid(m.b) && valid(m.merged) && !special(m.merged), source_,
                    ": merge rank ", m.rank, " uses or makes a token that does not exist");
  merges_ = table_.build(pending_);  // a repeated pair keeps its first rank
  pending_.clear();
  pending_.shrink_to_fit();
}

int32_t RankBpeModel::find_piece(const uint8_t* s, size_t n) const {
  for (size_t i = PieceCache::hash(s, n) & piece_mask_; piece_slots_[i] >= 0;
       i = (i + 1) & piece_mask_) {
    const std::string& t = bytes_[size_t(piece_slots_[i])];
    if (t.size() == n && std::memcmp(t.data(), s, n) == 0) return piece_slots_[i];
  }
  return -1;
}

// ---- encoder ---------------------------------------------------------------------------
namespace {
constexpr size_t kRankHeapThreshold = 64;  // longer pieces use the O(n log n) merge loop
}

RankBpeEncoder::RankBpeEncoder(const RankBpeModel& model, Pattern pattern)
    : m_(model), split_(make_splitter(pattern)) {}

void RankBpeEncoder::encode(std::string_view text, std::vector<int32_t>& out) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  for (size_t p = 0; p < n;) {
    const size_t e = split_->next(s, n, p);
    piece(s + p, e - p, out);
    p = e;
  }
}

void RankBpeEncoder::piece(const uint8_t* s, size_t n, std::vector<int32_t>& out) {
  if (n == 1) {
    out.push_back(m_.byte_id(s[0]));
    return;
  }
  const bool cached = n <= PieceCache::kMaxPiece;
  const uint64_t h = cached ? PieceCache::hash(s, n) : 0;
  if (cached && cache_.get(h, s, n, out)) return;
  const size_t at = out.size();
  const int32_t whole = m_.whole_piece_first() ? m_.find_piece(s, n) : -1;
  if (whole >= 0)
    out.push_back(whole);
  else if (n > kRankHeapThreshold)
    merge_heap(s, n, out);
  else
    merge_linear(s, n, out);
  if (cached) cache_.put(h, s, n, out.data() + at, out.size() - at);
}

void RankBpeEncoder::merge_linear(const uint8_t* s, size_t n, std::vector<int32_t>& out) {
  // syms_[i]: the tokens; ranks_[i]: the rank of merging syms_[i] with syms_[i + 1] (INT_MAX:
  // no merge), next_[i]: what that merge makes.
  syms_.resize(n);
  ranks_.resize(n);
  next_.resize(n);
  for (size_t i = 0; i < n; ++i) syms_[i] = m_.byte_id(s[i]);
  auto pair = [&](size_t i) {
    int32_t r, t;
    if (i + 1 < syms_.size() && m_.merge(syms_[i], syms_[i + 1], &r, &t))
      ranks_[i] = r, next_[i] = t;
    else
      ranks_[i] = INT_MAX;
  };
  for (size_t i = 0; i < n; ++i) pair(i);
  while (syms_.size() > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < syms_.size(); ++i)
      if (ranks_[i] < ranks_[best]) best = i;
    if (ranks_[best] == INT_MAX) break;
    syms_[best] = next_[best];
    syms_.erase(syms_.begin() + std::ptrdiff_t(best) + 1);
    ranks_.erase(ranks_.begin() + std::ptrdiff_t(best) + 1);
    next_.erase(next_.begin() + std::ptrdiff_t(best) + 1);
    pair(best);
    if (best > 0) pair(best - 1);
  }
  out.insert(out.end(), syms_.begin(), syms_.end());
}

void RankBpeEncoder::merge_heap(const uint8_t* s, size_t n, std::vector<int32_t>& out) {
  // Doubly linked symbols and a heap of candidate merges ordered by (rank, position); an entry
  // is stale when either side changed since it was pushed (checked by id when popped).
  struct Cand {
    int32_t rank, left, a, b, merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  syms_.resize(n);
  next_.resize(n);
  prev_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    syms_[i] = m_.byte_id(s[i]);
    next_[i] = i + 1 < n ? int32_t(i + 1) : -1;
    prev_[i] = int32_t(i) - 1;
  }
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t l) {
    if (l < 0 || next_[size_t(l)] < 0) return;
    int32_t rank, merged;
    const int32_t a = syms_[size_t(l)], b = syms_[size_t(next_[size_t(l)])];
    if (m_.merge(a, b, &rank, &merged)) heap.push(Cand{rank, l, a, b, merged});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(int32_t(i));
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    const int32_t l = c.left, r = next_[size_t(l)];
    if (syms_[size_t(l)] != c.a || r < 0 || syms_[size_t(r)] != c.b) continue;  // stale
    syms_[size_t(l)] = c.merged;
    syms_[size_t(r)] = -1;
    next_[size_t(l)] = next_[size_t(r)];
    if (next_[size_t(r)] >= 0) prev_[size_t(next_[size_t(r)])] = l;
    push(prev_[size_t(l)]);
    push(l);
  }
  for (int32_t i = 0; i >= 0; i = next_[size_t(i)]) out.push_back(syms_[size_t(i)]);
}

}  // namespace loom::tok
