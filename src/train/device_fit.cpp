// Device-memory model of a cuda rank and the fit check that names the changes that would fit.
#include "train/device_fit.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "core/check.h"

namespace loom {

namespace {

// A layout with one thing changed: the suggested fixes vary the config or the grid and resolve
// the layout again, so that each estimate comes from the same model.
struct Setup {
  Config cfg;
  GridDims grid;
  Coord coord;
};

DeviceEstimate estimate(const Setup& s, const DeviceReserve& reserve) {
  return estimate_device_memory(RunLayout(s.cfg, s.grid, s.coord), reserve);
}

// The largest estimate over the pipeline stages of a setup (dp rank 0 holds the largest shard).
DeviceEstimate worst_stage(Setup s, const DeviceReserve& reserve) {
  DeviceEstimate worst;
  for (int st = 0; st < s.grid.pp; ++st) {
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
  const int dp = s.grid.dp, micro_batch = s.cfg.parallel.micro_batch_size;
  const int zero = s.cfg.optimizer.zero_stage;
  const ModelConfig& model = s.cfg.model;
  const int per_rank = s.cfg.train.global_batch_size / dp;
  if (micro_batch > 1) {
    Setup t = s;
    int best = 1;
    for (int mb = micro_batch - 1; mb >= 1; --mb) {
      if (per_rank % mb != 0) continue;
      t.cfg.parallel.micro_batch_size = mb;
      if (estimate(t, reserve).total() <= free_bytes) {
        best = mb;
        break;
      }
    }
    t.cfg.parallel.micro_batch_size = best;
    out.push_back(str("parallel.micro_batch_size: ", best, " -> ", verdict(estimate(t, reserve)),
                      "; more micro-batches per step, same global batch"));
  }
  if (parse_recompute(s.cfg.train.recompute) != Recompute::Full) {
    Setup t = s;
    t.cfg.train.recompute = recompute_name(Recompute::Full);
    out.push_back(str("train.recompute: full -> ", verdict(estimate(t, reserve)),
                      "; re-runs each layer's forward in its backward"));
  }
  // ZeRO-3 keeps no compute copy of the weights and runs in fp32 only (config validation).
  const int max_zero = s.cfg.train.dtype == "fp32" ? 3 : 2;
  if (zero < max_zero && dp > 1) {
    Setup t = s;
    int& z = t.cfg.optimizer.zero_stage;
    for (z = zero + 1; z < max_zero; ++z)
      if (estimate(t, reserve).total() <= free_bytes) break;
    out.push_back(str("optimizer.zero_stage: ", z, " -> ", verdict(estimate(t, reserve)),
                      "; shards state over the ", dp, " data-parallel ranks"));
  } else if (zero < max_zero) {
    out.push_back(
        str("optimizer.zero_stage shards state over data-parallel ranks: with dp=1 it "
            "saves nothing; launch more ranks (dp > 1) with optimizer.zero_stage: ",
            zero < 1 ? 1 : zero + 1, " or higher"));
  }
  int tp2 = s.grid.tp * 2;
  while (tp2 <= model.n_head && !tp_ok(model, tp2)) ++tp2;
  if (tp2 <= model.n_head) {
    Setup t = s;
    t.grid.tp = t.cfg.parallel.tp = tp2;
    out.push_back(str("parallel.tp: ", tp2, " -> ", verdict(worst_stage(t, reserve)), "; ",
                      t.grid.world(), " GPUs in all"));
  }
  if (s.grid.pp * 2 <= model.n_layer) {
    Setup t = s;
    t.grid.pp = t.cfg.parallel.pp = s.grid.pp * 2;
    t.cfg.parallel.stage_layers.clear();
    out.push_back(str("parallel.pp: ", t.grid.pp, " -> ", verdict(worst_stage(t, reserve)),
                      " on the largest stage; ", t.grid.world(), " GPUs in all"));
  }
  return out;
}

}  // namespace

uint64_t DeviceEstimate::total() const { return RankMemory::total() + workspace + runtime; }

std::vector<std::pair<std::string, uint64_t>> DeviceEstimate::parts() const {
  std::vector<std::pair<std::string, uint64_t>> p = RankMemory::parts(dtype);
  p.emplace_back("cuBLASLt workspace", workspace);
  p.emplace_back("CUDA/NCCL reserve", runtime);
  return p;
}

DeviceEstimate estimate_device_memory(const RunLayout& run, const DeviceReserve& reserve) {
  DeviceEstimate r;
  static_cast<RankMemory&>(r) = run.memory(DeviceTraits{Device::CUDA, run.dtype()});
  r.workspace = reserve.workspace;
  r.runtime = reserve.runtime;
  r.dtype = dtype_name(run.dtype());
  r.act_bytes = int(dtype_size(run.dtype()));
  r.stage = run.coord().pp;
  r.dp_rank = run.coord().dp * run.cp() + run.coord().cp;  // index among the ZeRO replicas
  r.slots = run.slots();
  r.microbatches = run.microbatches();
  r.stage_params = run.params().total();
  return r;
}

DeviceEstimate check_device_fit(const Config& cfg, const RunLayout& run, int rank,
                                size_t free_bytes, size_t total_bytes,
                                const std::string& device_name, const DeviceReserve& reserve) {
  const DeviceEstimate e = estimate_device_memory(run, reserve);
  const uint64_t need = e.total();
  if (need <= free_bytes) return e;

  const Coord c = run.coord();
  std::string msg = str("device memory: rank ", rank, " (dp", c.dp, " pp", c.pp, " tp", c.tp,
                        run.cp() > 1 ? str(" cp", c.cp) : "", ") needs about ", gib(need),
                        " but the GPU (", device_name, ") has ", gib(free_bytes), " free of ",
                        gib(total_bytes), "; short by ", gib(need - free_bytes), ".\n");
  msg +=
      str("  estimate for GPT ", cfg.model.n_layer, " layers x d_model ", cfg.model.d_model, ", ",
          e.dtype, ", ", run.micro_batch(), " x ", run.dims().T, " tokens per micro-batch, ",
          e.slots, " of ", e.microbatches, " micro-batches in flight on stage ", e.stage,
          ", train.recompute: ", recompute_name(run.recompute()),
          ", optimizer.zero_stage: ", run.zero_stage(), " over ",
          run.cp() > 1 ? str("dp x cp = ", run.replicas()) : str("dp=", run.dp()), ":");
  std::string sep = " ";
  for (const auto& p : e.parts()) {
    if (p.second == 0) continue;
    msg += sep + p.first + " " + gib(p.second);
    sep = ", ";
  }
  msg += ".\n  fixes (each alone, estimated total):";
  for (const auto& f : fixes(Setup{cfg, run.grid(), c}, reserve, free_bytes))
    msg += "\n    " + f;
  throw UserError(msg);
}

}  // namespace loom
