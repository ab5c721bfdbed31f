// The LlamaForCausalLM config.json: written from a ModelConfig, and checked against one key by
// key (with transformers' defaults for the keys a config may leave out).
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "ckpt/hf_llama.h"
#include "ckpt/safetensors_index.h"
#include "core/check.h"
#include "core/json_util.h"

namespace loom {

using json = nlohmann::json;

std::string hf_llama_config_json(const ModelConfig& m) {
  const json c = {
      {"architectures", json::array({"LlamaForCausalLM"})},
      {"model_type", "llama"},
      {"hidden_size", m.d_model},
      {"intermediate_size", m.ffn()},
      {"num_attention_heads", m.n_head},
      {"num_key_value_heads", m.kv_heads()},
      {"num_hidden_layers", m.n_layer},
      {"head_dim", m.head_dim()},
      {"max_position_embeddings", m.positions()},
      {"rms_norm_eps", m.norm_eps},
      {"rope_theta", m.rope_theta},
      {"rope_scaling", nullptr},
      {"vocab_size", m.vocab_size},
      {"tie_word_embeddings", m.tie_embeddings},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"torch_dtype", "float32"},
      {"use_cache", true},
  };
  return c.dump(2) + "\n";
}

namespace {

class ConfigCheck {
 public:
  ConfigCheck(const std::string& path, const json& j) : path_(path), j_(j) {}

  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

  // An integer key (required unless `dflt` is given) equal to `want`, else the fix.
  void integer(const char* key, int64_t want, const char* setting, const int64_t* dflt = nullptr) {
    int64_t got;
    if (has(key)) {
      const json& v = j_[key];
      if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX))
        fail(str(key, " is ", json_brief(v), ", expected an integer"));
      got = v.get<int64_t>();
    } else if (dflt) {
      got = *dflt;
    } else {
      fail(str("key '", key, "' is missing (a LlamaForCausalLM config.json has it)"));
    }
    if (got != want)
      fail(str(key, " is ", got, " but the model has ", setting, " ", want, " (set model.", setting,
               ": ", got, ")"));
  }

  // A number equal to `want` up to float32 rounding (some writers store these as float32:
  // 1e-5 becomes 9.99999974737875e-06, a relative difference below 2^-24 < 1e-6).
  void number(const json& v, const char* key, double want, const char* setting) {
    if (!v.is_number()) fail(str(key, " is ", json_brief(v), ", expected a number"));
    const double got = v.get<double>();
    if (std::fabs(got - want) > 1e-6 * std::max(std::fabs(got), std::fabs(want)))
      fail(str(key, " is ", json(got).dump(), " but the model has ", setting, " ",
               json(want).dump(), " (set model.", setting, ": ", json(got).dump(), ")"));
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw UserError(str("init config '", path_, "': ", what));
  }

  // Refuses a key whose value loom cannot implement.
  void refuse_unless(bool ok, const char* key, const std::string& why) const {
    if (!ok)
      fail(str(key, " is ", json_brief(j_[key]), ": ", why,
               "; loom cannot load this checkpoint as it is"));
  }

 private:
  const std::string& path_;
  const json& j_;
};

}  // namespace

void check_llama_config_json(const std::string& path, const ModelConfig& m) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw UserError(str("init config '", path, "' is missing: a Hugging Face checkpoint keeps its ",
                        "config.json next to the weights (loom export writes one)"));
  const json j = read_json_file(path, "init config", size_t(16) << 20, 16);
  ConfigCheck c(path, j);
  if (!j.is_object()) c.fail("not a JSON object");
  if (!c.has("model_type") || j["model_type"] != "llama")
    c.fail(
        str("model_type is ", c.has("model_type") ? json_brief(j["model_type"]) : "missing",
            ", expected \"llama\" (not a Llama checkpoint; model.arch: llama reads only those)"));
  c.integer("vocab_size", m.vocab_size, "vocab_size");
  c.integer("hidden_size", m.d_model, "d_model");
  c.integer("num_hidden_layers", m.n_layer, "n_layer");
  c.integer("num_attention_heads", m.n_head, "n_head");
  // transformers: num_key_value_heads null or absent -> num_attention_heads.
  const int64_t heads = j["num_attention_heads"].get<int64_t>();
  c.integer("num_key_value_heads", m.kv_heads(), "n_kv_head", &heads);
  c.integer("intermediate_size", m.ffn(), "ffn_hidden");
  if (c.has("head_dim") &&
      (!j["head_dim"].is_number_integer() || j["head_dim"].get<int64_t>() != m.head_dim()))
    c.fail(str("head_dim is ", json_brief(j["head_dim"]), " but loom's head dimension is ",
               "d_model / n_head = ", m.head_dim(), "; loom cannot load this checkpoint as it is"));
  // transformers' LlamaConfig defaults: rms_norm_eps 1e-6, rope_theta 10000, untied.
  c.number(c.has("rms_norm_eps") ? j["rms_norm_eps"] : json(1e-6), "rms_norm_eps", m.norm_eps,
           "norm_eps");
  // Newer files may keep RoPE's settings in rope_parameters {rope_type, rope_theta}.
  json theta = c.has("rope_theta") ? j["rope_theta"] : json(10000.0);
  if (c.has("rope_parameters")) {
    const json& rp = j["rope_parameters"];
    c.refuse_unless(rp.is_object(), "rope_parameters", "expected an object");
    if (rp.contains("rope_type") && rp["rope_type"] != "default")
      c.fail(str("rope_parameters.rope_type is ", json_brief(rp["rope_type"]),
                 ": loom implements plain RoPE (\"default\") only; loom cannot load this ",
                 "checkpoint as it is"));
    if (rp.contains("rope_theta")) theta = rp["rope_theta"];
  }
  c.number(theta, "rope_theta", m.rope_theta, "rope_theta");
  if (c.has("rope_scaling")) {
    const json& rs = j["rope_scaling"];
    const char* k = rs.is_object() && rs.contains("rope_type") ? "rope_type" : "type";
    c.fail(str("rope_scaling is set",
               rs.is_object() && rs.contains(k) ? str(" (", k, " ", json_brief(rs[k]), ")") : "",
               ": loom implements plain RoPE without scaling; loom cannot load this checkpoint ",
               "as it is"));
  }
  const bool tied = c.has("tie_word_embeddings") ? j["tie_word_embeddings"] == true : false;
  if (c.has("tie_word_embeddings") && !j["tie_word_embeddings"].is_boolean())
    c.fail(str("tie_word_embeddings is ", json_brief(j["tie_word_embeddings"]),
               ", expected true or false"));
  if (tied != m.tie_embeddings)
    c.fail(str("tie_word_embeddings is ", tied ? "true" : "false",
               " but the model has tie_embeddings ", m.tie_embeddings ? "true" : "false",
               " (set model.tie_embeddings: ", tied ? "true" : "false", ")"));
  c.refuse_unless(!c.has("attention_bias") || j["attention_bias"] == false, "attention_bias",
                  "loom's llama has no biases");
  c.refuse_unless(!c.has("mlp_bias") || j["mlp_bias"] == false, "mlp_bias",
                  "loom's llama has no biases");
  c.refuse_unless(!c.has("hidden_act") || j["hidden_act"] == "silu", "hidden_act",
                  "loom's llama MLP uses silu");
}

}  // namespace loom
