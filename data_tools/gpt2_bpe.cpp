// GPT-2 vocabulary/merges loading, the two BPE merge strategies and the piece cache.
#include "data_tools/gpt2_bpe.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "core/check.h"
#include "core/json_util.h"

namespace loom::tok {

uint32_t byte_to_unicode(uint8_t b) {
  static const auto table = [] {
    std::vector<uint32_t> t(256);
    uint32_t extra = 256;
    for (int c = 0; c < 256; ++c) {
      bool printable =
          (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
      t[size_t(c)] = printable ? uint32_t(c) : extra++;
    }
    return t;
  }();
  return table[b];
}

namespace {

std::string read_all(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    throw UserError(str(path, ": cannot read the GPT-2 ", what,
                        " file (run scripts/get_gpt2_tokenizer.sh or pass --vocab/--merges)"));
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void put_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

// A vocabulary string (byte_to_unicode characters) back to the bytes it stands for.
bool unicode_to_bytes(const std::string& token, std::string* bytes) {
  static const auto inverse = [] {
    std::vector<int> t(324, -1);
    for (int b = 0; b < 256; ++b) t[byte_to_unicode(uint8_t(b))] = b;
    return t;
  }();
  bytes->clear();
  const uint8_t* s = reinterpret_cast<const uint8_t*>(token.data());
  for (size_t i = 0; i < token.size();) {
    int32_t cp;
    i += size_t(utf8_next(s + i, token.size() - i, &cp));
    if (cp < 0 || cp >= 324 || inverse[size_t(cp)] < 0) return false;
    *bytes += char(inverse[size_t(cp)]);
  }
  return true;
}

uint64_t hash_bytes(const uint8_t* s, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t(n) * 0xC2B2AE3D27D4EB4Full);
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, s, 8);
    h = (h ^ v) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
    s += 8;
    n -= 8;
  }
  if (n) {
    uint64_t v = 0;
    std::memcpy(&v, s, n);
    h = (h ^ v) * 0xC4CEB9FE1A85EC53ull;
  }
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  return h | 1;  // 0 marks an empty cache slot
}

constexpr size_t kMaxCachedPiece = 128;    // longer pieces are merged each time
constexpr size_t kGpt2HeapThreshold = 64;  // longer pieces use the O(n log n) strategy
constexpr size_t kMaxSlots = size_t(1) << 20, kMaxKeyBytes = size_t(16) << 20;

}  // namespace

