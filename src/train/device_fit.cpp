// Device-memory model of a cuda rank and the fit check that names the changes that would fit.
#include "train/device_fit.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "core/check.h"
#include "layout/param_layout.h"
#include "layout/stage_memory.h"
#include "layout/zero_shard.h"
#include "pipeline/executor.h"

namespace loom {

namespace {

// Everything the estimate depends on, so that the suggested fixes can vary one thing at a time.
struct Setup {
  ModelConfig model;
  int dp = 1, pp = 1, tp = 1;
  Coord coord;
  int micro_batch = 1, global_batch = 1;
  std::string schedule = "1f1b";
  std::vector<int> stage_layers;
  int zero = 0;
  Recompute recompute = Recompute::None;
  std::string dtype = "fp32";
  bool overlap = false;  // parallel.overlap: a second received output gradient
};

Setup setup_of(const Config& cfg, const Grid& grid, int rank) {
  Setup s;
  s.model = cfg.model;
  s.dp = grid.size(Axis::DP), s.pp = grid.size(Axis::PP), s.tp = grid.size(Axis::TP);
  s.coord = grid.coord_of(rank);
  s.micro_batch = cfg.parallel.micro_batch_size;
  s.global_batch = cfg.train.global_batch_size;
  s.schedule = cfg.parallel.schedule;
  s.stage_layers = cfg.parallel.stage_layers;
  s.zero = cfg.optimizer.zero_stage;
  s.recompute = parse_recompute(cfg.train.recompute);
  s.dtype = cfg.train.dtype;
  s.overlap = cfg.parallel.overlap;
  return s;
}

DeviceEstimate estimate(const Setup& s, const DeviceReserve& reserve) {
  LOOM_CHECK(s.dp >= 1 && s.pp >= 1 && s.tp >= 1 && s.micro_batch >= 1, "bad setup");
  const ModelConfig& m = s.model;
  const ParamLayout layout(m, s.tp, s.coord.tp, s.pp, s.coord.pp, s.stage_layers);
  DeviceEstimate r;
  r.dtype = s.dtype;
  const DType act_dtype = parse_train_dtype(s.dtype);
  r.act_bytes = int(dtype_size(act_dtype));
  r.stage = s.coord.pp;
  r.dp_rank = s.coord.dp;
  r.microbatches = std::max(1, s.global_batch / (s.dp * s.micro_batch));
  r.slots = PipelineExecutor::slots_needed(s.schedule, s.pp, s.coord.pp, r.microbatches);

  // Parameters: the flat buffer of P elements, padded to dp shards (ZeroOptimizer).
  const uint64_t P = layout.total();
  r.stage_params = P;
  std::map<int, uint64_t> per_layer;
  uint64_t other = 0;
  for (const ParamSpec& p : layout.params()) {
    if (p.layer >= 0)
      per_layer[p.layer] += p.numel();
    else
      other += p.numel();
  }
  uint64_t widest = 0;
  for (const auto& kv : per_layer) widest = std::max(widest, kv.second);
  const uint64_t shard = zero_shard_size(P, s.dp);
  const uint64_t e = uint64_t(r.act_bytes);
  const bool lowp = r.act_bytes != 4;
  const uint64_t held = s.zero < 3 ? uint64_t(s.dp) * shard : shard;  // parameters held
  r.master_params = held * 4;
  if (lowp) r.compute_weights = held * e;
  if (s.zero >= 3) r.param_gather = (widest + other) * e;
  r.grads = (s.zero < 2 ? P : shard) * 4;
  if (s.zero >= 2) r.grad_buckets = (widest + other) * 4;
  uint64_t state = P;
  if (s.zero > 0) {
    const ShardRange range = zero_shard(P, s.dp, s.coord.dp);
    state = range.hi - range.lo;
  }
  r.optimizer = state * 8;

  // Activations and scratch: the stage's arenas as GPTStage allocates them on this device
  // (layout/stage_memory.h), the logits shown apart from the rest of the scratch.
  const uint64_t N = uint64_t(s.micro_batch) * uint64_t(m.seq_len);
  const bool first = layout.first_stage(), last = layout.last_stage();
  const uint64_t NC = N * uint64_t(m.d_model) * e;
  StageShapeSpec spec;
  spec.dims = BlockDims{s.micro_batch, m.seq_len, m.d_model, m.n_head / s.tp, s.tp};
  spec.layers = layout.layers().num_layers;
  spec.slots = r.slots;
  spec.recompute = s.recompute;
  spec.first = first;
  spec.last = last;
  spec.vocab_local = layout.vocab_local();
  const StageArenas arenas = plan_stage_arenas(spec, DeviceTraits{Device::CUDA, act_dtype});
  r.activations = arenas.acts_bytes;
  if (last) r.logits = N * uint64_t(layout.vocab_local()) * e;
  r.scratch = arenas.scratch_bytes - r.logits;
  if (!first) r.pipeline += uint64_t(r.slots) * NC;
  if (!last) r.pipeline += (s.overlap ? 2 : 1) * NC;  // received output gradient(s)
  r.workspace = reserve.workspace;
  r.runtime = reserve.runtime;
  return r;
}

// The largest estimate over the pipeline stages of a setup (dp rank 0 holds the largest shard).
DeviceEstimate worst_stage(Setup s, const DeviceReserve& reserve) {
  DeviceEstimate worst;
  for (int st = 0; st < s.pp; ++st) {
    s.coord = Coord{0, st, 0};
    DeviceEstimate e = estimate(s, reserve);
    if (st == 0 || e.total() > worst.total()) worst = e;
  }
  return worst;
}

std::string gib(uint64_t bytes) {
  char buf[32];
  const double g = double(bytes) / double(uint64_t(1) << 30);
  if (bytes > 0 && g < 0.1) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / double(1 << 20));
  } else {
    std::snprintf(buf, sizeof buf, "%.2f GiB", g);
  }
  return buf;
}

