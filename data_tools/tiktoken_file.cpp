// Reading .tiktoken rank files: strict line parsing, then the pair table derived from the ranks.
#include "data_tools/tiktoken_file.h"

#include <fstream>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/check.h"

namespace loom::tok {

namespace {

struct Special {
  const char* text;
  int32_t id;
};

// tiktoken's special tokens per encoding (the pattern names the encoding).
std::vector<Special> specials_for(Pattern p) {
  switch (p) {
    case Pattern::Gpt2:
      return {{"<|endoftext|>", 50256}};
    case Pattern::Cl100k:
      return {{"<|endoftext|>", 100257},
              {"<|fim_prefix|>", 100258},
              {"<|fim_middle|>", 100259},
              {"<|fim_suffix|>", 100260},
              {"<|endofprompt|>", 100276}};
    case Pattern::O200k:
      return {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}};
    case Pattern::Qwen2:
      break;
  }
  throw UserError(str("the ", pattern_name(p),
                      " pattern belongs to tokenizer.json files, not to tiktoken rank files "
                      "(choose r50k, cl100k or o200k)"));
}

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

bool base64_decode(const std::string& in, std::string* out) {
  out->clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  for (size_t i = 0; i < in.size(); i += 4) {
    const bool last = i + 4 == in.size();
    const int pad = last ? (in[i + 3] == '=') + (in[i + 2] == '=' && in[i + 3] == '=') : 0;
    int v[4];
    for (int k = 0; k < 4 - pad; ++k)
      if ((v[k] = base64_value(in[i + size_t(k)])) < 0) return false;
    const uint32_t w = uint32_t(v[0]) << 18 | uint32_t(v[1]) << 12 |
                       uint32_t(pad < 2 ? v[2] : 0) << 6 | uint32_t(pad < 1 ? v[3] : 0);
    out->push_back(char(w >> 16));
    if (pad < 2) out->push_back(char((w >> 8) & 0xFF));
    if (pad < 1) out->push_back(char(w & 0xFF));
  }
  return true;
}

bool pattern_from_rank_file_name(const std::string& path, Pattern* out) {
  const size_t slash = path.find_last_of('/');
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base.find("cl100k") != std::string::npos)
    *out = Pattern::Cl100k;
  else if (base.find("o200k") != std::string::npos)
    *out = Pattern::O200k;
  else if (base.find("r50k") != std::string::npos || base.find("gpt2") != std::string::npos)
    *out = Pattern::Gpt2;
  else
    return false;
  return true;
}

std::unique_ptr<RankBpeModel> load_tiktoken_file(const std::string& path, Pattern pattern) {
  const std::vector<Special> specials = specials_for(pattern);
  std::ifstream f(path, std::ios::binary);
  LOOM_USER_CHECK(f.good(), path,
                  ": cannot read the tiktoken rank file (run scripts/get_tiktoken_ranks.sh, "
                  "which puts cl100k_base/o200k_base/r50k_base.tiktoken in data/tokenizer)");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();

  constexpr int64_t kMaxRank = 1 << 24;  // far above any real vocabulary; bounds the tables
  std::vector<std::string> tokens;       // by rank
  std::vector<char> have;
  std::unordered_map<std::string_view, int32_t> rank_of;
  size_t line_no = 0;
  std::string bytes;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    const std::string tok = line.substr(0, sp),
                      num = sp == std::string::npos ? "" : line.substr(sp + 1);
    bool ok =
        !num.empty() && num.size() <= 9 && num.find_first_not_of("0123456789") == std::string::npos;
    const int64_t rank = ok ? std::stoll(num) : -1;
    ok = ok && rank < kMaxRank;
    LOOM_USER_CHECK(ok && base64_decode(tok, &bytes), path, ":", line_no,
                    ": expected \"<base64 token> <rank>\", got \"", line.substr(0, 60),
                    "\" (is this a .tiktoken rank file? scripts/get_tiktoken_ranks.sh makes them)");
    if (size_t(rank) >= tokens.size()) {
      tokens.resize(size_t(rank) + 1);
      have.resize(size_t(rank) + 1, 0);
    }
    LOOM_USER_CHECK(!have[size_t(rank)], path, ":", line_no, ": rank ", rank,
                    " appears twice (the file is corrupt: re-run scripts/get_tiktoken_ranks.sh)");
    have[size_t(rank)] = 1;
    tokens[size_t(rank)] = bytes;
  }
  LOOM_USER_CHECK(!tokens.empty(), path, ": no ranks found (an empty or truncated rank file)");
  auto model = std::make_unique<RankBpeModel>(path);
  for (size_t r = 0; r < tokens.size(); ++r) {
    if (!have[r]) continue;
    auto [it, fresh] = rank_of.emplace(std::string_view(tokens[r]), int32_t(r));
    LOOM_USER_CHECK(fresh, path, ": the token of rank ", r, " repeats the token of rank ",
                    it->second, " (the file is corrupt)");
    model->set_token(int32_t(r), tokens[r], false);
  }
  for (const Special& s : specials) {
    LOOM_USER_CHECK(size_t(s.id) >= tokens.size() || !have[size_t(s.id)], path, ": rank ", s.id,
                    " is the special token ", s.text, " in the ", pattern_name(pattern),
                    " encoding: is this the rank file of another encoding? (choose the pattern "
                    "with --tokenizer-pattern)");
    model->set_token(s.id, s.text, true);
  }
  // Every split of every token into two tokens is a merge with that token's rank.
  for (size_t r = 0; r < tokens.size(); ++r) {
    const std::string_view t(tokens[r]);
    for (size_t k = 1; have[r] && k < t.size(); ++k) {
      auto a = rank_of.find(t.substr(0, k)), b = rank_of.find(t.substr(k));
      if (a != rank_of.end() && b != rank_of.end())
        model->add_merge(a->second, b->second, int32_t(r), int32_t(r));
    }
  }
  model->finish(true);  // tiktoken looks a whole piece up before merging
  return model;
}

}  // namespace loom::tok
