// Enumeration, rejection and ranking of layouts.
#include "plan/planner.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "core/check.h"
#include "layout/block_memory.h"
#include "layout/run_layout.h"

namespace loom::plan {

namespace {

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

std::string gib_text(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GiB", bytes / 1073741824.0);
  return b;
}

// validate()'s lines about parallel.tp for model m split tp ways.
std::vector<std::string> tp_errors(const ModelConfig& m, int tp) {
  Config cfg;
  cfg.model = m;
  cfg.parallel.tp = tp;
  std::vector<std::string> out;
  for (const std::string& e : validate(cfg, 0))
    if (e.rfind("parallel.tp:", 0) == 0) out.push_back(e);
  return out;
}

// Why a (dp, pp, tp) grid cannot run this model and batch; "" when it can.
std::string grid_problem(const PlanModel& pm, const Candidate& c) {
  const ModelConfig& m = pm.model;
  std::vector<std::string> why;
  if (m.n_head % c.tp != 0)
    why.push_back(str("tp ", c.tp, " does not divide n_head ", m.n_head));
  else if (m.d_model % c.tp != 0)
    why.push_back(str("tp ", c.tp, " does not divide d_model ", m.d_model));
  else  // the rest of validation's tp rules (kv heads, the MLP width), in its words
    for (const std::string& e : tp_errors(m, c.tp)) why.push_back(e);
  if (c.pp > m.n_layer) why.push_back(str("pp ", c.pp, " > n_layer ", m.n_layer));
  if (pm.global_batch % c.dp != 0)
    why.push_back(str("global batch ", pm.global_batch, " is not divisible by dp ", c.dp));
  std::string out;
  for (const auto& w : why) out += (out.empty() ? "" : "; ") + w;
  return out;
}

// Models one full candidate: memory of every stage (the largest kept), per-axis traffic, and
// the step time when it fits; appends it to plan.valid or plan.rejected.
// slots: each stage's slots per chunk (chunk_slots); arenas: each stage's (stage_arenas).
void plan_candidate(Plan& plan, const PlanModel& pm, const ClusterSpec& cl, const Candidate& c,
                    const std::vector<StageShape>& shapes,
                    const std::vector<std::vector<int>>& slots,
                    const std::vector<StageArenas>& arenas, int m, const Placement& where) {
  PlanEntry e;
  e.c = c;
  e.microbatches = m;
  ++plan.evaluated;
  bool exact_comm = true;
  const uint64_t reserved = uint64_t(cl.reserved_bytes());
  for (const StageShape& sh : shapes) {
    const size_t s = size_t(sh.stage);
    MemoryEstimate mem = stage_memory(pm, e.c, sh, slots[s], m, reserved, 0, arenas[s]);
    if (sh.stage == 0 || mem.total() > e.memory.total()) {
      e.memory = mem;
      e.memory_stage = sh.stage;
    }
    CommVolume v = step_comm_volume(pm, e.c, sh, m);
    exact_comm = exact_comm && v.exact;
    auto up = [](AxisTraffic& a, const AxisTraffic& b) {
      if (b.bytes > a.bytes) a = b;
    };
    up(e.comm.tp, v.tp), up(e.comm.pp, v.pp), up(e.comm.dp, v.dp), up(e.comm.cp, v.cp);
    up(e.comm.embed, v.embed), up(e.comm.world, v.world);
  }
  e.comm.exact = exact_comm;
  e.estimate = !e.memory.exact || !exact_comm || !pm.exact_backend();
  const double need = double(e.memory.total()), capacity = cl.memory_bytes();
  if (need > capacity) {
    e.short_bytes = need - capacity;
    e.reason = str("out of memory: stage ", e.memory_stage, " needs ", gib_text(need), " of ",
                   gib_text(capacity), " (short by ", gib_text(e.short_bytes), ")");
    plan.rejected.push_back(e);
    return;
  }
  e.time = step_time(pm, e.c, shapes, m, cl, where);
  plan.valid.push_back(e);
}

}  // namespace

bool cp_searched(const PlanModel& pm, int cp) {
  const int T = pm.model.seq_len;
  if (pm.model.is_moe()) return cp == 1;  // loom refuses context parallelism with experts
  return cp == 1 || (cp > 1 && T % (2 * cp) == 0 && T / (2 * cp) >= pm.min_cp_chunk);
}

std::vector<int> experts_searched(const PlanModel& pm, int dp) {
  std::vector<int> out{1};
  const int E = pm.model.moe.num_experts;
  if (!pm.model.is_moe()) return out;
  for (int ep = 2; ep <= std::min(dp, E); ++ep)
    if (dp % ep == 0 && E % ep == 0) out.push_back(ep);
  return out;
}

std::vector<int> virtual_stages_searched(const PlanModel& pm, int pp) {
  std::vector<int> out{1};
  if (pp <= 1 || pm.schedule != ScheduleKind::OneFOneB) return out;
  for (int v = 2; v <= pm.max_virtual_stages; ++v)
    if (pm.model.n_layer % (pp * v) == 0) out.push_back(v);
  return out;
}

std::vector<std::string> config_errors(const Config& cfg) {
  Config c = cfg;
  c.parallel.tp = c.parallel.pp = c.parallel.cp = 1;
  c.parallel.dp = 0;
  c.parallel.micro_batch_size = 1;
  c.parallel.stage_layers.clear();
  c.parallel.virtual_stages = 1;  // searched per candidate (make_plan)
  std::vector<std::string> out;
  for (const std::string& e : validate(c, 0)) {
    for (const char* key :
         {"model.", "train.global_batch_size", "parallel.schedule", "parallel.order"})
      if (e.rfind(key, 0) == 0) {
        out.push_back(e);
        break;
      }
  }
  return out;
}

PlanModel plan_model(const Config& cfg, const ClusterSpec& cl, std::string* note) {
  PlanModel pm;
  pm.model = cfg.model;
  pm.global_batch = cfg.train.global_batch_size;
  pm.schedule = parse_schedule(cfg.parallel.schedule);
  pm.order = cfg.parallel.order;
  pm.overlap = cfg.parallel.overlap;
  // The configured virtual stages widen the search when they exceed its default bound.
  pm.max_virtual_stages = std::max(pm.max_virtual_stages, cfg.parallel.virtual_stages);
  pm.device = cl.device;
  std::string dtype = cfg.train.dtype, why;
  if (cl.device == "cpu") {
    if (dtype != "fp32" || cfg.device != "cpu")
      why = str("the config asks for ", dtype, " on ", cfg.device,
                "; a cpu cluster runs loom's cpu backend in fp32");
    dtype = "fp32";
  } else if (cfg.device != "cuda") {
    why = str("the config is a ", cfg.device, " run in ", dtype,
              "; modelled as its cuda twin in bf16 mixed precision (set device: cuda and "
              "train.dtype to choose)");
    dtype = "bf16";
  }
  pm.prec = precision_of(dtype);
  if (note) *note = why;
  return pm;
}

Plan make_plan(const PlanModel& pm, const ClusterSpec& cl) {
  Plan plan;
  plan.pm = pm;
  plan.cluster = cl;
  const int world = cl.world();
  const Recompute modes[] = {Recompute::None, Recompute::Selective, Recompute::Full};

  for (int tp : divisors(world))
    for (int pp : divisors(world / tp))
      for (int cp : divisors(world / (tp * pp))) {
        if (!cp_searched(pm, cp)) continue;
        Candidate g;
        g.tp = tp, g.pp = pp, g.cp = cp, g.dp = world / (tp * pp * cp);
        ++plan.grids;
        const std::string problem = grid_problem(pm, g);
        if (!problem.empty()) {
          PlanEntry e;
          e.c = g;
          e.grid_only = true;
          e.reason = problem;
          plan.rejected.push_back(e);
          continue;
        }
        for (int ep : experts_searched(pm, g.dp))
          for (int v : virtual_stages_searched(pm, pp)) {
            g.ep = ep;
            const Placement where = place(cl, g, pm.order);
            const std::vector<StageShape> shapes = stage_shapes(pm.model, tp, pp, v, ep);
            for (int mb : divisors(pm.global_batch / g.dp)) {
              const int m = pm.global_batch / (g.dp * mb);
              if (v > 1 && m % pp != 0) continue;  // interleaving: micro-batches in groups of pp
              std::vector<std::vector<int>> slots;
              for (int s = 0; s < pp; ++s) slots.push_back(chunk_slots(pm.schedule, pp, s, m, v));
              for (int r = 0; r < 3 * 2; ++r) {
                // Sequence parallelism too where tp > 1 and the micro-batch's rows on this rank
                // split over tp.
                const bool sp = r % 2 == 1;
                if (sp && (tp == 1 || int64_t(mb) * (pm.model.seq_len / cp) % tp != 0)) continue;
                // Selective recompute only where attention keeps its probabilities (cpu without
                // cp); elsewhere it keeps the log-sum-exp and selective is the same run as none.
                if (modes[r / 2] == Recompute::Selective &&
                    !attention_keeps_probabilities(pm.traits(),
                                                   block_dims(pm.model, mb, tp, false, cp)))
                  continue;
                Candidate c = g;
                c.v = v, c.micro_batch = mb, c.recompute = modes[r / 2], c.sp = sp;
                std::vector<StageArenas> arenas;  // the same for every ZeRO stage
                for (const StageShape& sh : shapes)
                  arenas.push_back(stage_arenas(pm, c, sh, slots[size_t(sh.stage)]));
                // ZeRO 1-3 where there are replicas (with ep > 1 the experts shard over their
                // own dp / ep replicas).
                for (int zero = 0; zero <= (g.replicas() > 1 ? 3 : 0); ++zero) {
                  c.zero = zero;
                  plan_candidate(plan, pm, cl, c, shapes, slots, arenas, m, where);
                }
              }
            }
          }
      }
  auto faster = [](const PlanEntry& a, const PlanEntry& b) {
    // Equal model times (the micro-batch size often changes only memory): less memory first.
    if (a.time.total != b.time.total) return a.time.total < b.time.total;
    return a.memory.total() < b.memory.total();
  };
  std::stable_sort(plan.valid.begin(), plan.valid.end(), faster);
  std::stable_sort(plan.rejected.begin(), plan.rejected.end(),
                   [](const PlanEntry& a, const PlanEntry& b) {
                     if (a.grid_only != b.grid_only) return a.grid_only;
                     return a.short_bytes < b.short_bytes;
                   });
  return plan;
}

std::string no_fit_message(const Plan& p) {
  if (!p.valid.empty()) return "";
  const ClusterSpec& cl = p.cluster;
  const PlanEntry* best = nullptr;
  for (const PlanEntry& e : p.rejected)
    if (!e.grid_only && (!best || e.short_bytes < best->short_bytes)) best = &e;
  if (best) {
    const double need = double(best->memory.total());
    return str("no layout fits on ", cl.source, ": device memory is short by ",
               gib_text(best->short_bytes), " per device. The smallest need is ", gib_text(need),
               " (dp ", best->c.dp, " pp ", best->c.pp, " tp ", best->c.tp,
               best->c.cp > 1 ? str(" cp ", best->c.cp) : std::string(),
               best->c.v > 1 ? str(" v ", best->c.v) : std::string(), " micro-batch ",
               best->c.micro_batch, " zero ", best->c.zero, " recompute ",
               recompute_name(best->c.recompute), ") against gpu_memory_gib ", cl.gpu_memory_gib,
               "; use more devices (nodes) or devices with at least ", gib_text(need),
               " of memory");
  }
  std::set<std::string> reasons;
  for (const PlanEntry& e : p.rejected) reasons.insert(e.reason);
  std::string all;
  for (const auto& r : reasons) all += (all.empty() ? "" : " | ") + r;
  return str("no (dp, pp, tp, cp) layout of ", cl.world(),
             " devices can run this model and batch: ", all,
             "; change the device count (nodes x gpus_per_node) or the global batch");
}

}  // namespace loom::plan
