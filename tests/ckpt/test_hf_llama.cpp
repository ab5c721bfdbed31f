// HF Llama safetensors: a hand-built HF file (one file, two-shard index, directory) loads into
// the expected canonical tensors on every (tp, pp) shard; export writes HF names, shapes and
// config.json and loads back bitwise; bad files and configs give one clear error each.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "ckpt/canonical.h"
#include "ckpt/hf_llama.h"
#include "ckpt/safetensors.h"
#include "tests/ckpt/hf_llama_util.h"
#include "tests/support/compare.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::expect_user_error;
using test::TempDir;

const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> load(const std::string& path, const ParamLayout& L) {
  std::vector<float> v(L.total(), kNaN);
  load_canonical(path, L, v.data());
  return v;
}

// The hand-built HF checkpoint: coded tensors in dir/model.safetensors and a config.json.
std::string write_hf(const TempDir& dir, const ModelConfig& m,
                     const std::map<std::string, std::string>& config_edits = {}) {
  write_safetensors(dir.file("model.safetensors"), test::coded_hf_tensors(m), {{"format", "pt"}});
  test::write_text(dir.file("config.json"), test::hf_config_text(m, config_edits));
  return dir.file("model.safetensors");
}

// The same tensors in two shards (alternating names) with a hand-written index.
std::string write_hf_sharded(const TempDir& dir, const ModelConfig& m) {
  std::map<std::string, CanonicalTensor> part[2];
  json wm = json::object();
  int i = 0;
  for (auto& [name, t] : test::coded_hf_tensors(m)) {
    const std::string f = str("model-0000", i % 2 + 1, "-of-00002.safetensors");
    wm[name] = f;
    part[i++ % 2][name] = t;
  }
  write_safetensors(dir.file("model-00001-of-00002.safetensors"), part[0]);
  write_safetensors(dir.file("model-00002-of-00002.safetensors"), part[1]);
  test::write_text(dir.file("model.safetensors.index.json"),
                   json{{"metadata", {{"total_size", 12345}}}, {"weight_map", wm}}.dump(2));
  test::write_text(dir.file("config.json"), test::hf_config_text(m));
  return dir.file("model.safetensors.index.json");
}

// Every element of every shard equals the contract table's value; vocab padding is zero; split
// tensors are covered once over the tp ranks, replicated ones tp times (per holding stage).
// `hf`: the tensors in the file (default: test::coded_hf_tensors(m)).
void expect_coded_shards(const std::string& path, const ModelConfig& m, int tp, int pp,
                         std::map<std::string, CanonicalTensor> hf = {}) {
  if (hf.empty()) hf = test::coded_hf_tensors(m);
  std::map<std::string, std::vector<int>> covered;
  std::map<std::string, int> holders;
  for (int stage = 0; stage < pp; ++stage)
    for (int r = 0; r < tp; ++r) {
      SCOPED_TRACE(testing::Message()
                   << "tp" << tp << " pp" << pp << " stage " << stage << " rank " << r);
      const ParamLayout L(m, tp, r, pp, stage);
      const std::vector<float> v = load(path, L);
      for (const ParamSpec& p : L.params()) {
        std::vector<bool> written(p.numel(), false);
        std::vector<int>& cov = covered[p.name];
        cov.resize(size_t(p.rows * p.cols));
        holders[p.name] += r == 0;
        for (const ShardBlock& b : L.blocks(p))
          for (int64_t i = 0; i < b.rows; ++i)
            for (int64_t j = 0; j < b.cols; ++j) {
              const size_t li = size_t((b.lrow + i) * p.lcols + b.lcol + j);
              ASSERT_EQ(v[p.offset + li],
                        test::expected_canonical(m, hf, p.name, b.grow + i, b.gcol + j))
                  << p.name << " (" << b.grow + i << "," << b.gcol + j << ")";
              written[li] = true;
              cov[size_t((b.grow + i) * p.cols + b.gcol + j)]++;
            }
        for (size_t li = 0; li < p.numel(); ++li)
          if (!written[li]) {
            ASSERT_EQ(v[p.offset + li], 0.0f) << p.name << " padding " << li;
          }
      }
    }
  const ParamLayout whole(m, 1, 0, 1, 0);
  std::vector<ParamLayout> stages;  // rank 0 of each stage: where each tensor's split is seen
  for (int s = 0; s < pp; ++s) stages.emplace_back(m, tp, 0, pp, s);
  ASSERT_EQ(covered.size(), whole.params().size());
  for (const ParamSpec& g : whole.params()) {
    bool split = false;
    for (const ParamLayout& L : stages)
      if (const ParamSpec* p = L.find(g.name)) split = p->shard != Shard::Replicated;
    const int want = holders[g.name] * (split ? 1 : tp);
    for (int c : covered[g.name]) ASSERT_EQ(c, want) << g.name;
  }
}

