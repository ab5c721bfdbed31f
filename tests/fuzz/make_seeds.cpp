// loom_fuzz_seeds OUT_DIR SOURCE_DIR: writes the seed corpus of every fuzz target under
// OUT_DIR/<target>/, made from the repository's own files (configs, test fixtures, the GPT-2
// tokenizer files when present) and from small files made by loom's own writers.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "ckpt/file_util.h"
#include "ckpt/safetensors.h"
#include "core/check.h"
#include "data/indexed_dataset.h"
#include "data_tools/gpt2_bpe.h"
#include "tests/fuzz/fuzz_targets.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/support/configs.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace loom::fuzz {
namespace {

std::string out_dir, src_dir;
int written = 0;

void seed(const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(out_dir + "/" + target);
  write_file(out_dir + "/" + target + "/" + name, bytes);
  ++written;
}

// Datasets made by loom's writer: several dtypes, one- and multi-sequence documents.
void mmidx_seeds() {
  const std::string prefix = scratch_dir() + "/seed_tokens";
  int n = 0;
  for (mmidx::IdxDType dtype : {mmidx::IdxDType::UInt16, mmidx::IdxDType::Int32,
                                mmidx::IdxDType::UInt8, mmidx::IdxDType::Int64}) {
    IndexedDatasetWriter w(prefix, dtype);
    std::vector<int32_t> t;
    for (int d = 0; d < 6; ++d) {
      t.assign(size_t(3 + 5 * d), 0);
      for (size_t i = 0; i < t.size(); ++i) t[i] = int32_t((i * 37 + size_t(d)) % 200);
      if (d % 3 == 2) {  // Megatron's multi-sequence documents
        w.add_sequence(t.data(), t.size() / 2);
        w.add_sequence(t.data() + t.size() / 2, t.size() - t.size() / 2);
        w.end_document();
      } else {
        w.add_document(t.data(), t.size());
      }
    }
    w.finish();
    seed("mmidx", str("writer_", mmidx::dtype_name(dtype)),
         join({read_file(prefix + ".idx"), read_file(prefix + ".bin")}));
    ++n;
  }
}

void config_seeds() {
  for (const auto& e : fs::directory_iterator(src_dir + "/configs")) {
    if (e.path().extension() != ".yaml") continue;
    const std::string text = read_file(e.path().string());
    seed("config", e.path().stem().string(), text);
    seed("config", e.path().stem().string() + "_set",
         join({text,
               "train.steps=5\nmodel.n_layer=4\ndata.train=[{prefix: a, weight: 2}]\n"
               "parallel.stage_layers=[1, 1]\ncheckpoint.resume=auto"}));
  }
}

void weight_seeds() {
  const std::string fixtures = src_dir + "/tests/reference/fixtures/";
  for (const char* f : {"gpt2_tiny_hf_mixed.safetensors", "gpt2_tiny_hf_rounded.safetensors"})
    seed("safetensors", f, read_file(fixtures + f));
  std::map<std::string, CanonicalTensor> small;
  small["wpe.weight"] = {2, 3, 2, {1, 2, 3, 4, 5, 6}};
  small["ln_f.bias"] = {1, 3, 1, {0.5f, -1, 2}};
  const std::string st = scratch_dir() + "/seed.safetensors";
  write_safetensors(st, small, {{"format", "pt"}});
  seed("safetensors", "small", read_file(st));
  seed("hdf5_raw", "gpt2_tiny_weights.h5", read_file(fixtures + "gpt2_tiny_weights.h5"));
  seed("hdf5_weights", "valid", h5_valid_program(canonical_names()));
}

// A checkpoint of the tiny model as save_checkpoint writes it: meta.json naming one shard
// (with its size and CRC-32) and the shard's program.
void checkpoint_seeds() {
  const std::vector<H5Expect> names = checkpoint_names();
  const std::string program = h5_valid_program(names), shard = scratch_dir() + "/seed_shard.h5";
  build_h5(shard, program, names);
  uint64_t bytes = 0;
  const uint32_t crc = file_crc32(shard, &bytes);
  ParamLayout L(test::fixture_model(), 1, 0, 1, 0);
  json blocks = json::array();
  for (const ParamSpec& p : L.params()) {
    std::vector<ShardBlock> bl = L.blocks(p);
    for (size_t k = 0; k < bl.size(); ++k)
      blocks.push_back({{"tensor", p.name},
                        {"k", k},
                        {"grow", bl[k].grow},
                        {"gcol", bl[k].gcol},
                        {"rows", bl[k].rows},
                        {"cols", bl[k].cols},
                        {"tensor_rows", p.rows},
                        {"tensor_cols", p.cols},
                        {"file", "shard_pp0_tp0.h5"}});
  }
  Config cfg;
  cfg.model = test::fixture_model();
  const ModelConfig& m = cfg.model;
  json meta = {
      {"format", "loom-checkpoint-1"},
      {"step", 10},
      {"consumed_samples", 80},
      {"trainer_state", {{"loss_scale", 0.0}, {"loss_scale_clean", 0}, {"skipped_steps", 0}}},
      {"seed", 1234},
      {"model",
       {{"n_layer", m.n_layer},
        {"n_head", m.n_head},
        {"d_model", m.d_model},
        {"vocab_size", m.vocab_size},
        {"positions", m.positions()},
        {"tie_embeddings", m.tie_embeddings}}},
      {"layout", {{"dp", 1}, {"pp", 1}, {"tp", 1}, {"zero_stage", 0}, {"order", "tp-dp-pp"}}},
      {"config", to_yaml(cfg)},
      {"files", json::array({{{"file", "shard_pp0_tp0.h5"}, {"bytes", bytes}, {"crc32", crc}}})},
      {"blocks", blocks}};
  seed("checkpoint", "valid", join({meta.dump(1), program, ""}));
  seed("checkpoint", "valid_latest", join({meta.dump(1), program, "step_0000010\n"}));
}

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// A small byte-level BPE: the 256 byte tokens, merges (the first ones of GPT-2's vocab.bpe when
// scripts/get_gpt2_tokenizer.sh has fetched it, else a built-in list), <|endoftext|>.
void tokenizer_seeds() {
  std::vector<std::string> merges = {"Ġ t", "Ġ a", "h e", "i n", "r e", "o n", "Ġt he", "e r",
                                     "Ġ s", "a t", "Ġ w", "Ġ o", "e n", "Ġ c", "i t",   "i s"};
  const std::string bpe = src_dir + "/data/tokenizer/gpt2/vocab.bpe";
  if (fs::exists(bpe)) {
    merges.clear();
    std::istringstream in(read_file(bpe));
    std::string line;
    std::getline(in, line);  // #version
    while (merges.size() < 400 && std::getline(in, line)) merges.push_back(line);
  }
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[utf8(tok::byte_to_unicode(uint8_t(b)))] = b;
  std::string merges_text = "#version: 0.2\n";
  for (const std::string& mline : merges) {
    const size_t sp = mline.find(' ');
    const std::string joined = mline.substr(0, sp) + mline.substr(sp + 1);
    if (!vocab.contains(joined)) vocab[joined] = int(vocab.size());
    merges_text += mline + "\n";
  }
  vocab["<|endoftext|>"] = int(vocab.size());
  const std::string text =
      "The quick brown fox's 12345 jumps -- over the lazy dog.\n\n  Ünïcödé 日本語 ok?  ";
  seed("tokenizer", "small", join({vocab.dump(), merges_text, text}));
}

}  // namespace
}  // namespace loom::fuzz

int main(int argc, char** argv) {
  using namespace loom::fuzz;
  if (argc != 3) {
    std::cerr << "usage: loom_fuzz_seeds OUT_DIR SOURCE_DIR\n";
    return 2;
  }
  out_dir = argv[1], src_dir = argv[2];
  try {
    mmidx_seeds();
    config_seeds();
    weight_seeds();
    checkpoint_seeds();
    tokenizer_seeds();
  } catch (const std::exception& e) {
    std::cerr << "loom_fuzz_seeds: " << e.what() << "\n";
    return 1;
  }
  fs::remove_all(scratch_dir());
  std::cout << "loom_fuzz_seeds: " << written << " seeds under " << out_dir << "\n";
  return 0;
}
