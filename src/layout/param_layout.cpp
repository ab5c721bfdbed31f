// Builds the parameter layout of one (stage, TP rank) and the shard rectangles of each tensor.
#include "layout/param_layout.h"

#include <algorithm>

#include "core/check.h"

namespace loom {

std::vector<int> split_layers(int n_layer, int pp, const std::vector<int>& stage_layers) {
  if (!stage_layers.empty()) {
    LOOM_CHECK(int(stage_layers.size()) == pp, "stage_layers has ", stage_layers.size(),
               " entries for pp=", pp);
    return stage_layers;
  }
  LOOM_CHECK(n_layer >= pp, "n_layer=", n_layer, " < pp=", pp);
  std::vector<int> out(size_t(pp), n_layer / pp);
  for (int s = 0; s < n_layer % pp; ++s) out[size_t(s)]++;
  return out;
}

std::vector<StageRange> stage_chunks(int n_layer, int pp, int stage, int v,
                                     const std::vector<int>& stage_layers) {
  LOOM_CHECK(pp >= 1 && stage >= 0 && stage < pp && v >= 1, "stage ", stage, " of pp=", pp,
             " with v=", v);
  if (v == 1) {
    std::vector<int> split = split_layers(n_layer, pp, stage_layers);
    int first = 0;
    for (int s = 0; s < stage; ++s) first += split[size_t(s)];
    return {{first, split[size_t(stage)]}};
  }
  LOOM_CHECK(stage_layers.empty() && n_layer % (pp * v) == 0, "n_layer=", n_layer,
             " does not split into pp x v = ", pp * v, " equal chunks");
  const int per = n_layer / (pp * v);
  std::vector<StageRange> out;
  for (int c = 0; c < v; ++c) out.push_back({(c * pp + stage) * per, per});
  return out;
}

ParamLayout::ParamLayout(const ModelConfig& m, int tp, int tp_rank, int pp, int stage,
                         const std::vector<int>& stage_layers)
    : ParamLayout(m, tp, tp_rank, pp, stage, 1, stage_layers) {}

ParamLayout::ParamLayout(const ModelConfig& m, int tp, int tp_rank, int pp, int stage, int v,
                         const std::vector<int>& stage_layers, int ep, int ep_rank)
    : m_(m),
      tp_(tp),
      tp_rank_(tp_rank),
      pp_(pp),
      stage_(stage),
      vpad_(m.padded_vocab(tp)),
      ep_(ep),
      ep_rank_(ep_rank),
      chunks_(stage_chunks(m.n_layer, pp, stage, v, stage_layers)) {
  LOOM_CHECK(ep >= 1 && ep_rank >= 0 && ep_rank < ep && (ep == 1 || m.is_moe()) &&
                 (ep == 1 || m.moe.num_experts % ep == 0),
             "expert-parallel rank ", ep_rank, " of ep=", ep, " for ", m.moe.num_experts,
             " experts");
  const int64_t C = m.d_model, V = m.vocab_size, F = m.ffn();
  const int64_t qkv = int64_t(m.n_head + 2 * m.kv_heads()) * m.head_dim();
  const bool llama = m.llama();  // no biases, no position table, gated MLP
  if (first_stage()) {
    add("wte.weight", V, C, 2, Shard::VocabRows, -1);
    if (!llama) add("wpe.weight", m.positions(), C, 2, Shard::Replicated, -1);
  }
  for (int l : layer_list()) {
    std::string h = "h." + std::to_string(l) + ".";
    auto bias = [&](const std::string& name, int64_t cols, Shard shard) {
      if (!llama) add(h + name, 1, cols, 1, shard, l);
    };
    add(h + "ln_1.weight", 1, C, 1, Shard::Replicated, l);
    bias("ln_1.bias", C, Shard::Replicated);
    add(h + "attn.c_attn.weight", C, qkv, 2, Shard::QKVCols, l);
    bias("attn.c_attn.bias", qkv, Shard::QKVCols);
    add(h + "attn.c_proj.weight", C, C, 2, Shard::Rows, l);
    bias("attn.c_proj.bias", C, Shard::Replicated);
    add(h + "ln_2.weight", 1, C, 1, Shard::Replicated, l);
    bias("ln_2.bias", C, Shard::Replicated);
    const Shard up = llama ? Shard::GateUpCols : Shard::Cols;
    if (m.is_moe()) {  // docs/moe.md: the router and E experts stacked by rows
      const int64_t E = m.moe.num_experts;
      add(h + "mlp.router.weight", C, E, 2, Shard::Replicated, l);
      add(h + "mlp.experts.c_fc.weight", E * C, llama ? 2 * F : F, 2, up, l);
      if (!llama) add(h + "mlp.experts.c_fc.bias", E, F, 2, Shard::Cols, l);
      add(h + "mlp.experts.c_proj.weight", E * F, C, 2, Shard::ExpertRows, l);
      if (!llama) add(h + "mlp.experts.c_proj.bias", E, C, 2, Shard::Replicated, l);
      continue;
    }
    add(h + "mlp.c_fc.weight", C, llama ? 2 * F : F, 2, up, l);
    bias("mlp.c_fc.bias", F, Shard::Cols);
    add(h + "mlp.c_proj.weight", F, C, 2, Shard::Rows, l);
    bias("mlp.c_proj.bias", C, Shard::Replicated);
  }
  if (last_stage()) {
    add("ln_f.weight", 1, C, 1, Shard::Replicated, -1);
    if (!llama) add("ln_f.bias", 1, C, 1, Shard::Replicated, -1);
    if (!m.tie_embeddings) {
      add("lm_head.weight", V, C, 2, Shard::VocabRows, -1);
    } else if (!first_stage()) {
      // The tied copy on the last stage; its gradient is summed with stage 0's, and the norm
      // counts it once (on stage 0).
      add("wte.weight", V, C, 2, Shard::VocabRows, -1);
      params_.back().norm_owner = false;
    }
  }
}

StageRange ParamLayout::layers() const {
  LOOM_CHECK(chunks_.size() == 1, "layers() of a stage with ", chunks_.size(), " chunks");
  return chunks_.front();
}

int ParamLayout::num_layers() const {
  int n = 0;
  for (const StageRange& r : chunks_) n += r.num_layers;
  return n;
}

std::vector<int> ParamLayout::layer_list() const {
  std::vector<int> out;
  for (const StageRange& r : chunks_)
    for (int l = r.first_layer; l < r.first_layer + r.num_layers; ++l) out.push_back(l);
  return out;
}

std::vector<std::pair<size_t, size_t>> ParamLayout::layer_ranges() const {
  std::vector<std::pair<size_t, size_t>> out(size_t(num_layers()), {total_, 0});
  for (const ParamSpec& p : params_)
    if (p.layer >= 0) {
      auto& r = out[size_t(local_layer(p.layer))];
      r.first = std::min(r.first, p.offset);
      r.second = std::max(r.second, p.offset + p.numel());
    }
  return out;
}

int ParamLayout::local_layer(int layer) const {
  int local = 0;
  for (const StageRange& r : chunks_) {
    if (layer >= r.first_layer && layer < r.first_layer + r.num_layers)
      return local + layer - r.first_layer;
    local += r.num_layers;
  }
  LOOM_CHECK(false, "layer ", layer, " is not on pipeline stage ", stage_);
  return -1;
}

void ParamLayout::add(const std::string& name, int64_t rows, int64_t cols, int ndim, Shard shard,
                      int layer) {
  // Weight decay on matrices only: the experts' (E, F) and (E, C) biases are 2-D but biases.
  const bool bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
  ParamSpec p{name, rows, cols, ndim, rows, cols, shard, ndim >= 2 && !bias, true, total_, layer};
  switch (shard) {
    case Shard::Replicated:
      p.norm_owner = tp_rank_ == 0;
      break;
    case Shard::Rows:
    case Shard::ExpertRows:
      p.lrows = rows / tp_;
      break;
    case Shard::Cols:
    case Shard::QKVCols:
    case Shard::GateUpCols:
      p.lcols = cols / tp_;
      break;
    case Shard::VocabRows:
      p.lrows = vpad_ / tp_;
      break;
  }
  // The experts' tensors stack E equal row blocks, one per expert: this rank keeps E/ep of them.
  p.expert = name.find(".mlp.experts.") != std::string::npos;
  if (p.expert) p.lrows /= ep_;
  const bool by_rows = shard == Shard::Rows || shard == Shard::ExpertRows;
  LOOM_CHECK(p.lrows * tp_ * (p.expert ? ep_ : 1) == rows || !by_rows, name, " rows ", rows,
             " % tp ", tp_);
  LOOM_CHECK(shard != Shard::ExpertRows || (rows / m_.moe.num_experts) % tp_ == 0, name,
             ": an expert's ", rows / m_.moe.num_experts, " rows % tp ", tp_);
  LOOM_CHECK(
      p.lcols * tp_ == cols || shard == Shard::Replicated || by_rows || shard == Shard::VocabRows,
      name, " cols ", cols, " % tp ", tp_);
  for (int64_t part : col_parts(p))
    LOOM_CHECK(part % tp_ == 0, name, ": a column part of ", part, " % tp ", tp_);
  total_ += p.numel();
  params_.push_back(p);
}

const ParamSpec* ParamLayout::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

const ParamSpec& ParamLayout::get(const std::string& name) const {
  const ParamSpec* p = find(name);
  LOOM_CHECK(p != nullptr, "no parameter '", name, "' on this rank");
  return *p;
}

std::vector<ShardBlock> ParamLayout::blocks(const ParamSpec& p) const {
  if (p.expert && p.shard != Shard::ExpertRows) {  // whole rows: this rank's experts' blocks
    std::vector<ShardBlock> out = tp_blocks(p);
    for (ShardBlock& b : out) {
      b.grow += int64_t(ep_rank_) * p.lrows;
      b.rows = p.lrows;
    }
    return out;
  }
  return tp_blocks(p);
}

std::vector<ShardBlock> ParamLayout::tp_blocks(const ParamSpec& p) const {
  switch (p.shard) {
    case Shard::Replicated:
      return {{0, 0, 0, 0, p.rows, p.cols}};
    case Shard::Rows:
      return {{tp_rank_ * p.lrows, 0, 0, 0, p.lrows, p.cols}};
    case Shard::Cols:
      return {{0, tp_rank_ * p.lcols, 0, 0, p.rows, p.lcols}};
    case Shard::QKVCols:
    case Shard::GateUpCols: {  // each part split evenly: rank r holds slice r of every part
      std::vector<ShardBlock> out;
      int64_t g0 = 0, l0 = 0;
      for (int64_t part : col_parts(p)) {
        const int64_t lpart = part / tp_;
        out.push_back({0, g0 + tp_rank_ * lpart, 0, l0, p.rows, lpart});
        g0 += part, l0 += lpart;
      }
      return out;
    }
    case Shard::ExpertRows: {  // rank r holds slice r of each of its experts' row blocks
      const int64_t E = m_.moe.num_experts, per = p.rows / E, lper = per / tp_;
      const int64_t El = E / ep_, e0 = int64_t(ep_rank_) * El;
      std::vector<ShardBlock> out;
      for (int64_t e = 0; e < El; ++e)
        out.push_back({(e0 + e) * per + tp_rank_ * lper, 0, e * lper, 0, lper, p.cols});
      return out;
    }
    case Shard::VocabRows: {
      int64_t g0 = int64_t(tp_rank_) * p.lrows;
      int64_t n = std::max<int64_t>(0, std::min<int64_t>(p.lrows, p.rows - g0));
      if (n == 0) return {};
      return {{g0, 0, 0, 0, n, p.cols}};
    }
  }
  return {};
}

std::vector<ParamLayout::FlatRun> ParamLayout::expert_runs(size_t begin, size_t end) const {
  std::vector<FlatRun> out;
  for (const ParamSpec& p : params_) {
    const size_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel());
    if (lo >= hi) continue;
    if (!out.empty() && out.back().expert == p.expert && out.back().hi == lo)
      out.back().hi = hi;
    else
      out.push_back({lo, hi, p.expert});
  }
  return out;
}

std::vector<int64_t> ParamLayout::col_parts(const ParamSpec& p) const {
  if (p.shard == Shard::GateUpCols) return {p.cols / 2, p.cols / 2};
  if (p.shard != Shard::QKVCols) return {p.cols};
  const int64_t D = m_.head_dim();  // q: n_head heads, k and v: kv_heads heads each
  return {m_.n_head * D, m_.kv_heads() * D, m_.kv_heads() * D};
}

}  // namespace loom
