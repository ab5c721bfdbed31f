// Canonical weights: shard-wise reads (HDF5 hyperslabs or safetensors blocks), and a
// gather-to-rank-0 writer of either format.
#include "ckpt/canonical.h"

#include <cctype>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "ckpt/file_util.h"
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
// Wire format of one shard block: this header, the name, then rows x cols floats.
struct BlockHeader {
  uint32_t name_len;
  int32_t ndim;
  int64_t rows, cols;  // canonical shape
  ShardBlock block;
};

void pack(std::vector<char>& out, const ParamSpec& p, const ShardBlock& b, const float* src) {
  auto put = [&](const void* x, size_t n) {
    const char* c = static_cast<const char*>(x);
    out.insert(out.end(), c, c + n);
  };
  BlockHeader h{uint32_t(p.name.size()), p.ndim, p.rows, p.cols, b};
  put(&h, sizeof h);
  put(p.name.data(), p.name.size());
  for (int64_t r = 0; r < b.rows; ++r)
    put(src + (b.lrow + r) * p.lcols + b.lcol, size_t(b.cols) * 4);
}

// Rebuilds whole canonical tensors from the concatenated blocks of every rank.
std::map<std::string, CanonicalTensor> unpack(const std::vector<char>& all) {
  std::map<std::string, CanonicalTensor> tensors;
  size_t pos = 0;
  while (pos < all.size()) {
    BlockHeader h;
    std::memcpy(&h, &all[pos], sizeof h);
    pos += sizeof h;
    std::string name(&all[pos], h.name_len);
    pos += h.name_len;
    CanonicalTensor& t = tensors[name];
    if (t.data.empty()) {
      t.rows = h.rows, t.cols = h.cols, t.ndim = h.ndim;
      t.data.assign(size_t(h.rows * h.cols), 0.0f);
    }
    const ShardBlock& b = h.block;
    for (int64_t r = 0; r < b.rows; ++r) {
      std::memcpy(&t.data[size_t((b.grow + r) * t.cols + b.gcol)], &all[pos], size_t(b.cols) * 4);
      pos += size_t(b.cols) * 4;
    }
  }
  return tensors;
}
}  // namespace

std::map<std::string, CanonicalTensor> gather_canonical(const ParamLayout& layout,
                                                        const float* params, ParallelCtx& pc) {
  // Each tensor element is exported by exactly one rank: the first replica's (dp0, cp0) norm
  // owner.
  std::vector<char> mine;
  if (pc.replica_index() == 0)
    for (const ParamSpec& p : layout.params())
      if (p.norm_owner)
        for (const ShardBlock& b : layout.blocks(p)) pack(mine, p, b, params + p.offset);

  int n = int(mine.size());
  LOOM_CHECK(mine.size() < size_t(1) << 31, "export shard of ", mine.size(), " bytes");
  std::vector<int> sizes(size_t(pc.world.size())), displs(sizes.size());
  LOOM_MPI(MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, pc.world.mpi()));
  std::vector<char> all;
  if (pc.rank == 0) {
    size_t total = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      displs[i] = int(total);
      total += size_t(sizes[i]);
    }
    LOOM_CHECK(total < size_t(1) << 31, "export of ", total, " bytes needs chunking");
    all.resize(total);
  }
  LOOM_MPI(MPI_Gatherv(mine.data(), n, MPI_BYTE, all.data(), sizes.data(), displs.data(), MPI_BYTE,
                       0, pc.world.mpi()));
  if (pc.rank != 0) return {};
  return unpack(all);
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
  std::map<std::string, CanonicalTensor> tensors = gather_canonical(layout, params, pc);
  if (pc.rank != 0) return;
  if (is_safetensors_path(path)) {
    const bool llama = layout.model().llama();
    if (llama) tensors = llama_to_hf(tensors, layout.model());
    write_safetensors(path, tensors, {{"format", "pt"}});  // "pt": what transformers expects
    if (model) {
      size_t slash = path.find_last_of('/');
      std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
      write_text_file_atomic(dir + "config.json",
                             llama ? hf_llama_config_json(*model) : hf_gpt2_config_json(*model));
    }
    return;
  }
  std::string tmp = path + ".tmp";
  {
    h5::Handle f = h5::create(tmp);
    for (const auto& [name, t] : tensors) {
      std::vector<hsize_t> shape = t.ndim == 1
                                       ? std::vector<hsize_t>{hsize_t(t.cols)}
                                       : std::vector<hsize_t>{hsize_t(t.rows), hsize_t(t.cols)};
      h5::write_f32(f.get(), name, shape, t.data.data(), tmp);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw UserError(str("cannot rename '", tmp, "' to '", path, "'"));
}

}  // namespace loom
