// Canonical weights (docs/checkpoints.md): HDF5 (or safetensors) with the Hugging Face GPT-2 tensor
// names and unpadded shapes (Llama safetensors: HF Llama names). Loading reads only this rank's
// shard; saving gathers every shard.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "layout/param_layout.h"
#include "parallel/parallel_ctx.h"

namespace loom {

// Fills this rank's parameters from a canonical file. Throws UserError naming the file and the
// tensor when a tensor is missing or has the wrong shape; padding vocab rows are set to zero.
// Nothing is written to `params` unless every tensor checks out.
// A path ending in ".safetensors" is read as a Hugging Face safetensors file (F32, F16, BF16 or
// F64; names with or without the "transformer." prefix; other entries such as the attn.bias mask
// buffers, and lm_head.weight of a tied model, are ignored). Any other path is HDF5.
// A llama model (model.arch: llama) reads Hugging Face LlamaForCausalLM names instead
// (ckpt/hf_llama.h) from a .safetensors file, a model.safetensors.index.json of shards or a
// directory holding either, after checking the config.json next to them; its HDF5 files use
// loom's canonical names.
void load_canonical(const std::string& path, const ParamLayout& layout, float* params);

// A whole canonical tensor: shape as in the file (1-D tensors have rows == 1, ndim == 1).
struct CanonicalTensor {
  int64_t rows = 0, cols = 0;
  int ndim = 0;
  std::vector<float> data;
};

// Gathers every canonical tensor (from the dp-rank-0 replica) to world rank 0; other ranks get
// an empty map. Collective over pc.world; moved in chunks (ckpt/gather_chunks.h), so the model
// may exceed 2 GiB, but the map holds all of it on rank 0: writers use save_canonical.
std::map<std::string, CanonicalTensor> gather_canonical(const ParamLayout& layout,
                                                        const float* params, ParallelCtx& pc);

// Gathers the parameters of the dp-rank-0 replica to world rank 0 one chunk at a time
// (LOOM_GATHER_CHUNK_BYTES, ckpt/gather_chunks.h); rank 0 writes each chunk to `path` as it
// arrives (under a temporary name, renamed when complete), holding one chunk, not the model.
// Collective over the world communicator; when rank 0 cannot write, every rank throws.
// A path ending in ".safetensors" is written as F32 safetensors; with `model` given, a Hugging
// Face GPT-2 `config.json` is also written in the same directory (overwriting one there). A
// llama model writes Hugging Face LlamaForCausalLM names and shapes and a LlamaForCausalLM
// config.json.
void save_canonical(const std::string& path, const ParamLayout& layout, const float* params,
                    ParallelCtx& pc, const ModelConfig* model = nullptr);

// True when `path` names a safetensors file (by its extension).
bool is_safetensors_path(const std::string& path);

// The Hugging Face GPT2LMHeadModel config.json for `m` (pretty-printed JSON text).
std::string hf_gpt2_config_json(const ModelConfig& m);

}  // namespace loom