// Loads `path` into a NaN-filled tiny untied model, expecting an error with every piece; the
// parameters must still be NaN.
void expect_load_error(const std::string& path, const std::vector<std::string>& pieces,
                       bool tied = false) {
  const ParamLayout L(test::tiny_llama(tied), 1, 0, 1, 0);
  std::vector<float> v(L.total(), kNaN);
  expect_user_error([&] { load_canonical(path, L, v.data()); }, pieces);
  for (float x : v) ASSERT_TRUE(std::isnan(x));
}

// ---- import of a hand-built HF checkpoint ----------------------------------------------------

TEST(HfLlamaImport, HandBuiltFileLoadsIntoTheContractTableOnEveryShard) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    TempDir dir;
    const ModelConfig m = test::tiny_llama(tied);
    const std::string path = write_hf(dir, m);
    for (auto [tp, pp] : std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {1, 2}, {2, 2}})
      expect_coded_shards(path, m, tp, pp);
  }
}

// A tied model ignores an lm_head.weight in the file (some tied checkpoints carry a copy).
TEST(HfLlamaImport, TiedModelIgnoresAnLmHeadInTheFile) {
  TempDir dir;
  const ModelConfig tied = test::tiny_llama(true);
  const auto hf = test::coded_hf_tensors(test::tiny_llama(false));
  ASSERT_EQ(hf.count("lm_head.weight"), 1u);
  write_safetensors(dir.file("model.safetensors"), hf);
  test::write_text(dir.file("config.json"), test::hf_config_text(tied));
  expect_coded_shards(dir.file("model.safetensors"), tied, 1, 1, hf);
  expect_coded_shards(dir.file("model.safetensors"), tied, 2, 2, hf);
}

// Spellings transformers versions write: RoPE base in rope_parameters, head_dim present, eps
// as written in fp64; and a config without rms_norm_eps takes transformers' default 1e-6.
TEST(HfLlamaImport, ConfigVariantsAreAccepted) {
  const ModelConfig m = test::tiny_llama(false);
  for (const std::map<std::string, std::string>& edit :
       std::vector<std::map<std::string, std::string>>{
           {{"rope_theta", ""},
            {"rope_parameters", R"({"rope_type": "default", "rope_theta": 500000.0})"}},
           {{"head_dim", "8"}, {"rms_norm_eps", "1e-05"}, {"rope_scaling", ""}},
       }) {
    TempDir dir;
    expect_coded_shards(write_hf(dir, m, edit), m, 1, 1);
  }
  TempDir dir;
  ModelConfig eps6 = m;
  eps6.norm_eps = 1e-6;
  expect_coded_shards(write_hf(dir, eps6, {{"rms_norm_eps", ""}}), eps6, 1, 1);
  expect_load_error(dir.file("model.safetensors"), {"rms_norm_eps is 1e-06", "set model.norm_eps"});
}