Gpt2Model::Gpt2Model(const std::string& vocab_path, const std::string& merges_path) {
  // ---- vocabulary: {"token": id, ...} ----
  // {"token": id, ...} nests one level; deeper input is not a vocabulary.
  const nlohmann::json j = parse_json_text(
      read_all(vocab_path, "vocabulary"), 4,
      str(vocab_path,
          ": the vocabulary does not parse (expected GPT-2's encoder.json or vocab.json)"));
  LOOM_USER_CHECK(j.is_object() && !j.empty(), vocab_path,
                  ": the vocabulary must be a JSON object of token -> id (GPT-2's encoder.json)");
  std::unordered_map<std::string, int32_t> vocab;
  id_bytes_.assign(j.size(), std::string());
  std::vector<char> seen(j.size(), 0);
  std::string bytes;
  for (auto it = j.begin(); it != j.end(); ++it) {
    LOOM_USER_CHECK(it.value().is_number_integer(), vocab_path, ": token \"", it.key(),
                    "\" has a non-integer id");
    const int64_t id = it.value().get<int64_t>();
    LOOM_USER_CHECK(id >= 0 && id < int64_t(j.size()) && !seen[size_t(id)], vocab_path, ": id ", id,
                    " of token \"", it.key(), "\" is repeated or outside 0..", j.size() - 1);
    LOOM_USER_CHECK(unicode_to_bytes(it.key(), &bytes), vocab_path, ": token \"", it.key(),
                    "\" is not written in GPT-2's byte-level alphabet");
    seen[size_t(id)] = 1;
    id_bytes_[size_t(id)] = bytes;
    vocab[it.key()] = int32_t(id);
  }
  for (int b = 0; b < 256; ++b) {
    std::string s;
    put_utf8(s, byte_to_unicode(uint8_t(b)));
    auto it = vocab.find(s);
    LOOM_USER_CHECK(it != vocab.end(), vocab_path, ": no token for byte ", b,
                    " (a byte-level BPE vocabulary has all 256)");
    byte_id_[b] = it->second;
  }
  auto eod = vocab.find("<|endoftext|>");
  LOOM_USER_CHECK(eod != vocab.end(), vocab_path, ": no <|endoftext|> token");
  eod_ = eod->second;

  // ---- merges: optional "#version" line, then "a b" per line in rank order ----
  const std::string text = read_all(merges_path, "merges");
  std::vector<MergeTable::Merge> list;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t sp = line.find(' ');
    const std::string a = line.substr(0, sp),
                      b = sp == std::string::npos ? "" : line.substr(sp + 1);
    LOOM_USER_CHECK(!a.empty() && !b.empty() && b.find(' ') == std::string::npos, merges_path, ":",
                    line_no, ": expected two tokens separated by one space, got \"", line,
                    "\" (is this GPT-2's vocab.bpe / merges.txt?)");
    auto ia = vocab.find(a), ib = vocab.find(b), im = vocab.find(a + b);
    LOOM_USER_CHECK(ia != vocab.end() && ib != vocab.end() && im != vocab.end(), merges_path, ":",
                    line_no, ": merge \"", line, "\" uses or makes a token missing from ",
                    vocab_path);
    list.push_back({ia->second, ib->second, int32_t(list.size()), im->second});
  }
  LOOM_USER_CHECK(!list.empty(), merges_path, ": no merges found");
  merges_.build(list);  // a repeated merge keeps its first (lowest) rank
}

// ---- encoder ---------------------------------------------------------------------------
Gpt2Encoder::Gpt2Encoder(const Gpt2Model& model) : m_(model) { cache_reset(size_t(1) << 14); }

void Gpt2Encoder::cache_reset(size_t slots) {
  slots_.assign(slots, Entry());
  used_ = 0;
  keys_.clear();
  vals_.clear();
}

void Gpt2Encoder::cache_insert(uint64_t h, const uint8_t* s, size_t n, const int32_t* ids,
                               size_t m) {
  if (2 * (used_ + 1) > slots_.size()) {
    if (slots_.size() >= kMaxSlots) {
      cache_reset(slots_.size());  // bounded memory: start over
    } else {                       // grow and re-insert
      std::vector<Entry> old;
      old.swap(slots_);
      slots_.assign(old.size() * 2, Entry());
      const size_t mask = slots_.size() - 1;
      for (const Entry& e : old)
        if (e.hash) {
          size_t i = e.hash & mask;
          while (slots_[i].hash) i = (i + 1) & mask;
          slots_[i] = e;
        }
    }
  }
  if (keys_.size() + n > kMaxKeyBytes) cache_reset(slots_.size());
  const size_t mask = slots_.size() - 1;
  size_t i = h & mask;
  while (slots_[i].hash) i = (i + 1) & mask;
  slots_[i] = Entry{h, uint32_t(keys_.size()), uint32_t(n), uint32_t(vals_.size()), uint32_t(m)};
  keys_.append(reinterpret_cast<const char*>(s), n);
  vals_.insert(vals_.end(), ids, ids + m);
  ++used_;
}

