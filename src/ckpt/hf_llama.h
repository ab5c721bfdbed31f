// Hugging Face LlamaForCausalLM weights: the mapping of loom's canonical llama tensors onto HF
// tensors (transposes, q|k|v and gate|up column concatenations), shard-wise import from
// safetensors (one file or an index of shards) and the HF-named export with its config.json.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "ckpt/canonical.h"
#include "config/config.h"
#include "layout/param_layout.h"

namespace loom {

// Canonical columns [col0, col0 + cols) of a canonical tensor, all of its rows, are held by HF
// tensor `name`: as is (shape [rows, cols], or [cols] for a 1-D tensor), or transposed (shape
// [cols, rows]: HF's nn.Linear weight is [out, in], loom's is [in, out]).
struct HfPiece {
  std::string name;
  int64_t col0, cols;
  bool transposed;
};

// The HF pieces of canonical tensor `canonical_name` of llama model `m`, in column order; they
// cover the tensor's columns exactly once. LOOM_CHECK for a name a llama model does not have.
std::vector<HfPiece> llama_hf_pieces(const ModelConfig& m, const std::string& canonical_name);

// The HF shape of a piece of a canonical tensor with `rows` rows and rank `ndim`: [rows, cols]
// (or [cols] when 1-D) as is, [cols, rows] transposed.
std::vector<int64_t> hf_piece_shape(int64_t rows, int ndim, const HfPiece& piece);

// Fills this rank's parameters from HF llama weights: `path` as SafetensorsSet takes it (a
// .safetensors file, an index .json, or a directory). The config.json next to the weights is
// checked against `layout.model()` first (check_llama_config_json), then every HF tensor this
// rank needs (present, float dtype, shape), before any parameter is written. Each rank reads
// only the rectangles of its own shard blocks; transposed pieces are transposed in memory in
// bounded chunks. Padding vocab rows are zero. Other tensors in the files are ignored
// (lm_head.weight too when the model ties its embeddings).
void load_llama_safetensors(const std::string& path, const ParamLayout& layout, float* params);

// Whole canonical llama tensors (as gather_canonical returns them) renamed and reshaped to the
// HF LlamaForCausalLM state dict: every HF tensor of every piece, nothing else.
std::map<std::string, CanonicalTensor> llama_to_hf(
    const std::map<std::string, CanonicalTensor>& canonical, const ModelConfig& m);

// The HF LlamaForCausalLM config.json for `m` (pretty-printed JSON text).
std::string hf_llama_config_json(const ModelConfig& m);

// Checks a LlamaForCausalLM config.json against `m`: model_type, the sizes, rms_norm_eps,
// rope_theta, tie_word_embeddings, head_dim, no rope_scaling, no biases, silu. One UserError
// naming the file, the key, both values and the model.* setting that fixes it.
void check_llama_config_json(const std::string& config_path, const ModelConfig& m);

}  // namespace loom
