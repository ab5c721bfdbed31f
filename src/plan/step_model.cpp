// Step-time model: per-stage FLOPs, the pipelined critical path, and exposed collectives.
#include "plan/step_model.h"

#include <algorithm>

#include "layout/block_memory.h"
#include "layout/run_layout.h"
#include "model/flops.h"
#include "optim/zero.h"

namespace loom::plan {

namespace {
constexpr double kBackwardShare = 2.0 / 3.0;  // backward = 2x forward FLOPs
}  // namespace

double stage_flops_per_micro_batch(const PlanModel& pm, const Candidate& c, const StageShape& sh) {
  const double n = double(rank_tokens(pm, c));  // this rank's tokens per micro-batch
  const double C = pm.model.d_model, T = pm.model.seq_len, L = sh.num_layers;
  const double weights = double(sh.layer_elems);  // this rank's layer shard
  // Scores and weighted values per query head: NH * D (GQA's kv heads do not shrink them), each
  // query against all T = seq_len keys: the kernels compute the masked blocks too (with cp, the
  // ring's cp blocks of T/cp keys).
  const double attn = 12.0 * pm.model.n_head * pm.model.head_dim() * T * L / c.tp;
  double f = n * (6.0 * weights + attn);
  if (sh.last) f += 6.0 * n * C * sh.vocab_local;  // the vocab-parallel head
  if (c.recompute == Recompute::Full) f += n * (2.0 * weights + attn / 3.0);
  // Selective recompute rebuilds the attention probabilities where attention keeps them (cpu
  // without cp); elsewhere it keeps the log-sum-exp and recomputes nothing.
  const BlockDims d = block_dims(pm.model, c.micro_batch, c.tp, c.sp, c.cp);
  if (c.recompute == Recompute::Selective && attention_keeps_probabilities(pm.traits(), d))
    f += n * attn / 3.0;
  return f;
}

double ring_exposed_s(const PlanModel& pm, const Candidate& c, const StageShape& sh,
                      const AxisLink& link, double flops_per_s) {
  if (c.cp <= 1) return 0;
  const RingBlock b = ring_block(pm, c);
  const double hops = double(b.hops), kv = p2p_s(link, double(b.kv), 1);
  const double dkv = p2p_s(link, double(b.dkv), 1);
  const double recompute = c.recompute == Recompute::Full ? 2 : 1;  // forward rings per layer
  double fwd = (hops - 1) * kv, bwd = (hops - 1) * kv + hops * dkv;
  if (pm.device == "cuda") {
    // One ring step's attention: (N, NH*D) queries against a block of N keys, forward QK^T
    // and PV (4 N^2 NH D over B), backward 8.
    const double Tl = double(pm.model.seq_len / c.cp), B = c.micro_batch;
    const double step = B * Tl * Tl * pm.model.n_head / c.tp * pm.model.head_dim() / flops_per_s;
    fwd = (hops - 1) * std::max(0.0, kv - 4 * step);
    bwd = (hops - 1) * std::max(0.0, kv - 8 * step) + hops * dkv;
  }
  return double(sh.num_layers) * (recompute * fwd + bwd);
}

StepTime step_time(const PlanModel& pm, const Candidate& c, const std::vector<StageShape>& shapes,
                   int microbatches, const ClusterSpec& cl, const Placement& place) {
  const bool overlap = pm.device == "cuda";
  const double m = microbatches, rate = cl.peak_flops * cl.efficiency;
  const double grad = pm.prec.grad, param = pm.prec.param;
  const int replicas = c.replicas();
  struct Slowest {
    double t_mb = -1, comp = 0, tp = 0, pp = 0, cp = 0, ep = 0, dp = 0, flops = 0;
    int stage = 0;
  } slow;
  double tail = -1, tail_dp = 0, tail_embed = 0;

  for (const StageShape& sh : shapes) {
    const double flops = stage_flops_per_micro_batch(pm, c, sh);
    const double comp = flops / rate;
    const CommVolume v = step_comm_volume(pm, c, sh, microbatches);
    const uint64_t tp_bytes = v.tp.time_bytes ? v.tp.time_bytes : v.tp.bytes;
    const double tp = all_reduce_s(place.tp, double(tp_bytes) / m, int64_t(v.tp.calls / m));
    const double pp = p2p_s(place.pp, double(v.pp.bytes) / m, int64_t(v.pp.calls / m));
    const double cp = ring_exposed_s(pm, c, sh, place.cp, rate);
    // Never overlapped: the experts wait for their rows, the combine for the experts.
    const double ep = all_to_all_s(place.ep, double(v.ep.bytes) / m, int64_t(v.ep.calls / m));

    // DP work inside each micro-batch (ZeRO 2 reduces, ZeRO 3 gathers) and after the pipeline.
    const double total = double(sh.total),
                 layer_frac =
                     std::min(1.0, double(sh.widest_layer + sh.other) / std::max(1.0, total));
    const double padded = double(zero_shard_size(sh.total, replicas)) * replicas;
    double dp_mb = 0, dp_tail = 0;
    if (replicas > 1) {
      if (c.zero <= 1) {
        const double ar =
            all_reduce_s(place.dp, total * grad, int64_t(total / double(kZeroBucketElems)) + 1);
        const double last =
            all_reduce_s(place.dp, std::min(total, double(kZeroBucketElems)) * grad, 1);
        dp_tail = overlap ? std::max(last, ar - kBackwardShare * comp) : ar;
      }
      if (c.zero >= 2) {  // per micro-batch: gradients reduced to their owners layer by layer
        double mb = gather_s(place.dp, double(sh.layer_elems + sh.other) * grad, sh.num_layers + 2);
        if (c.zero == 3)  // and every layer gathered for forward and again for backward
          mb += 2 * gather_s(place.dp, padded * param, sh.num_layers + 1);
        const double hide = (c.zero == 3 ? 1.0 : kBackwardShare) * comp;
        dp_mb = overlap ? std::max(mb * layer_frac, mb - hide) : mb;
      }
      if (c.zero == 1 || c.zero == 2) {
        const double ag = gather_s(place.dp, padded * param, 1);
        dp_tail += overlap ? ag * layer_frac : ag;
      }
    }
    const double embed = all_reduce_s(place.embed, double(v.embed.bytes), v.embed.calls);

    const double t_mb = comp + tp + pp + cp + ep + dp_mb;
    if (t_mb > slow.t_mb) slow = {t_mb, comp, tp, pp, cp, ep, dp_mb, flops, sh.stage};
    if (dp_tail + embed > tail) tail = dp_tail + embed, tail_dp = dp_tail, tail_embed = embed;
  }

  StepTime t;
  t.slowest_stage = slow.stage;
  t.compute = m * slow.comp;
  t.tp = m * slow.tp;
  t.pp = m * slow.pp;
  t.cp = m * slow.cp;
  t.ep = m * slow.ep;
  t.dp = m * slow.dp + tail_dp;
  // Interleaving v chunks per stage cuts the fill and drain to (pp-1)/v micro-batch times.
  const double fill = double(c.pp - 1) / c.v;
  t.bubble = fill * slow.t_mb;
  t.embed = tail_embed;
  t.world = place.world_latency_s;
  t.total = (m + fill) * slow.t_mb + tail + t.world;
  t.hw_flops_rank = m * slow.flops;
  const double tokens = double(pm.global_batch) * pm.model.seq_len;
  t.tokens_per_s = tokens / t.total;
  t.mfu = flops_per_token(pm.model) * t.tokens_per_s / (cl.peak_flops * c.world());
  return t;
}

}  // namespace loom::plan
