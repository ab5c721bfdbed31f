// Canonical weights: shard-wise reads (HDF5 hyperslabs or safetensors blocks), and a chunked
// gather-to-rank-0 writer of either format (ckpt/gather_chunks.h, ckpt/export_file.h).
#include "ckpt/canonical.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "ckpt/export_file.h"
#include "ckpt/file_util.h"
#include "ckpt/gather_chunks.h"
#include "ckpt/hdf5_util.h"
#include "ckpt/hf_llama.h"
#include "ckpt/safetensors.h"
#include "ckpt/safetensors_index.h"
#include "core/check.h"

namespace loom {

namespace {
template <typename T>
std::string dims_str(const std::vector<T>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

template <typename T>
void check_shape(const std::string& path, const ParamSpec& p, const std::vector<T>& got) {
  std::vector<T> want =
      p.ndim == 1 ? std::vector<T>{T(p.cols)} : std::vector<T>{T(p.rows), T(p.cols)};
  if (got != want)
    throw UserError(str("init file '", path, "': tensor '", p.name, "' has shape ", dims_str(got),
                        ", the model needs ", dims_str(want), " (check model.* against the file)"));
}

std::string missing_hint(const ParamSpec& p) {
  if (p.name == "lm_head.weight")
    return "the model has model.tie_embeddings: false; set it to true to use wte as lm_head";
  return "";
}

// Safetensors: tensors are found with or without the "transformer." prefix of a
// GPT2LMHeadModel state dict; entries the layout does not name are never looked at.
void load_safetensors(const std::string& path, const ParamLayout& layout, float* params) {
  SafetensorsFile f(path);
  std::vector<std::string> names;
  for (const ParamSpec& p : layout.params()) {
    const std::string prefixed = "transformer." + p.name;
    const StTensorInfo* plain = f.find(p.name);
    const StTensorInfo* pref = f.find(prefixed);
    if (plain && pref)
      throw UserError(str("init file '", path, "': holds both '", p.name, "' and '", prefixed,
                          "' (keep one of them)"));
    if (!plain && !pref)
      throw UserError(str("init file '", path, "': missing tensor '", p.name, "' (nor '", prefixed,
                          "' found", missing_hint(p).empty() ? "" : "; " + missing_hint(p), ")"));
    const StTensorInfo& t = plain ? *plain : *pref;
    names.push_back(plain ? p.name : prefixed);
    check_shape(path, p, t.shape);
    if (!t.is_float())
      throw UserError(str("init file '", path, "': tensor '", names.back(), "' has dtype ",
                          t.dtype_name, "; weights must be F32, F16, BF16 or F64"));
  }
  size_t i = 0;
  for (const ParamSpec& p : layout.params()) {
    const std::string& name = names[i++];
    float* dst = params + p.offset;
    std::memset(dst, 0, p.numel() * sizeof(float));
    for (const ShardBlock& b : layout.blocks(p))
      f.read_block_f32(name, b.grow, b.gcol, b.rows, b.cols, dst + b.lrow * p.lcols + b.lcol,
                       p.lcols);
  }
}
}  // namespace

bool is_safetensors_path(const std::string& path) {
  static const std::string ext = ".safetensors";
  if (path.size() < ext.size()) return false;
  for (size_t i = 0; i < ext.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(path[path.size() - ext.size() + i])) != ext[i])
      return false;
  return true;
}

void load_canonical(const std::string& path, const ParamLayout& layout, float* params) {
  if (layout.model().llama() && is_safetensors_source(path))
    return load_llama_safetensors(path, layout, params);
  if (is_safetensors_path(path)) return load_safetensors(path, layout, params);
  h5::Handle f = h5::open_read(path, "init file");
  // Check every tensor first, so a bad file leaves the parameters untouched.
  for (const ParamSpec& p : layout.params()) {
    if (!h5::has_dataset(f.get(), p.name, path))
      throw UserError(str("init file '", path, "': missing tensor '", p.name, "'",
                          missing_hint(p).empty() ? "" : " (" + missing_hint(p) + ")"));
    check_shape(path, p, h5::dataset_shape(f.get(), p.name, path));
  }
  for (const ParamSpec& p : layout.params()) {
    float* dst = params + p.offset;
    std::memset(dst, 0, p.numel() * sizeof(float));
    for (const ShardBlock& b : layout.blocks(p))
      h5::read_block_f32(f.get(), p.name, hsize_t(b.grow), hsize_t(b.gcol), hsize_t(b.rows),
                         hsize_t(b.cols), dst + b.lrow * p.lcols + b.lcol, hsize_t(p.lcols), path);
  }
}

namespace {
// Rank 0's outcome, made known to every rank: a rank with its own error rethrows it; the
// others throw one line pointing at rank 0's message.
void agree_with_root(std::exception_ptr err, ParallelCtx& pc, const std::string& path) {
  int bad = err ? 1 : 0;
  LOOM_MPI(MPI_Bcast(&bad, 1, MPI_INT, 0, pc.world.mpi()));
  if (err) std::rethrow_exception(err);
  if (bad) throw UserError(str("writing '", path, "' failed on world rank 0 (see its message)"));
}
}  // namespace

std::map<std::string, CanonicalTensor> gather_canonical(const ParamLayout& layout,
                                                        const float* params, ParallelCtx& pc) {
  const std::vector<OutTensor> outs = canonical_outs(layout.model());
  std::map<std::string, CanonicalTensor> tensors;
  gather_chunks(outs, layout, params, pc, [&](size_t i, const Rect& r, const float* v) {
    const OutTensor& o = outs[i];
    CanonicalTensor& t = tensors[o.name];
    if (t.data.empty()) {
      t.rows = o.rows(), t.cols = o.cols(), t.ndim = int(o.shape.size());
      t.data.assign(size_t(t.rows * t.cols), 0.0f);
    }
    std::copy(v, v + r.rows * r.cols, t.data.begin() + (r.row0 * t.cols + r.col0));
  });
  return tensors;
}

std::string hf_gpt2_config_json(const ModelConfig& m) {
  nlohmann::json c = {
      {"model_type", "gpt2"},
      {"architectures", nlohmann::json::array({"GPT2LMHeadModel"})},
      {"vocab_size", m.vocab_size},
      {"n_positions", m.positions()},
      {"n_ctx", m.positions()},
      {"n_embd", m.d_model},
      {"n_layer", m.n_layer},
      {"n_head", m.n_head},
      {"n_inner", nullptr},                 // 4 * n_embd
      {"activation_function", "gelu_new"},  // the tanh form
      {"layer_norm_epsilon", 1e-5},
      {"initializer_range", 0.02},
      {"resid_pdrop", m.dropout},
      {"embd_pdrop", m.dropout},
      {"attn_pdrop", m.dropout},
      {"scale_attn_weights", true},
      {"scale_attn_by_inverse_layer_idx", false},
      {"reorder_and_upcast_attn", false},
      {"tie_word_embeddings", m.tie_embeddings},
      {"torch_dtype", "float32"},
      {"use_cache", true},
  };
  if (m.vocab_size > 50256) c["bos_token_id"] = c["eos_token_id"] = 50256;  // <|endoftext|>
  return c.dump(2) + "\n";
}

void save_canonical(const std::string& path, const ParamLayout& layout, const float* params,
                    ParallelCtx& pc, const ModelConfig* model) {
  const std::vector<OutTensor> outs = export_outs(path, layout.model());
  // Rank 0 writes each chunk as it arrives: it never holds more than one chunk of the model.
  std::unique_ptr<ExportFile> file;
  std::exception_ptr err;
  try {
    if (pc.rank == 0) file = std::make_unique<ExportFile>(path, outs);
  } catch (...) {
    err = std::current_exception();
  }
  agree_with_root(err, pc, path);
  try {
    gather_chunks(outs, layout, params, pc,
                  [&](size_t i, const Rect& r, const float* v) { file->write(i, r, v); });
    if (file) file->commit(model);
  } catch (...) {
    err = std::current_exception();
  }
  agree_with_root(err, pc, path);
}

}  // namespace loom
