// Text and JSON rendering of a Plan.
#include "plan/report.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "core/check.h"
#include "model/flops.h"

namespace loom::plan {

namespace {

double in_gib(double b) { return b / 1073741824.0; }

std::string layout_text(const PlanEntry& e) {
  std::string out = str("dp ", e.c.dp, " pp ", e.c.pp, " tp ", e.c.tp);
  if (e.c.cp > 1) out += str(" cp ", e.c.cp);
  if (e.grid_only) return out;
  if (e.c.ep > 1) out += str(" ep ", e.c.ep);
  if (e.c.v > 1) out += str(" v ", e.c.v);
  return out + str(" mb ", e.c.micro_batch, " zero ", e.c.zero, " recompute ",
                   recompute_name(e.c.recompute), e.c.sp ? " sp" : "");
}

std::string model_line(const Plan& p) {
  const ModelConfig& m = p.pm.model;
  char kv[32] = "";
  if (m.kv_heads() != m.n_head) std::snprintf(kv, sizeof kv, " (%d kv)", m.kv_heads());
  char b[360];
  std::snprintf(b, sizeof b,
                "model: %s %dL %dH%s d_model %d ffn %d vocab %d, %.1fM parameters, seq %d; global "
                "batch %d (%lld tokens/step); schedule %s%s, rank order %s",
                m.arch.c_str(), m.n_layer, m.n_head, kv, m.d_model, m.ffn(), m.vocab_size,
                double(count_params(m)) / 1e6, m.seq_len, p.pm.global_batch,
                (long long)p.pm.global_batch * m.seq_len, schedule_name(p.pm.schedule),
                p.pm.schedule == ScheduleKind::OneFOneB
                    ? str(" (virtual stages up to ", p.pm.max_virtual_stages, ")").c_str()
                    : "",
                p.pm.order.c_str());
  return b;
}

std::string precision_line(const Plan& p) {
  const Precision& q = p.pm.prec;
  std::string s = "precision: " + q.name;
  if (q.act != 4)
    s += " mixed (fp32 master weights, gradients and AdamW moments, a 2-byte compute copy of the "
         "weights and 2-byte activations: 18 bytes per parameter before sharding)";
  else
    s += " (4 bytes for parameters, gradients, both AdamW moments and activations)";
  return s;
}

}  // namespace

std::string format_text(const Plan& p, const ReportOptions& o) {
  std::string out;
  auto line = [&](const std::string& s) { out += s + "\n"; };
  line("loom plan: " + o.config_path + " on " + p.cluster.source);
  line(model_line(p));
  line(precision_line(p) + (o.note.empty() ? "" : "; " + o.note));
  line("cluster " + describe(p.cluster));
  size_t grid_rejects = 0;
  for (const auto& e : p.rejected) grid_rejects += e.grid_only;
  line(str("searched ", p.grids, " (dp, pp, tp, cp) grids (", grid_rejects, " impossible) and ",
           p.evaluated, " layouts: ", p.valid.size(), " fit, ", p.rejected.size() - grid_rejects,
           " out of memory"));
  if (!p.valid.empty()) {
    line("");
    line(
        "  #   dp  pp  v  tp  cp   mb     m zero recompute(sp)  mem/GPU GiB   step s   tokens/s  "
        "  MFU  compute bubble   comm");
    // The best micro-batch of each (dp, pp, v, tp, cp, zero, recompute, sp): the rest differ
    // only in it.
    char b[256];
    std::set<std::tuple<int, int, int, int, int, int, int, bool, int>> shown;
    int n = 0;
    for (size_t i = 0; i < p.valid.size() && n < o.top; ++i) {
      const PlanEntry& e = p.valid[i];
      if (!shown
               .insert({e.c.dp, e.c.pp, e.c.v, e.c.tp, e.c.cp, e.c.zero, int(e.c.recompute), e.c.sp,
                        e.c.ep})
               .second)
        continue;
      ++n;
      const StepTime& t = e.time;
      const double comm = t.tp + t.pp + t.cp + t.ep + t.dp + t.embed + t.world;
      const std::string rc = std::string(recompute_name(e.c.recompute)) + (e.c.sp ? "+sp" : "") +
                             (e.c.ep > 1 ? str("+ep", e.c.ep) : "");
      std::snprintf(b, sizeof b,
                    "%3d %4d %3d %2d %3d %3d %4d %5d %4d %-13s %8.2f%s %9.4g %10.4g %5.1f%% "
                    "%6.1f%% %5.1f%% %5.1f%%",
                    int(i) + 1, e.c.dp, e.c.pp, e.c.v, e.c.tp, e.c.cp, e.c.micro_batch,
                    e.microbatches, e.c.zero, rc.c_str(), in_gib(double(e.memory.total())),
                    e.estimate ? "~" : " ", t.total, t.tokens_per_s, 100 * t.mfu,
                    100 * t.compute / t.total, 100 * t.bubble / t.total, 100 * comm / t.total);
      line(b);
    }
    line(str("  (best micro-batch of each dp/pp/v/tp/cp/zero/recompute/sp shown; all ",
             p.valid.size(), " with --json)"));
    const PlanEntry& best = p.valid.front();
    const MemoryEstimate& m = best.memory;
    std::snprintf(b, sizeof b,
                  "best layout, stage %d memory (GiB): params %.2f, grads %.2f (+ buckets %.2f), "
                  "optimizer %.2f, activations %.2f, pipeline buffers %.2f, ZeRO-3 gather %.2f, "
                  "reserved %.2f",
                  best.memory_stage, in_gib(double(m.params)), in_gib(double(m.grads)),
                  in_gib(double(m.grad_buckets)), in_gib(double(m.optimizer)),
                  in_gib(double(m.activations)), in_gib(double(m.pipeline)),
                  in_gib(double(m.param_gather)), in_gib(double(m.reserved)));
    line(b);
    const StepTime& t = best.time;
    std::snprintf(b, sizeof b,
                  "best layout, step %.4g s: compute %.4g, bubble %.4g, tp %.4g, pp %.4g, "
                  "cp %.4g, dp %.4g, embed %.4g, world %.4g (slowest stage %d)",
                  t.total, t.compute, t.bubble, t.tp, t.pp, t.cp, t.dp, t.embed, t.world,
                  t.slowest_stage);
    line(b);
    if (p.pm.model.is_moe())
      line(str("best layout: expert parallelism ep ", best.c.ep, ", all-to-all ", t.ep,
               " s per step (uniform routing assumed)"));
  }
  auto list = [&](bool grid, const char* title) {
    std::vector<const PlanEntry*> v;
    for (const auto& e : p.rejected)
      if (e.grid_only == grid) v.push_back(&e);
    if (v.empty()) return;
    line("");
    line(str(title, " (", v.size(), "):"));
    const size_t n = std::min(v.size(), size_t(o.rejected_shown));
    for (size_t i = 0; i < n; ++i) line("  " + layout_text(*v[i]) + ": " + v[i]->reason);
    if (v.size() > n) line(str("  ... ", v.size() - n, " more (--json)"));
  };
  list(true, "rejected grids");
  list(false, "rejected for memory, closest to fitting first");
  line("");
  line(
      "~ = estimate (the cuda backend in bf16, modelled from its definition); rows without it "
      "reproduce the cpu backend's buffers and Comm byte counts exactly.");
  line(str("assumptions: compute at peak x ", p.cluster.efficiency,
           "; MFU counts model FLOPs only (no recompute); TP all-reduces and pipeline sends are"
           " never overlapped; bubble (pp-1)/(v*m+pp-1) with v virtual stages; attention FLOPs"
           " count every query against all seq_len keys (masked blocks are computed); ",
           p.pm.device == "cuda" ? "DP reduction overlaps the backward except the last bucket, "
                                   "the parameter all-gather overlaps except one layer, the cp "
                                   "ring's k|v sends overlap each ring step's attention (its "
                                   "gradient sends do not)"
                                 : "nothing overlaps on the cpu backend",
           "; ring collectives, alpha-beta links; optimizer time not modelled."));
  return out;
}

std::string format_json(const Plan& p, const ReportOptions& o) {
  using nlohmann::ordered_json;
  auto entry = [](const PlanEntry& e) {
    ordered_json j;
    j["dp"] = e.c.dp, j["pp"] = e.c.pp, j["tp"] = e.c.tp, j["cp"] = e.c.cp;
    if (e.grid_only) {
      j["reason"] = e.reason;
      return j;
    }
    j["virtual_stages"] = e.c.v;
    j["micro_batch"] = e.c.micro_batch;
    j["microbatches"] = e.microbatches;
    j["zero"] = e.c.zero;
    j["recompute"] = recompute_name(e.c.recompute);
    j["sequence_parallel"] = e.c.sp;
    j["expert_parallel"] = e.c.ep;
    j["estimate"] = e.estimate;
    const MemoryEstimate& m = e.memory;
    j["memory"] = {{"stage", e.memory_stage},  {"params", m.params},
                   {"grads", m.grads},         {"grad_buckets", m.grad_buckets},
                   {"optimizer", m.optimizer}, {"activations", m.activations},
                   {"pipeline", m.pipeline},   {"param_gather", m.param_gather},
                   {"reserved", m.reserved},   {"total", m.total()}};
    if (!e.reason.empty()) {
      j["reason"] = e.reason;
      j["short_bytes"] = e.short_bytes;
      return j;
    }
    const StepTime& t = e.time;
    j["step_s"] = t.total;
    j["tokens_per_s"] = t.tokens_per_s;
    j["mfu"] = t.mfu;
    j["time_s"] = {{"compute", t.compute}, {"bubble", t.bubble},
                   {"tp", t.tp},           {"pp", t.pp},
                   {"cp", t.cp},           {"ep", t.ep},
                   {"dp", t.dp},           {"embed", t.embed},
                   {"world", t.world},     {"slowest_stage", t.slowest_stage}};
    j["comm_bytes_per_rank"] = {{"tp", e.comm.tp.bytes},      {"pp", e.comm.pp.bytes},
                                {"cp", e.comm.cp.bytes},      {"ep", e.comm.ep.bytes},
                                {"dp", e.comm.dp.bytes},      {"embed", e.comm.embed.bytes},
                                {"world", e.comm.world.bytes}};
    return j;
  };
  ordered_json j;
  j["config"] = o.config_path;
  j["cluster"] = {{"source", p.cluster.source},
                  {"name", p.cluster.name},
                  {"device", p.cluster.device},
                  {"devices", p.cluster.world()},
                  {"gpu_memory_gib", p.cluster.gpu_memory_gib},
                  {"peak_flops", p.cluster.peak_flops},
                  {"efficiency", p.cluster.efficiency}};
  const ModelConfig& m = p.pm.model;
  j["model"] = {{"arch", m.arch},
                {"n_layer", m.n_layer},
                {"n_head", m.n_head},
                {"n_kv_head", m.kv_heads()},
                {"ffn_hidden", m.ffn()},
                {"d_model", m.d_model},
                {"vocab_size", m.vocab_size},
                {"seq_len", m.seq_len},
                {"parameters", count_params(m)},
                {"flops_per_token", flops_per_token(m)}};
  j["global_batch"] = p.pm.global_batch;
  j["search"] = {{"max_virtual_stages", p.pm.max_virtual_stages},
                 {"min_cp_chunk", p.pm.min_cp_chunk}};
  j["precision"] = p.pm.prec.name;
  j["note"] = o.note;
  j["grids"] = p.grids;
  j["evaluated"] = p.evaluated;
  j["valid"] = ordered_json::array();
  for (const auto& e : p.valid) j["valid"].push_back(entry(e));
  j["rejected"] = ordered_json::array();
  for (const auto& e : p.rejected) j["rejected"].push_back(entry(e));
  const std::string msg = no_fit_message(p);
  if (!msg.empty()) j["error"] = msg;
  return j.dump(1) + "\n";
}

}  // namespace loom::plan
