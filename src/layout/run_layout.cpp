// RunLayout: the one place where Config and a grid coordinate become counts, shapes and enums.
#include "layout/run_layout.h"

#include <cmath>

#include "core/check.h"

namespace loom {

BlockDims block_dims(const ModelConfig& m, int micro_batch, int tp, bool sp, int cp, int ep) {
  BlockDims d{micro_batch, m.seq_len / cp, m.d_model, m.n_head / tp, tp};
  d.sp = sp && tp > 1;
  d.cp = cp;
  if (m.is_moe()) {
    d.E = m.moe.num_experts;
    d.k = m.moe.top_k;
    const double f = m.moe.capacity_factor;  // per sequence: ceil(f * T * k / E), T the full one
    d.cap = f > 0 ? int(std::ceil(f * double(m.seq_len) * d.k / d.E)) : 0;
    d.aux_coef = m.moe.aux_loss_coef;
    d.z_coef = m.moe.z_loss_coef;
    d.ep = ep;
  }
  d.NKV = m.kv_heads() / tp;
  d.F = m.ffn();
  d.gated = m.llama();
  d.eps = float(m.norm_eps);
  d.theta = float(m.rope_theta);
  return d;
}

namespace {
// cfg, once the batch is known to split into micro-batches and coord to lie in the grid (checked
// before any member is built from them).
const Config& checked(const Config& cfg, GridDims grid, Coord coord) {
  const int mb = cfg.parallel.micro_batch_size, global = cfg.train.global_batch_size;
  LOOM_CHECK(grid.dp >= 1 && grid.pp >= 1 && grid.tp >= 1 && grid.cp >= 1 && mb >= 1 &&
                 global >= grid.dp * mb && global % (grid.dp * mb) == 0,
             "train.global_batch_size ", global, " does not split into micro-batches of ", mb,
             " over dp=", grid.dp);
  LOOM_CHECK(coord.dp >= 0 && coord.dp < grid.dp && coord.pp >= 0 && coord.pp < grid.pp &&
                 coord.tp >= 0 && coord.tp < grid.tp && coord.cp >= 0 && coord.cp < grid.cp,
             "coordinate dp", coord.dp, " pp", coord.pp, " tp", coord.tp, " cp", coord.cp,
             " outside the grid dp", grid.dp, " pp", grid.pp, " tp", grid.tp, " cp", grid.cp);
  LOOM_CHECK(cfg.parallel.ep >= 1 && grid.dp % cfg.parallel.ep == 0, "parallel.ep ",
             cfg.parallel.ep, " does not divide dp=", grid.dp);
  LOOM_CHECK(cfg.model.seq_len % (2 * grid.cp) == 0 || grid.cp == 1, "model.seq_len ",
             cfg.model.seq_len, " does not split into 2 x cp=", grid.cp, " chunks");
  return cfg;
}
int sum(const std::vector<int>& v) {
  int s = 0;
  for (int x : v) s += x;
  return s;
}
}  // namespace

RunLayout::RunLayout(const Config& cfg, GridDims grid, Coord coord)
    : model_(checked(cfg, grid, coord).model),
      grid_(grid),
      coord_(coord),
      micro_batch_(cfg.parallel.micro_batch_size),
      global_batch_(cfg.train.global_batch_size),
      microbatches_(global_batch_ / (grid.dp * micro_batch_)),
      schedule_(parse_schedule(cfg.parallel.schedule)),
      virtual_stages_(cfg.parallel.virtual_stages),
      chunk_slots_(loom::chunk_slots(schedule_, grid.pp, coord.pp, microbatches_, virtual_stages_)),
      slots_(sum(chunk_slots_)),
      dtype_(parse_train_dtype(cfg.train.dtype)),
      recompute_(parse_recompute(cfg.train.recompute)),
      zero_(cfg.optimizer.zero_stage),
      overlap_(cfg.parallel.overlap),
      params_(cfg.model, grid.tp, coord.tp, grid.pp, coord.pp, virtual_stages_,
              cfg.parallel.stage_layers, cfg.parallel.ep, coord.dp % cfg.parallel.ep),
      dims_(block_dims(cfg.model, micro_batch_, grid.tp, cfg.parallel.sequence_parallel, grid.cp,
                       cfg.parallel.ep)) {
  LOOM_CHECK(!dims_.sp || dims_.N() % grid.tp == 0, "sequence parallelism: ", dims_.N(),
             " token rows per micro-batch do not split over tp=", grid.tp);
}

RunLayout::RunLayout(const Config& cfg, const Grid& grid, int rank)
    : RunLayout(cfg,
                GridDims{grid.size(Axis::DP), grid.size(Axis::PP), grid.size(Axis::TP),
                         grid.size(Axis::CP)},
                grid.coord_of(rank)) {}

RunLayout RunLayout::single_sequence(const ModelConfig& m) {
  Config cfg;  // defaults: one rank, fp32, no recompute, ZeRO 0
  cfg.model = m;
  cfg.parallel.micro_batch_size = 1;
  cfg.train.global_batch_size = 1;
  return RunLayout(cfg, GridDims{}, Coord{});
}

StageShapeSpec RunLayout::stage_spec() const {
  return stage_shape_spec(stage_params(params_), dims_, chunk_slots_, recompute_);
}

MemorySpec RunLayout::memory_spec() const {
  MemorySpec m;
  m.params = stage_params(params_);
  m.stage = stage_shape_spec(m.params, dims_, chunk_slots_, recompute_);
  m.dp = replicas();  // ZeRO shards over the dp x cp replicas
  m.dp_rank = coord_.dp * grid_.cp + coord_.cp;
  m.zero = zero_;
  m.ep = params_.ep();
  m.overlap = overlap_;
  m.microbatches = microbatches_;
  return m;
}

}  // namespace loom