bool tp_ok(const ModelConfig& m, int tp) { return m.n_head % tp == 0 && m.d_model % tp == 0; }

// One line per change that would lower this rank's memory, each with its estimated total.
std::vector<std::string> fixes(const Setup& s, const DeviceReserve& reserve, uint64_t free_bytes) {
  std::vector<std::string> out;
  auto verdict = [&](const DeviceEstimate& e) {
    return gib(e.total()) + (e.total() <= free_bytes ? " (fits)" : " (does not fit)");
  };
  // A smaller micro-batch (a divisor of the per-rank batch, so global_batch_size stays valid).
  const int per_rank = s.global_batch / s.dp;
  if (s.micro_batch > 1) {
    Setup t = s;
    int best = 1;
    for (int mb = s.micro_batch - 1; mb >= 1; --mb) {
      if (per_rank % mb != 0) continue;
      t.micro_batch = mb;
      if (estimate(t, reserve).total() <= free_bytes) {
        best = mb;
        break;
      }
    }
    t.micro_batch = best;
    out.push_back(str("parallel.micro_batch_size: ", best, " -> ", verdict(estimate(t, reserve)),
                      "; more micro-batches per step, same global batch"));
  }
  if (s.recompute != Recompute::Full) {
    Setup t = s;
    t.recompute = Recompute::Full;
    out.push_back(str("train.recompute: full -> ", verdict(estimate(t, reserve)),
                      "; re-runs each layer's forward in its backward"));
  }
  if (s.zero < 3 && s.dp > 1) {
    Setup t = s;
    for (t.zero = s.zero + 1; t.zero < 3; ++t.zero)
      if (estimate(t, reserve).total() <= free_bytes) break;
    out.push_back(str("optimizer.zero_stage: ", t.zero, " -> ", verdict(estimate(t, reserve)),
                      "; shards state over the ", s.dp, " data-parallel ranks"));
  } else if (s.zero < 3) {
    out.push_back(
        str("optimizer.zero_stage shards state over data-parallel ranks: with dp=1 it "
            "saves nothing; launch more ranks (dp > 1) with optimizer.zero_stage: ",
            s.zero < 1 ? 1 : s.zero + 1, " or higher"));
  }
  int tp2 = s.tp * 2;
  while (tp2 <= s.model.n_head && !tp_ok(s.model, tp2)) ++tp2;
  if (tp2 <= s.model.n_head) {
    Setup t = s;
    t.tp = tp2;
    out.push_back(str("parallel.tp: ", tp2, " -> ", verdict(worst_stage(t, reserve)), "; ",
                      t.dp * t.pp * tp2, " GPUs in all"));
  }
  if (s.pp * 2 <= s.model.n_layer) {
    Setup t = s;
    t.pp = s.pp * 2;
    t.stage_layers.clear();
    out.push_back(str("parallel.pp: ", t.pp, " -> ", verdict(worst_stage(t, reserve)),
                      " on the largest stage; ", t.dp * t.pp * t.tp, " GPUs in all"));
  }
  return out;
}

}  // namespace

