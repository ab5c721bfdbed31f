// tokenizer.json reading: what is supported is checked first (one line when it is not), then
// vocab, merges and added_tokens become a RankBpeModel; and the NFC normalizer over ICU.
#include "data_tools/hf_tokenizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

#include <climits>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "core/check.h"
#include "core/json_util.h"
#include "data_tools/gpt2_bpe.h"

namespace loom::tok {

namespace {

using nlohmann::json;

const char* kSupported =
    "loom reads byte-level BPE tokenizer.json files (model.type BPE with a ByteLevel "
    "pre-tokenizer, as GPT-2, Llama 3 and Qwen have)";

// A byte-level vocabulary string back to the bytes it stands for.
bool byte_level_to_bytes(const std::string& token, std::string* bytes) {
  static const auto inverse = [] {
    std::vector<int> t(324, -1);
    for (int b = 0; b < 256; ++b) t[byte_to_unicode(uint8_t(b))] = b;
    return t;
  }();
  bytes->clear();
  const auto* s = reinterpret_cast<const uint8_t*>(token.data());
  for (size_t i = 0; i < token.size();) {
    int32_t cp;
    i += size_t(utf8_next(s + i, token.size() - i, &cp));
    if (cp < 0 || cp >= 324 || inverse[size_t(cp)] < 0) return false;
    *bytes += char(inverse[size_t(cp)]);
  }
  return !bytes->empty();
}

std::string type_of(const json& j) {
  if (j.is_null()) return "null";
  auto it = j.is_object() ? j.find("type") : j.end();
  return it != j.end() && it->is_string() ? it->get<std::string>() : "(no type)";
}

bool flag(const json& j, const char* key, bool dflt) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? dflt : it->is_boolean() && it->get<bool>();
}

// The pre-tokenizer: ByteLevel alone, or Sequence [Split(Regex, Isolated), ByteLevel(no regex)].
void read_pre_tokenizer(const std::string& path, const json& pre, HfTokenizer* out) {
  const std::string t = type_of(pre);
  const std::string refuse = str(path, ": pre_tokenizer ", t, " is not supported: ", kSupported,
                                 ", optionally after one regex Split of the gpt2, cl100k "
                                 "(Llama 3), qwen2 or o200k pattern");
  if (t == "ByteLevel") {
    LOOM_USER_CHECK(flag(pre, "use_regex", true), refuse, " (ByteLevel without its regex)");
    out->pattern = Pattern::Gpt2;
    out->add_prefix_space = flag(pre, "add_prefix_space", false);
    return;
  }
  LOOM_USER_CHECK(t == "Sequence" && pre.contains("pretokenizers") &&
                      pre["pretokenizers"].is_array() && pre["pretokenizers"].size() == 2,
                  refuse);
  const json& split = pre["pretokenizers"][0];
  const json& bl = pre["pretokenizers"][1];
  LOOM_USER_CHECK(type_of(split) == "Split" && type_of(bl) == "ByteLevel", refuse,
                  " (a Sequence of ", type_of(split), " and ", type_of(bl), ")");
  LOOM_USER_CHECK(!flag(bl, "use_regex", true) && !flag(bl, "add_prefix_space", false), refuse,
                  " (the ByteLevel after a Split must have use_regex and add_prefix_space false)");
  const json* regex = split.contains("pattern") && split["pattern"].is_object() &&
                              split["pattern"].contains("Regex")
                          ? &split["pattern"]["Regex"]
                          : nullptr;
  LOOM_USER_CHECK(regex && regex->is_string(), refuse, " (a Split without a Regex pattern)");
  LOOM_USER_CHECK(
      split.value("behavior", std::string()) == "Isolated" && !flag(split, "invert", false), refuse,
      " (a Split with behavior ", json_brief(split.value("behavior", json())),
      "; only Isolated, not inverted)");
  for (Pattern p : {Pattern::Gpt2, Pattern::Cl100k, Pattern::Qwen2, Pattern::O200k})
    if (regex->get<std::string>() == pattern_regex(p)) {
      out->pattern = p;
      return;
    }
  throw UserError(str(path, ": the Split pattern ", json_brief(*regex),
                      " is not one loom implements (gpt2, cl100k/Llama 3, qwen2, o200k)"));
}

}  // namespace