void Gpt2Encoder::piece(const uint8_t* s, size_t n, std::vector<int32_t>& out) {
  if (n == 1) {
    out.push_back(m_.byte_id(s[0]));
    return;
  }
  if (n > kMaxCachedPiece) {
    bpe_heap(s, n, out);
    return;
  }
  const uint64_t h = hash_bytes(s, n);
  const size_t mask = slots_.size() - 1;
  for (size_t i = h & mask; slots_[i].hash; i = (i + 1) & mask) {
    const Entry& e = slots_[i];
    if (e.hash == h && e.key_len == n && std::memcmp(keys_.data() + e.key_off, s, n) == 0) {
      out.insert(out.end(), vals_.begin() + e.val_off, vals_.begin() + e.val_off + e.val_len);
      return;
    }
  }
  const size_t at = out.size();
  if (n > kGpt2HeapThreshold)
    bpe_heap(s, n, out);
  else
    bpe_passes(s, n, out);
  cache_insert(h, s, n, out.data() + at, out.size() - at);
}

void Gpt2Encoder::encode(std::string_view text, std::vector<int32_t>& out) {
  const uint8_t* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  for (size_t p = 0; p < n;) {
    const size_t e = pre_.next(s, n, p);
    piece(s + p, e - p, out);
    p = e;
  }
}

void Gpt2Encoder::bpe_passes(const uint8_t* s, size_t n, std::vector<int32_t>& out) {
  syms_.resize(n);
  for (size_t i = 0; i < n; ++i) syms_[i] = m_.byte_id(s[i]);
  while (syms_.size() > 1) {
    int32_t best = INT_MAX, merged = -1, rank, mid;
    size_t at = 0;
    for (size_t i = 0; i + 1 < syms_.size(); ++i)
      if (m_.merge(syms_[i], syms_[i + 1], &rank, &mid) && rank < best)
        best = rank, merged = mid, at = i;
    if (merged < 0) break;
    const int32_t a = syms_[at], b = syms_[at + 1];
    size_t w = at;  // one left-to-right pass merging every (a, b), as GPT-2's bpe() does
    for (size_t i = at; i < syms_.size();) {
      if (i + 1 < syms_.size() && syms_[i] == a && syms_[i + 1] == b) {
        syms_[w++] = merged;
        i += 2;
      } else {
        syms_[w++] = syms_[i++];
      }
    }
    syms_.resize(w);
  }
  out.insert(out.end(), syms_.begin(), syms_.end());
}

void Gpt2Encoder::bpe_heap(const uint8_t* s, size_t n, std::vector<int32_t>& out) {
  // Doubly linked symbols; heap of candidate merges ordered by (rank, position). An entry is
  // stale when either side has changed since it was pushed (checked by id on pop). Because a
  // merged token's own merges always rank after the merge that made it, taking the leftmost
  // lowest rank one at a time equals GPT-2's pass (verified by tests on random text).
  struct Cand {
    int32_t rank, left, a, b, merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::vector<int32_t>& id = syms_;
  std::vector<int32_t>& next = ranks_;
  std::vector<int32_t>& prev = tmp_;
  id.resize(n);
  next.resize(n);
  prev.resize(n);
  for (size_t i = 0; i < n; ++i) {
    id[i] = m_.byte_id(s[i]);
    next[i] = i + 1 < n ? int32_t(i + 1) : -1;
    prev[i] = int32_t(i) - 1;
  }
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t l) {
    if (l < 0 || next[size_t(l)] < 0) return;
    int32_t rank, merged;
    const int32_t a = id[size_t(l)], b = id[size_t(next[size_t(l)])];
    if (m_.merge(a, b, &rank, &merged)) heap.push(Cand{rank, l, a, b, merged});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(int32_t(i));
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    const int32_t l = c.left, r = next[size_t(c.left)];
    if (id[size_t(l)] != c.a || r < 0 || id[size_t(r)] != c.b) continue;  // stale
    id[size_t(l)] = c.merged;
    id[size_t(r)] = -1;
    next[size_t(l)] = next[size_t(r)];
    if (next[size_t(r)] >= 0) prev[size_t(next[size_t(r)])] = l;
    push(prev[size_t(l)]);
    push(l);
  }
  for (int32_t i = 0; i >= 0; i = next[size_t(i)]) out.push_back(id[size_t(i)]);
}

}  // namespace loom::tok