uint64_t DeviceEstimate::total() const {
  uint64_t t = 0;
  for (const auto& p : parts()) t += p.second;
  return t;
}

std::vector<std::pair<std::string, uint64_t>> DeviceEstimate::parts() const {
  const std::string lowp = dtype == "fp32" ? "compute" : dtype;
  return {{"fp32 master weights", master_params},
          {lowp + " compute weights", compute_weights},
          {"ZeRO-3 gather", param_gather},
          {"fp32 gradients", grads},
          {"gradient buckets", grad_buckets},
          {"AdamW moments", optimizer},
          {"activations", activations},
          {"backward scratch", scratch},
          {"logits", logits},
          {"pipeline buffers", pipeline},
          {"cuBLASLt workspace", workspace},
          {"CUDA/NCCL reserve", runtime}};
}

DeviceEstimate estimate_device_memory(const Config& cfg, const Grid& grid, int rank,
                                      const DeviceReserve& reserve) {
  return estimate(setup_of(cfg, grid, rank), reserve);
}

DeviceEstimate check_device_fit(const Config& cfg, const Grid& grid, int rank, size_t free_bytes,
                                size_t total_bytes, const std::string& device_name,
                                const DeviceReserve& reserve) {
  const Setup s = setup_of(cfg, grid, rank);
  const DeviceEstimate e = estimate(s, reserve);
  const uint64_t need = e.total();
  if (need <= free_bytes) return e;

  std::string msg =
      str("device memory: rank ", rank, " (", grid.describe(rank), ") needs about ", gib(need),
          " but the GPU (", device_name, ") has ", gib(free_bytes), " free of ", gib(total_bytes),
          "; short by ", gib(need - free_bytes), ".\n");
  msg +=
      str("  estimate for GPT ", cfg.model.n_layer, " layers x d_model ", cfg.model.d_model, ", ",
          cfg.train.dtype, ", ", s.micro_batch, " x ", cfg.model.seq_len,
          " tokens per micro-batch, ", e.slots, " of ", e.microbatches,
          " micro-batches in flight on stage ", e.stage, ", train.recompute: ", cfg.train.recompute,
          ", optimizer.zero_stage: ", s.zero, " over dp=", s.dp, ":");
  std::string sep = " ";
  for (const auto& p : e.parts()) {
    if (p.second == 0) continue;
    msg += sep + p.first + " " + gib(p.second);
    sep = ", ";
  }
  msg += ".\n  fixes (each alone, estimated total):";
  for (const auto& f : fixes(s, reserve, free_bytes)) msg += "\n    " + f;
  throw UserError(msg);
}

}  // namespace loom