TEST(HfLlamaImport, TwoShardIndexAndDirectoriesLoadTheSameAsOneFile) {
  const ModelConfig m = test::tiny_llama(false);
  TempDir one, two;
  const std::string single = write_hf(one, m), index = write_hf_sharded(two, m);
  expect_coded_shards(index, m, 2, 2);
  for (int r = 0; r < 2; ++r) {
    const ParamLayout L(m, 2, r, 1, 0);
    const std::vector<float> ref = load(single, L);
    EXPECT_TRUE(test::bitwise_equal(load(index, L), ref));
    EXPECT_TRUE(test::bitwise_equal(load(two.str(), L), ref));        // directory with an index
    EXPECT_TRUE(test::bitwise_equal(load(one.str() + "/", L), ref));  // directory with one file
  }
}

// ---- export ----------------------------------------------------------------------------------

std::unique_ptr<ParallelCtx> single_rank() {
  test::ensure_mpi();
  return make_parallel_ctx(Grid(1, 1, 1));
}

TEST(HfLlamaExport, WritesExactlyTheHfTensorsAndLoadsBackBitwise) {
  auto pc = single_rank();
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    TempDir in, out;
    const ModelConfig m = test::tiny_llama(tied);
    const ParamLayout L(m, 1, 0, 1, 0);
    const std::vector<float> params = load(write_hf(in, m), L);
    const std::string path = out.file("model.safetensors");
    save_canonical(path, L, params.data(), *pc, &m);

    // The file holds the HF state dict: names, shapes and values of the hand-built one.
    const auto want = test::coded_hf_tensors(m);
    SafetensorsFile f(path);
    ASSERT_EQ(f.tensors().size(), want.size());
    for (const auto& [name, t] : want) {
      const StTensorInfo* got = f.find(name);
      ASSERT_NE(got, nullptr) << name;
      EXPECT_EQ(got->shape, test::hf_llama_shapes(m).at(name)) << name;
      EXPECT_EQ(got->dtype_name, "F32");
      std::vector<float> v(t.data.size());
      f.read_block_f32(name, 0, 0, t.rows, t.cols, v.data(), t.cols);
      EXPECT_TRUE(test::bitwise_equal(v, t.data)) << name;
    }
    EXPECT_EQ(f.find("lm_head.weight") != nullptr, !tied);
    EXPECT_TRUE(test::bitwise_equal(load(path, L), params));
    EXPECT_TRUE(test::bitwise_equal(load(out.str(), ParamLayout(m, 2, 1, 2, 1)),
                                    load(in.str(), ParamLayout(m, 2, 1, 2, 1))));
  }
}