HfTokenizer load_hf_tokenizer(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  LOOM_USER_CHECK(f.good(), path, ": cannot read the tokenizer.json file");
  std::stringstream ss;
  ss << f.rdbuf();
  const json j = parse_json_text(ss.str(), 8, path);
  LOOM_USER_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), path,
                  ": no \"model\" object: not a Hugging Face tokenizer.json");
  const json& m = j["model"];
  const std::string kind = type_of(m);
  LOOM_USER_CHECK(kind == "BPE", path, ": model.type is ", kind,
                  kind == "Unigram" ? " (SentencePiece)" : "", ", not BPE: ", kSupported);
  const json pre = j.value("pre_tokenizer", json());
  LOOM_USER_CHECK(!pre.is_null(), path,
                  ": BPE without a pre-tokenizer is not byte-level BPE: ", kSupported);
  HfTokenizer out;
  read_pre_tokenizer(path, pre, &out);
  const json dec = j.value("decoder", json());
  LOOM_USER_CHECK(dec.is_null() || type_of(dec) == "ByteLevel", path, ": decoder ", type_of(dec),
                  " is not ByteLevel: ", kSupported);
  const json norm = j.value("normalizer", json());
  LOOM_USER_CHECK(norm.is_null() || type_of(norm) == "NFC", path, ": normalizer ", type_of(norm),
                  " is not supported (only none or NFC): ", kSupported);
  out.nfc = !norm.is_null();
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json v = m.value(key, json());
    LOOM_USER_CHECK(v.is_null() || (v.is_string() && v.get<std::string>().empty()), path,
                    ": model.", key, " is ", json_brief(v), ": ", kSupported, " (without one)");
  }
  LOOM_USER_CHECK(m.value("dropout", json()).is_null() && !flag(m, "byte_fallback", false), path,
                  ": model.dropout or model.byte_fallback is set: ", kSupported, " (without them)");

  // ---- vocab, merges, added tokens ----
  LOOM_USER_CHECK(m.contains("vocab") && m["vocab"].is_object() && !m["vocab"].empty(), path,
                  ": model.vocab must be an object of token -> id");
  auto model = std::make_unique<RankBpeModel>(path);
  std::unordered_map<std::string, int32_t> vocab;
  std::string bytes;
  constexpr int64_t kMaxId = 1 << 24;  // bounds the tables whatever the file claims
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    const int64_t id = it.value().is_number_integer() ? it.value().get<int64_t>() : -1;
    LOOM_USER_CHECK(id >= 0 && id < kMaxId, path, ": model.vocab: token \"", it.key(), "\" has id ",
                    json_brief(it.value()), " (expected 0..", kMaxId - 1, ")");
    LOOM_USER_CHECK(byte_level_to_bytes(it.key(), &bytes), path, ": model.vocab: token \"",
                    it.key(), "\" is not written in the byte-level alphabet: ", kSupported);
    model->set_token(int32_t(id), bytes, false);
    vocab[it.key()] = int32_t(id);
  }
  const json merges = m.value("merges", json::array());
  LOOM_USER_CHECK(merges.is_array(), path, ": model.merges must be an array");
  for (size_t r = 0; r < merges.size(); ++r) {
    const json& e = merges[r];
    std::string a, b;
    if (e.is_string()) {
      const std::string& s = e.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos)
        a = s.substr(0, sp), b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>(), b = e[1].get<std::string>();
    }
    auto ia = vocab.find(a), ib = vocab.find(b), im = vocab.find(a + b);
    LOOM_USER_CHECK(
        !a.empty() && !b.empty() && ia != vocab.end() && ib != vocab.end() && im != vocab.end(),
        path, ": model.merges[", r, "] = ", json_brief(e),
        " is not a pair of vocabulary tokens whose join is a token");
    model->add_merge(ia->second, ib->second, int32_t(r), im->second);
  }
  const json added = j.value("added_tokens", json::array());
  LOOM_USER_CHECK(added.is_array(), path, ": added_tokens must be an array");
  for (size_t i = 0; i < added.size(); ++i) {
    const json& t = added[i];
    const int64_t id = t.is_object() && t.contains("id") && t["id"].is_number_integer()
                           ? t["id"].get<int64_t>()
                           : -1;
    LOOM_USER_CHECK(id >= 0 && id < kMaxId && t.contains("content") && t["content"].is_string() &&
                        !t["content"].get<std::string>().empty(),
                    path, ": added_tokens[", i, "] needs an id (0..", kMaxId - 1,
                    ") and a non-empty content");
    if (model->valid(int32_t(id))) continue;  // also in model.vocab (GPT-2's <|endoftext|>)
    model->set_token(int32_t(id), t["content"].get<std::string>(), true);
  }
  model->finish(flag(m, "ignore_merges", false));
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"}) {
    int32_t id = model->find_special(name);
    if (id < 0) {
      auto v = vocab.find(name);
      id = v == vocab.end() ? -1 : v->second;
    }
    if (id >= 0) {
      out.eod = id;
      break;
    }
  }
  LOOM_USER_CHECK(out.eod >= 0, path,
                  ": no end-of-document token (none of <|endoftext|>, <|end_of_text|>, </s>, <eos> "
                  "is in added_tokens or model.vocab)");
  out.model = std::move(model);
  return out;
}

