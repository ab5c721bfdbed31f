// Enumeration, rejection and ranking of layouts.
#include "plan/planner.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "core/check.h"

namespace loom::plan {

namespace {

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

std::string gib(double bytes) {
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
  else if (pm.chunks(c.pp) > 1 && m.n_layer % (c.pp * pm.chunks(c.pp)) != 0)
    why.push_back(str("pp ", c.pp, " x virtual_stages ", pm.chunks(c.pp),
                      " does not divide n_layer ", m.n_layer));
  if (pm.global_batch % c.dp != 0)
    why.push_back(str("global batch ", pm.global_batch, " is not divisible by dp ", c.dp));
  std::string out;
  for (const auto& w : why) out += (out.empty() ? "" : "; ") + w;
  return out;
}

}  // namespace

std::vector<std::string> config_errors(const Config& cfg) {
  Config c = cfg;
  c.parallel.tp = c.parallel.pp = 1;
  c.parallel.dp = 0;
  c.parallel.micro_batch_size = 1;
  c.parallel.stage_layers.clear();
  c.parallel.virtual_stages = 1;  // applied per candidate (grid_problem, make_plan)
  std::vector<std::string> out;
  for (const std::string& e : validate(c, 0)) {
    for (const char* key : {"model.", "train.global_batch_size", "parallel.schedule",
                            "parallel.order"})
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
  pm.virtual_stages = cfg.parallel.virtual_stages;
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
  const double capacity = cl.memory_bytes();
  const uint64_t reserved = uint64_t(cl.reserved_bytes());
  const Recompute modes[] = {Recompute::None, Recompute::Selective, Recompute::Full};

  for (int tp : divisors(world)) {
    for (int pp : divisors(world / tp)) {
      Candidate g;
      g.tp = tp, g.pp = pp, g.dp = world / (tp * pp);
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
      const std::vector<StageShape> shapes = stage_shapes(pm.model, tp, pp, pm.chunks(pp));
      const Placement where = place(cl, g, pm.order);
      for (int mb : divisors(pm.global_batch / g.dp)) {
        const int m = pm.global_batch / (g.dp * mb);
        if (m % pp != 0 && pm.chunks(pp) > 1) continue;  // interleaving: groups of pp
        for (int zero = 0; zero <= (g.dp > 1 ? 3 : 0); ++zero) {
          for (int v = 0; v < 3 * 2; ++v) {
            // Sequence parallelism too where tp > 1 and the micro-batch's rows split over tp.
            const Recompute rc = modes[v / 2];
            const bool sp = v % 2 == 1;
            if (sp && (tp == 1 || int64_t(mb) * pm.model.seq_len % tp != 0)) continue;
            PlanEntry e;
            e.c = g;
            e.c.micro_batch = mb, e.c.zero = zero, e.c.recompute = rc, e.c.sp = sp;
            e.microbatches = m;
            ++plan.evaluated;
            bool exact_comm = true;
            for (const StageShape& sh : shapes) {
              MemoryEstimate mem = stage_memory(pm, e.c, sh, m, reserved);
              if (sh.stage == 0 || mem.total() > e.memory.total()) {
                e.memory = mem;
                e.memory_stage = sh.stage;
              }
              CommVolume v = step_comm_volume(pm, e.c, sh, m);
              exact_comm = exact_comm && v.exact;
              auto up = [](AxisTraffic& a, const AxisTraffic& b) {
                if (b.bytes > a.bytes) a = b;
              };
              up(e.comm.tp, v.tp), up(e.comm.pp, v.pp), up(e.comm.dp, v.dp);
              up(e.comm.embed, v.embed), up(e.comm.world, v.world);
            }
            e.comm.exact = exact_comm;
            e.estimate = !e.memory.exact || !exact_comm || !pm.exact_backend();
            const double need = double(e.memory.total());
            if (need > capacity) {
              e.short_bytes = need - capacity;
              e.reason = str("out of memory: stage ", e.memory_stage, " needs ", gib(need),
                             " of ", gib(capacity), " (short by ", gib(e.short_bytes), ")");
              plan.rejected.push_back(e);
              continue;
            }
            e.time = step_time(pm, e.c, shapes, m, cl, where);
            plan.valid.push_back(e);
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
               gib(best->short_bytes), " per device. The smallest need is ", gib(need),
               " (dp ", best->c.dp, " pp ", best->c.pp, " tp ", best->c.tp, " micro-batch ",
               best->c.micro_batch, " zero ", best->c.zero, " recompute ",
               recompute_name(best->c.recompute), ") against gpu_memory_gib ", cl.gpu_memory_gib,
               "; use more devices (nodes) or devices with at least ",
               gib(need), " of memory");
  }
  std::set<std::string> reasons;
  for (const PlanEntry& e : p.rejected) reasons.insert(e.reason);
  std::string all;
  for (const auto& r : reasons) all += (all.empty() ? "" : " | ") + r;
  return str("no (dp, pp, tp) layout of ", cl.world(), " devices can run this model and batch: ",
             all, "; change the device count (nodes x gpus_per_node) or the global batch");
}

}  // namespace loom::plan
