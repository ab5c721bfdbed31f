// HF llama tensors <-> canonical loom tensors: the name/column mapping, the shard-wise reader
// (block rectangles of one HF tensor, transposed in memory) and the export conversion.
#include "ckpt/hf_llama.h"

#include <algorithm>
#include <cstring>

#include "ckpt/safetensors_index.h"
#include "core/check.h"

namespace loom {

namespace {

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

// Reads HF rows [hr0, hr0 + hrows) x cols [hc0, hc0 + hcols) of `name` and stores their
// transpose at out (hcols rows of hrows values, row stride ld), 16 HF rows at a time: the
// buffer stays small (16 x hcols floats) and each read is still 16 rows long.
void read_transposed(const SafetensorsSet& set, const std::string& name, int64_t hr0, int64_t hrows,
                     int64_t hc0, int64_t hcols, float* out, int64_t ld) {
  if (hrows == 0 || hcols == 0) return;
  const int64_t chunk = 16;
  std::vector<float> tmp(size_t(std::min(chunk, hrows) * hcols));
  for (int64_t r = 0; r < hrows; r += chunk) {
    const int64_t n = std::min(chunk, hrows - r);
    set.read_block_f32(name, hr0 + r, hc0, n, hcols, tmp.data(), hcols);  // (n, hcols)
    for (int64_t i = 0; i < hcols; ++i) {
      float* row = out + i * ld + r;
      for (int64_t j = 0; j < n; ++j) row[j] = tmp[size_t(j * hcols + i)];
    }
  }
}

}  // namespace

std::vector<HfPiece> llama_hf_pieces(const ModelConfig& m, const std::string& n) {
  const int64_t C = m.d_model, D = m.head_dim(), Q = int64_t(m.n_head) * D,
                KV = int64_t(m.kv_heads()) * D, F = m.ffn();
  if (n == "wte.weight") return {{"model.embed_tokens.weight", 0, C, false}};
  if (n == "lm_head.weight") return {{"lm_head.weight", 0, C, false}};
  if (n == "ln_f.weight") return {{"model.norm.weight", 0, C, false}};
  const size_t dot = n.find('.', 2);
  LOOM_CHECK(n.compare(0, 2, "h.") == 0 && dot != std::string::npos,
             "no Hugging Face llama tensor for '", n, "'");
  const std::string L = "model.layers." + n.substr(2, dot - 2) + ".", rest = n.substr(dot + 1);
  if (rest == "ln_1.weight") return {{L + "input_layernorm.weight", 0, C, false}};
  if (rest == "ln_2.weight") return {{L + "post_attention_layernorm.weight", 0, C, false}};
  if (rest == "attn.c_attn.weight")
    return {{L + "self_attn.q_proj.weight", 0, Q, true},
            {L + "self_attn.k_proj.weight", Q, KV, true},
            {L + "self_attn.v_proj.weight", Q + KV, KV, true}};
  if (rest == "attn.c_proj.weight") return {{L + "self_attn.o_proj.weight", 0, C, true}};
  if (rest == "mlp.c_fc.weight")
    return {{L + "mlp.gate_proj.weight", 0, F, true}, {L + "mlp.up_proj.weight", F, F, true}};
  if (rest == "mlp.c_proj.weight") return {{L + "mlp.down_proj.weight", 0, C, true}};
  LOOM_CHECK(false, "no Hugging Face llama tensor for '", n, "'");
  return {};
}

std::vector<int64_t> hf_piece_shape(int64_t rows, int ndim, const HfPiece& piece) {
  if (piece.transposed) return {piece.cols, rows};
  return ndim == 1 ? std::vector<int64_t>{piece.cols} : std::vector<int64_t>{rows, piece.cols};
}

void load_llama_safetensors(const std::string& path, const ParamLayout& layout, float* params) {
  const ModelConfig& m = layout.model();
  const SafetensorsSet set(path);
  check_llama_config_json(set.dir() + "config.json", m);

  // Check every tensor this rank needs before writing anything.
  std::vector<std::vector<HfPiece>> pieces;
  for (const ParamSpec& p : layout.params()) {
    pieces.push_back(llama_hf_pieces(m, p.name));
    int64_t covered = 0;
    for (const HfPiece& piece : pieces.back()) {
      LOOM_CHECK(piece.col0 == covered, p.name, ": piece ", piece.name, " starts at column ",
                 piece.col0, ", expected ", covered);
      covered += piece.cols;
      const StTensorInfo* t = set.find(piece.name);
      if (!t)
        throw UserError(
            str("init file '", set.source(), "': missing tensor '", piece.name, "' (loom's '",
                p.name, "'",
                p.name == "lm_head.weight"
                    ? "; the model has model.tie_embeddings: false, set it to true to use "
                      "model.embed_tokens.weight as lm_head"
                    : "",
                ")"));
      const std::vector<int64_t> want = hf_piece_shape(p.rows, p.ndim, piece);
      if (t->shape != want)
        throw UserError(str("init file '", set.file_of(piece.name), "': tensor '", piece.name,
                            "' has shape ", dims_str(t->shape), ", the model needs ",
                            dims_str(want), " (loom's '", p.name,
                            "'; check model.* against the file)"));
      if (!t->is_float())
        throw UserError(str("init file '", set.file_of(piece.name), "': tensor '", piece.name,
                            "' has dtype ", t->dtype_name,
                            "; weights must be F32, F16, BF16 or F64"));
    }
    LOOM_CHECK(covered == p.cols, p.name, ": pieces cover ", covered, " of ", p.cols, " columns");
  }

  size_t k = 0;
  for (const ParamSpec& p : layout.params()) {
    float* dst = params + p.offset;
    std::memset(dst, 0, p.numel() * sizeof(float));
    for (const ShardBlock& b : layout.blocks(p))
      for (const HfPiece& piece : pieces[k]) {
        const int64_t c0 = std::max(b.gcol, piece.col0);
        const int64_t c1 = std::min(b.gcol + b.cols, piece.col0 + piece.cols);
        if (c0 >= c1) continue;
        float* out = dst + b.lrow * p.lcols + b.lcol + (c0 - b.gcol);
        if (piece.transposed)  // canonical (rows, c) = HF (c, rows)
          read_transposed(set, piece.name, c0 - piece.col0, c1 - c0, b.grow, b.rows, out, p.lcols);
        else
          set.read_block_f32(piece.name, b.grow, c0 - piece.col0, b.rows, c1 - c0, out, p.lcols);
      }
    ++k;
  }
}

std::map<std::string, CanonicalTensor> llama_to_hf(
    const std::map<std::string, CanonicalTensor>& canonical, const ModelConfig& m) {
  std::map<std::string, CanonicalTensor> out;
  for (const auto& [name, t] : canonical)
    for (const HfPiece& piece : llama_hf_pieces(m, name)) {
      LOOM_CHECK(piece.col0 + piece.cols <= t.cols, name, " has ", t.cols, " columns, piece ",
                 piece.name, " needs ", piece.col0 + piece.cols);
      CanonicalTensor h;
      const std::vector<int64_t> shape = hf_piece_shape(t.rows, t.ndim, piece);
      h.ndim = int(shape.size());
      h.rows = h.ndim == 1 ? 1 : shape[0];
      h.cols = shape.back();
      h.data.resize(size_t(h.rows * h.cols));
      for (int64_t i = 0; i < t.rows; ++i)
        for (int64_t j = 0; j < piece.cols; ++j) {
          const float v = t.data[size_t(i * t.cols + piece.col0 + j)];
          h.data[size_t(piece.transposed ? j * t.rows + i : i * piece.cols + j)] = v;
        }
      LOOM_CHECK(out.emplace(piece.name, std::move(h)).second, "HF tensor ", piece.name, " twice");
    }
  return out;
}

}  // namespace loom