bool nfc_normalize(std::string_view text, std::string* out) {
  UErrorCode st = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(st);
  LOOM_CHECK(U_SUCCESS(st), "ICU NFC normalizer: ", u_errorName(st));
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  // Valid UTF-8 runs are normalized one by one; an invalid byte is copied between them.
  auto is_nfc = [&](size_t b, size_t e) {
    UErrorCode q = U_ZERO_ERROR;
    const bool yes = nfc->isNormalizedUTF8(icu::StringPiece(text.data() + b, int32_t(e - b)), q);
    return U_SUCCESS(q) && yes;
  };
  size_t start = 0, p = 0;
  bool changed = false;
  std::string result;
  auto flush = [&](size_t e) {
    if (e == start) return;
    if (is_nfc(start, e)) {
      result.append(text.data() + start, e - start);
      return;
    }
    UErrorCode q = U_ZERO_ERROR;
    icu::StringByteSink<std::string> sink(&result);
    nfc->normalizeUTF8(0, icu::StringPiece(text.data() + start, int32_t(e - start)), sink, nullptr,
                       q);
    LOOM_CHECK(U_SUCCESS(q), "ICU NFC normalization: ", u_errorName(q));
    changed = true;
  };
  LOOM_USER_CHECK(text.size() < size_t(INT32_MAX), "a document of ", text.size(),
                  " bytes is too large for NFC normalization (split it into documents < 2 GB)");
  if (is_nfc(0, text.size())) {
    // Fast path: ICU treats ill-formed bytes as U+FFFD, which is in NFC; so a "yes" here also
    // means every valid run is in NFC (a run next to U+FFFD composes with nothing).
    return false;
  }
  while (p < text.size()) {
    int32_t cp;
    const int len = utf8_next(s + p, text.size() - p, &cp);
    if (cp < 0) {
      flush(p);
      result += char(s[p]);
      start = p + 1;
    }
    p += size_t(len);
  }
  flush(text.size());
  if (!changed) return false;
  *out = std::move(result);
  return true;
}

}  // namespace loom::tok