TEST(HfLlamaExport, ConfigJsonDescribesTheModel) {
  auto pc = single_rank();
  TempDir out;
  ModelConfig m = test::tiny_llama(false);
  m.max_positions = 64;
  const ParamLayout L(m, 1, 0, 1, 0);
  std::vector<float> params(L.total(), 0.5f);
  save_canonical(out.file("model.safetensors"), L, params.data(), *pc, &m);
  std::ifstream in(out.file("config.json"));
  const json c = json::parse(in);
  EXPECT_EQ(c["architectures"], json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(c["model_type"], "llama");
  EXPECT_EQ(c["hidden_size"], 32);
  EXPECT_EQ(c["intermediate_size"], 48);
  EXPECT_EQ(c["num_attention_heads"], 4);
  EXPECT_EQ(c["num_key_value_heads"], 2);
  EXPECT_EQ(c["num_hidden_layers"], 2);
  EXPECT_EQ(c["head_dim"], 8);
  EXPECT_EQ(c["max_position_embeddings"], 64);
  EXPECT_EQ(c["rms_norm_eps"].get<double>(), 1e-5);
  EXPECT_EQ(c["rope_theta"].get<double>(), 500000.0);
  EXPECT_TRUE(c["rope_scaling"].is_null());
  EXPECT_EQ(c["vocab_size"], 97);
  EXPECT_EQ(c["tie_word_embeddings"], false);
  EXPECT_EQ(c["hidden_act"], "silu");
  EXPECT_EQ(c["attention_bias"], false);
  EXPECT_EQ(c["mlp_bias"], false);
  EXPECT_EQ(c["torch_dtype"], "float32");
  EXPECT_FALSE(c.contains("bos_token_id"));  // tokenizer-dependent: not written
  EXPECT_FALSE(c.contains("eos_token_id"));
}

// ---- bad inputs: one clear error each, parameters untouched -----------------------------------

TEST(HfLlamaErrors, ConfigMismatchesNameKeyValuesAndFix) {
  const ModelConfig m = test::tiny_llama(false);
  struct Case {
    std::map<std::string, std::string> edit;
    std::vector<std::string> pieces;
  } cases[] = {
      {{{"num_key_value_heads", "4"}},
       {"num_key_value_heads is 4", "n_kv_head 2", "set model.n_kv_head: 4"}},
      {{{"rope_theta", "10000.0"}},
       {"rope_theta is 10000.0", "rope_theta 500000.0", "set model.rope_theta: 10000.0"}},
      {{{"num_key_value_heads", "null"}},  // transformers: null means num_attention_heads
       {"num_key_value_heads is 4", "set model.n_kv_head: 4"}},
      {{{"rms_norm_eps", "1e-06"}}, {"rms_norm_eps is 1e-06", "set model.norm_eps: 1e-06"}},
      {{{"intermediate_size", "64"}}, {"intermediate_size is 64", "set model.ffn_hidden: 64"}},
      {{{"hidden_size", "64"}}, {"hidden_size is 64", "d_model 32", "set model.d_model: 64"}},
      {{{"num_hidden_layers", "3"}}, {"num_hidden_layers is 3", "set model.n_layer: 3"}},
      {{{"vocab_size", "128"}}, {"vocab_size is 128", "set model.vocab_size: 128"}},
      {{{"tie_word_embeddings", "true"}},
       {"tie_word_embeddings is true", "set model.tie_embeddings: true"}},
      {{{"head_dim", "16"}}, {"head_dim is 16", "d_model / n_head = 8"}},
      {{{"rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 8.0}"}},
       {"rope_scaling is set (rope_type \"llama3\")", "plain RoPE"}},
      {{{"model_type", "\"mistral\""}}, {"model_type is \"mistral\"", "expected \"llama\""}},
      {{{"attention_bias", "true"}}, {"attention_bias is true", "no biases"}},
      {{{"hidden_size", ""}}, {"key 'hidden_size' is missing"}},
  };
  for (const Case& c : cases) {
    TempDir dir;
    const std::string path = write_hf(dir, m, c.edit);
    std::vector<std::string> pieces = c.pieces;
    pieces.push_back(dir.file("config.json"));
    SCOPED_TRACE(c.pieces[0]);
    expect_load_error(path, pieces);
  }
}

// Malformed JSON or wrong value types in config.json and the index: a UserError naming the file.
TEST(HfLlamaErrors, MalformedJsonAndWrongTypes) {
  const ModelConfig m = test::tiny_llama(false);
  for (const std::map<std::string, std::string>& edit :
       std::vector<std::map<std::string, std::string>>{
           {{"hidden_size", "\"32\""}},
           {{"hidden_size", "32.0"}},
           {{"num_attention_heads", "18446744073709551615"}},
           {{"rope_theta", "\"big\""}},
           {{"tie_word_embeddings", "\"yes\""}},
           {{"rope_parameters", "\"x\""}},
           {{"rope_parameters", "{\"rope_type\": \"yarn\", \"rope_theta\": 500000.0}"}},
       }) {
    TempDir dir;
    SCOPED_TRACE(edit.begin()->first + ": " + edit.begin()->second);
    expect_load_error(write_hf(dir, m, edit), {dir.file("config.json"), edit.begin()->first});
  }
  for (const std::string& text : {std::string(""), std::string("[1, 2]"), std::string("{"),
                                  std::string(100, '[') + std::string(100, ']')}) {
    TempDir dir;
    const std::string path = write_hf(dir, m);
    test::write_text(dir.file("config.json"), text);
    expect_load_error(path, {dir.file("config.json")});
    const std::string index = write_hf_sharded(dir, m);
    test::write_text(index, text);
    expect_load_error(index, {index});
  }
  for (const std::string& text :
       {std::string(R"({"weight_map": []})"), std::string(R"({"weight_map": {"a": 3}})"),
        std::string(R"({"weight_map": {}})"), std::string(R"({"weight_map": {"a": ""}})")}) {
    TempDir dir;
    const std::string index = write_hf_sharded(dir, m);
    test::write_text(index, text);
    expect_load_error(index, {index, "weight_map"});
  }
}

TEST(HfLlamaErrors, MissingConfigJson) {
  TempDir dir;
  const std::string path = write_hf(dir, test::tiny_llama(false));
  fs::remove(dir.file("config.json"));
  expect_load_error(path, {dir.file("config.json"), "is missing", "loom export writes one"});
}

TEST(HfLlamaErrors, MissingOrMisshapenTensorNamesTheHfTensor) {
  const ModelConfig m = test::tiny_llama(false);
  {
    TempDir dir;
    auto t = test::coded_hf_tensors(m);
    t.erase("model.layers.1.self_attn.k_proj.weight");
    write_safetensors(dir.file("model.safetensors"), t);
    test::write_text(dir.file("config.json"), test::hf_config_text(m));
    expect_load_error(dir.file("model.safetensors"),
                      {dir.file("model.safetensors"), "missing tensor",
                       "model.layers.1.self_attn.k_proj.weight", "h.1.attn.c_attn.weight"});
  }
  {
    TempDir dir;
    auto t = test::coded_hf_tensors(m);
    t["model.layers.0.mlp.up_proj.weight"] = t["model.layers.0.mlp.down_proj.weight"];
    write_safetensors(dir.file("model.safetensors"), t);
    test::write_text(dir.file("config.json"), test::hf_config_text(m));
    expect_load_error(dir.file("model.safetensors"),
                      {dir.file("model.safetensors"), "model.layers.0.mlp.up_proj.weight",
                       "has shape [32,48]", "needs [48,32]"});
  }
}

TEST(HfLlamaErrors, BadIndexes) {
  const ModelConfig m = test::tiny_llama(false);
  {  // a shard the index names is not there
    TempDir dir;
    const std::string index = write_hf_sharded(dir, m);
    fs::remove(dir.file("model-00002-of-00002.safetensors"));
    expect_load_error(index, {index, "model-00002-of-00002.safetensors", "does not exist"});
  }
  {  // the index routes a tensor to a shard without it
    TempDir dir;
    const std::string index = write_hf_sharded(dir, m);
    std::ifstream in(index);
    json j = json::parse(in);
    j["weight_map"]["model.norm.weight"] =
        j["weight_map"]["model.norm.weight"] == "model-00001-of-00002.safetensors"
            ? "model-00002-of-00002.safetensors"
            : "model-00001-of-00002.safetensors";
    test::write_text(index, j.dump());
    expect_load_error(index, {index, "model.norm.weight", "has no such tensor"});
  }
  {  // a shard outside the directory, no weight_map
    TempDir dir;
    const std::string index = write_hf_sharded(dir, m);
    test::write_text(index, R"({"weight_map": {"model.norm.weight": "../x.safetensors"}})");
    expect_load_error(index, {index, "../x.safetensors", "outside"});
    test::write_text(index, R"({"metadata": {}})");
    expect_load_error(index, {index, "no 'weight_map'"});
  }
  {  // a directory holding neither form, and one holding both
    TempDir dir;
    test::write_text(dir.file("config.json"), test::hf_config_text(m));
    expect_load_error(dir.str(), {dir.str(), "neither"});
    write_hf_sharded(dir, m);
    write_hf(dir, m);
    expect_load_error(dir.str(), {dir.str(), "both"});
  }
}

}  // namespace
}  // namespace loom
