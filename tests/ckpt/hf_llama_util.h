// Test helpers for Hugging Face llama weights: a tiny GQA llama, its HF tensors filled with
// position-coded values, and the canonical loom values they must map to (the contract table,
// written out here independently of src/ckpt/hf_llama.cpp).
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "ckpt/canonical.h"
#include "core/check.h"

namespace loom::test {

// C 32, 4 query heads and 2 kv heads of D 8, F 48, V 97 (padding rows at any tp), 2 layers.
inline ModelConfig tiny_llama(bool tied) {
  ModelConfig m;
  m.arch = "llama";
  m.n_layer = 2;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.d_model = 32;
  m.ffn_hidden = 48;
  m.vocab_size = 97;
  m.seq_len = 16;
  m.rope_theta = 500000.0;
  m.norm_eps = 1e-5;
  m.tie_embeddings = tied;
  return m;
}

// The HF LlamaForCausalLM tensors of `m` and their shapes (1-D: one entry).
inline std::map<std::string, std::vector<int64_t>> hf_llama_shapes(const ModelConfig& m) {
  const int64_t C = m.d_model, D = m.d_model / m.n_head, Q = m.n_head * D, KV = m.kv_heads() * D,
                F = m.ffn(), V = m.vocab_size;
  std::map<std::string, std::vector<int64_t>> s = {{"model.embed_tokens.weight", {V, C}},
                                                   {"model.norm.weight", {C}}};
  if (!m.tie_embeddings) s["lm_head.weight"] = {V, C};
  for (int l = 0; l < m.n_layer; ++l) {
    const std::string L = "model.layers." + std::to_string(l) + ".";
    s[L + "input_layernorm.weight"] = {C};
    s[L + "self_attn.q_proj.weight"] = {Q, C};
    s[L + "self_attn.k_proj.weight"] = {KV, C};
    s[L + "self_attn.v_proj.weight"] = {KV, C};
    s[L + "self_attn.o_proj.weight"] = {C, Q};
    s[L + "post_attention_layernorm.weight"] = {C};
    s[L + "mlp.gate_proj.weight"] = {F, C};
    s[L + "mlp.up_proj.weight"] = {F, C};
    s[L + "mlp.down_proj.weight"] = {C, F};
  }
  return s;
}

// Element (r, c) of the id-th tensor: id * 2^14 + r * 2^7 + c, exact in fp32 (r, c < 128), so
// every value names its tensor, row and column.
inline float coded(int id, int64_t r, int64_t c) { return float(id * 16384 + r * 128 + c); }

// Every HF tensor of `m` with coded values (ids in name order).
inline std::map<std::string, CanonicalTensor> coded_hf_tensors(const ModelConfig& m) {
  std::map<std::string, CanonicalTensor> out;
  int id = 1;
  for (const auto& [name, shape] : hf_llama_shapes(m)) {
    CanonicalTensor t;
    t.ndim = int(shape.size());
    t.rows = t.ndim == 1 ? 1 : shape[0];
    t.cols = shape.back();
    for (int64_t r = 0; r < t.rows; ++r)
      for (int64_t c = 0; c < t.cols; ++c) t.data.push_back(coded(id, r, c));
    out[name] = std::move(t);
    ++id;
  }
  return out;
}

// The canonical loom value at (r, c) of tensor `name`, read from the HF tensors `hf` by the
// contract table: weights [in, out] = HF [out, in] transposed, c_attn = [q^T | k^T | v^T],
// c_fc = [gate^T | up^T].
inline float expected_canonical(const ModelConfig& m,
                                const std::map<std::string, CanonicalTensor>& hf,
                                const std::string& name, int64_t r, int64_t c) {
  auto at = [&](const std::string& n, int64_t i, int64_t j) {
    const CanonicalTensor& t = hf.at(n);
    EXPECT_TRUE(i < t.rows && j < t.cols) << n << " (" << i << "," << j << ")";
    return t.data[size_t(i * t.cols + j)];
  };
  const int64_t D = m.d_model / m.n_head, Q = m.n_head * D, KV = m.kv_heads() * D, F = m.ffn();
  if (name == "wte.weight") return at("model.embed_tokens.weight", r, c);
  if (name == "lm_head.weight") return at("lm_head.weight", r, c);
  if (name == "ln_f.weight") return at("model.norm.weight", 0, c);
  const size_t dot = name.find('.', 2);
  const std::string L = "model.layers." + name.substr(2, dot - 2) + ".";
  const std::string rest = name.substr(dot + 1);
  if (rest == "ln_1.weight") return at(L + "input_layernorm.weight", 0, c);
  if (rest == "ln_2.weight") return at(L + "post_attention_layernorm.weight", 0, c);
  if (rest == "attn.c_attn.weight") {
    if (c < Q) return at(L + "self_attn.q_proj.weight", c, r);
    if (c < Q + KV) return at(L + "self_attn.k_proj.weight", c - Q, r);
    return at(L + "self_attn.v_proj.weight", c - Q - KV, r);
  }
  if (rest == "attn.c_proj.weight") return at(L + "self_attn.o_proj.weight", c, r);
  if (rest == "mlp.c_fc.weight")
    return c < F ? at(L + "mlp.gate_proj.weight", c, r) : at(L + "mlp.up_proj.weight", c - F, r);
  if (rest == "mlp.c_proj.weight") return at(L + "mlp.down_proj.weight", c, r);
  ADD_FAILURE() << "no HF tensor for " << name;
  return 0;
}

// A LlamaForCausalLM config.json for `m` as transformers writes one (extra keys, eps stored as
// float32 would round it), or with `edits` applied (key -> raw JSON value; "" deletes).
inline std::string hf_config_text(const ModelConfig& m,
                                  const std::map<std::string, std::string>& edits = {}) {
  std::map<std::string, std::string> kv = {
      {"architectures", "[\"LlamaForCausalLM\"]"},
      {"attention_bias", "false"},
      {"attention_dropout", "0.0"},
      {"bos_token_id", "1"},
      {"eos_token_id", "2"},
      {"hidden_act", "\"silu\""},
      {"hidden_size", std::to_string(m.d_model)},
      {"initializer_range", "0.02"},
      {"intermediate_size", std::to_string(m.ffn())},
      {"max_position_embeddings", "2048"},
      {"mlp_bias", "false"},
      {"model_type", "\"llama\""},
      {"num_attention_heads", std::to_string(m.n_head)},
      {"num_hidden_layers", std::to_string(m.n_layer)},
      {"num_key_value_heads", std::to_string(m.kv_heads())},
      {"pretraining_tp", "1"},
      {"rms_norm_eps", "9.999999747378752e-06"},  // 1e-5 as float32
      {"rope_scaling", "null"},
      {"rope_theta", "500000.0"},
      {"tie_word_embeddings", m.tie_embeddings ? "true" : "false"},
      {"torch_dtype", "\"bfloat16\""},
      {"transformers_version", "\"4.44.0\""},
      {"use_cache", "true"},
      {"vocab_size", std::to_string(m.vocab_size)},
  };
  for (const auto& [k, v] : edits) {
    if (v.empty())
      kv.erase(k);
    else
      kv[k] = v;
  }
  std::string s = "{\n";
  for (const auto& [k, v] : kv) s += (s.size() > 2 ? ",\n  \"" : "  \"") + k + "\": " + v;
  return s + "\n}\n";
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

class TempDir {
 public:
  explicit TempDir(const std::string& tag = "") {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("loom_hfl_" + tag + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// Runs f and expects a one-line UserError whose message contains every piece.
template <typename F>
void expect_user_error(F&& f, const std::vector<std::string>& pieces) {
  try {
    f();
    ADD_FAILURE() << "no UserError thrown; expected one mentioning " << pieces[0];
  } catch (const UserError& e) {
    const std::string msg = e.what();
    for (const std::string& p : pieces)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

}  // namespace loom::test
