// Per-axis byte counts of a train_step, rank placement on nodes, collective times.
#include "plan/comm_model.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "layout/param_layout.h"
#include "layout/zero_shard.h"
#include "optim/zero.h"
#include "parallel/grid.h"

namespace loom::plan {

RingBlock ring_block(const PlanModel& pm, const Candidate& c) {
  const ModelConfig& m = pm.model;
  const uint64_t elems =
      rank_tokens(pm, c) * 2 * uint64_t(m.kv_heads() / c.tp) * uint64_t(m.head_dim());
  return RingBlock{uint64_t(c.cp), elems * uint64_t(pm.prec.act), elems * 4};
}

namespace {

// TP traffic with sequence parallelism over m micro-batches, as Comm counts it: a reduce-scatter
// its whole (N, C) input, an all-gather its own (N/tp, C) rows. Per layer forward 2 all-gathers
// and 2 reduce-scatters (a full recompute repeats them); backward 4 all-gathers (the output
// gradients and the re-gathered norm outputs), 2 reduce-scatters and the norm weight gradients'
// fp32 all-reduce. First stage: the embedding's reduce-scatter and its gradient's all-gather;
// last stage: the final norm's all-gather, its gradient's reduce-scatter and weight gradients,
// and the softmax statistics. The time model charges what the all-reduces cost without SP (an
// all-gather plus a reduce-scatter move what one all-reduce does) plus the backward re-gathers
// (each half an all-reduce of (N, C)): `ar_bytes` and L (N, C) per micro-batch.
AxisTraffic sequence_parallel_tp(const PlanModel& pm, const Candidate& c, const StageShape& sh,
                                 uint64_t m, uint64_t ar_bytes) {
  const uint64_t L = uint64_t(sh.num_layers), C = uint64_t(pm.model.d_model);
  const uint64_t N = rank_tokens(pm, c);
  const uint64_t NC = N * C * uint64_t(pm.prec.act), NsC = NC / uint64_t(c.tp);
  const uint64_t norms = pm.model.llama() ? 1 : 2;  // weight (and bias) per norm
  uint64_t fwd = 2 * NC + 2 * NsC;
  if (c.recompute == Recompute::Full) fwd *= 2;
  uint64_t mb = L * (fwd + 2 * NC + 4 * NsC + 2 * norms * C * 4);
  int64_t calls = int64_t(L) * (c.recompute == Recompute::Full ? 15 : 11);
  if (sh.first) mb += NC + NsC, calls += 2;
  if (sh.last) mb += NsC + NC + norms * C * 4 + 3 * N * 4, calls += 5;
  AxisTraffic t;
  t.bytes = m * mb;
  t.calls = int64_t(m) * calls;
  t.time_bytes = ar_bytes + m * L * NC;
  return t;
}

// The gradient replicas' traffic with expert parallelism (ep > 1 and experts on the stage): two
// sharding groups (layout/zero_shard.h), the dense tensors over the dp replicas and the experts'
// over the dp / ep expert replicas, each cut into runs of the flat buffer. What a rank sends is
// taken from the optimizer's own shard arithmetic (ZeroShards) on the stage's ParamLayout; a
// group of one rank (dp == ep) moves nothing.
AxisTraffic expert_split_dp(const PlanModel& pm, const Candidate& c, const StageShape& sh,
                            uint64_t m, int dp_rank, bool tied) {
  const uint64_t grad = uint64_t(pm.prec.grad), param = uint64_t(pm.prec.param);
  const ParamLayout layout(pm.model, c.tp, 0, c.pp, sh.stage, c.v, {}, c.ep, 0);
  const ZeroShards shards(layout, c.replicas(), dp_rank, std::max(c.zero, 1));
  // Elements of flat [begin, end) in groups of more than one rank: all of them (reduces), or
  // this rank's own (gathers); calls: the runs that contribute.
  auto moved = [&](size_t begin, size_t end, bool own, int64_t* calls) {
    uint64_t n = 0;
    for (const ShardGroup& g : shards.groups()) {
      if (g.ranks == 1) continue;
      for (const ShardRange& r : shards.runs(g, begin, end)) {
        if (calls) ++*calls;
        if (!own) n += r.hi - r.lo;
      }
      if (own)
        for (const ShardPiece& p : shards.owned(g, begin, end, g.rank)) n += p.hi - p.lo;
    }
    return n;
  };
  AxisTraffic t;
  if (c.zero <= 1) {  // every element's gradient all-reduced in its group, in buckets
    t.bytes = moved(0, layout.total(), false, &t.calls) * grad;
  } else {
    // Every micro-batch each layer's gradients and the non-layer tensors are reduced to their
    // owners (the tied embedding once per step); ZeRO-3 also gathers each layer twice and the
    // non-layer tensors once (first and last stage).
    uint64_t per_mb = 0, in_layers = 0;
    int64_t calls = 0;
    for (const auto& [begin, end] : layout.layer_ranges()) {
      per_mb += moved(begin, end, false, &calls);
      in_layers += moved(begin, end, true, nullptr);
    }
    const uint64_t deferred = tied ? sh.wte : 0;
    per_mb += sh.other - deferred;  // the non-layer tensors: all dense
    t.bytes = (m * per_mb + deferred) * grad;
    t.calls = int64_t(m) * (calls + 2) + (tied ? 1 : 0);
    if (c.zero == 3) {
      const bool ends = sh.first || sh.last;
      const uint64_t in_other = moved(0, layout.total(), true, nullptr) - in_layers;
      t.bytes += m * (2 * in_layers + (ends ? in_other : 0)) * param;
      t.calls += int64_t(m) * (2 * calls + (ends ? 2 : 0));
    }
  }
  if (c.zero == 1 || c.zero == 2) {  // the updated parameters: each run of each group, in place
    t.bytes += moved(0, layout.total(), true, &t.calls) * param;
  }
  return t;
}
}  // namespace

uint64_t expert_exchange_bytes(const PlanModel& pm, const Candidate& c) {
  const ModelConfig& m = pm.model;
  if (c.ep <= 1 || !m.is_moe()) return 0;
  const uint64_t rows = rank_tokens(pm, c) * uint64_t(m.moe.top_k);
  return rows * uint64_t(c.ep - 1) / uint64_t(c.ep) * uint64_t(m.d_model) * uint64_t(pm.prec.act);
}

CommVolume step_comm_volume(const PlanModel& pm, const Candidate& c, const StageShape& sh,
                            int microbatches, int dp_rank) {
  const uint64_t m = uint64_t(microbatches), L = uint64_t(sh.num_layers);
  const uint64_t N = rank_tokens(pm, c);  // this rank's rows: seq_len / cp of each sequence
  const uint64_t NC = N * uint64_t(pm.model.d_model) * uint64_t(pm.prec.act);
  const uint64_t grad = uint64_t(pm.prec.grad), param = uint64_t(pm.prec.param);
  const int replicas = c.replicas();
  CommVolume v;
  v.exact = pm.exact_backend();

  if (c.tp > 1) {
    // Per micro-batch: 2 all-reduces per block forward and 2 per block backward (a full
    // recompute repeats the forward's 2), the embedding output (first stage), and on the last
    // stage the head's input gradient plus the vocab-parallel softmax row max and sums (fp32).
    uint64_t big = 4 * L + (sh.first ? 1 : 0) + (sh.last ? 1 : 0);
    if (c.recompute == Recompute::Full) big += 2 * L;
    v.tp.bytes = m * (big * NC + (sh.last ? 3 * N * 4 : 0));
    v.tp.calls = int64_t(m * (big + (sh.last ? 2 : 0)));
    if (c.sp) v.tp = sequence_parallel_tp(pm, c, sh, m, v.tp.bytes);
    if (pm.model.is_moe()) {
      // Each MoE layer's backward sums the gate gradients, (N, top_k) fp32, over TP
      // (model/moe_layer.cpp).
      v.tp.bytes += m * L * N * uint64_t(pm.model.moe.top_k) * 4;
      v.tp.calls += int64_t(m * L);
    }
  }
  if (c.pp > 1) {
    // Per micro-batch and chunk: the chunk output forward (all but the model's last chunk) and
    // the input's gradient backward (all but the first); (N/tp, C) rows each with sequence
    // parallelism.
    const uint64_t sends = 2 * uint64_t(sh.chunks) - (sh.last ? 1 : 0) - (sh.first ? 1 : 0);
    v.pp.bytes = m * sends * (c.sp ? NC / uint64_t(c.tp) : NC);
    v.pp.calls = int64_t(m * sends);
  }
  if (c.cp > 1) {
    // The ring (model/context_attention.cpp), per layer and micro-batch: forward cp-1 sends of
    // the (N, 2*KV*D) [k | v] block in the act dtype; backward the same cp-1 and cp sends of its
    // fp32 gradient (the last one carries it home); a full recompute repeats the forward's.
    const RingBlock b = ring_block(pm, c);
    const uint64_t fwd = (b.hops - 1) * b.kv, bwd = (b.hops - 1) * b.kv + b.hops * b.dkv;
    const uint64_t again = c.recompute == Recompute::Full ? fwd : 0;
    v.cp.bytes = m * L * (fwd + bwd + again);
    v.cp.calls =
        int64_t(m * L * ((c.recompute == Recompute::Full ? 3 : 2) * (b.hops - 1) + b.hops));
  }
  if (c.ep > 1 && pm.model.is_moe()) {
    // Per MoE layer and micro-batch: the rows to their experts and back forward, the gradients
    // of both backward; a full recompute exchanges the forward's again.
    const uint64_t per = c.recompute == Recompute::Full ? 6 : 4;
    v.ep.bytes = m * L * per * expert_exchange_bytes(pm, c);
    v.ep.calls = int64_t(m * L * per);
    v.exact = false;
  }
  const bool tied = sh.tied_across_stages && sh.wte > 0;
  if (replicas > 1 && c.ep > 1 && sh.expert > 0) {
    v.dp = expert_split_dp(pm, c, sh, m, dp_rank, tied);
  } else if (replicas > 1) {  // the gradient replicas: dp x cp ranks of the same (pp, tp)
    // The rank's shard: one contiguous range of the padded flat buffer.
    const uint64_t shard =
        zero_sizes(sh.total, 0, replicas, dp_rank, 1, std::max(c.zero, 1)).shard_elems;
    if (c.zero <= 1) {  // gradient all-reduce in buckets after the pipeline
      v.dp.bytes = sh.total * grad;
      v.dp.calls = int64_t((sh.total + kZeroBucketElems - 1) / kZeroBucketElems);
    } else {
      // Every micro-batch: each layer's gradients and the non-layer tensors reduced to their
      // owners; the tied embedding waits for the embed group and is reduced once per step.
      const uint64_t deferred = tied ? sh.wte : 0;
      v.dp.bytes = m * (sh.layer_elems + sh.other - deferred) * grad + deferred * grad;
      v.dp.calls = int64_t(m * (L + 2) + (tied ? 1 : 0));
      if (c.zero == 3) {
        // Every micro-batch also gathers each layer before its forward and again before its
        // backward, and the non-layer tensors once (first and last stage); a rank sends the part
        // of each range inside its own shard.
        const ShardRange own = zero_shard(sh.total, replicas, dp_rank);
        const uint64_t lo = std::max<uint64_t>(own.lo, sh.layer_begin);
        const uint64_t hi = std::min<uint64_t>(own.hi, sh.layer_begin + sh.layer_elems);
        const uint64_t in_layers = hi > lo ? hi - lo : 0;
        const uint64_t in_other = (own.hi - own.lo) - in_layers;
        const bool ends = sh.first || sh.last;
        v.dp.bytes += m * (2 * in_layers + (ends ? in_other : 0)) * param;
        v.dp.calls += int64_t(m * (2 * L + (ends ? 2 : 0)));
      }
    }
    if (c.zero == 1 || c.zero == 2) {  // the updated parameters, all-gathered once
      v.dp.bytes += shard * param;
      v.dp.calls += 1;
    }
  }
  if (tied) {  // first and last stage sum the tied embedding's gradient
    v.embed.bytes = sh.wte * grad;
    v.embed.calls = 1;
  }
  if (c.world() > 1) {  // gradient norm and loss: one double each over the world
    v.world.bytes = 2 * sizeof(double);
    v.world.calls = 2;
    if (pm.model.is_moe()) {  // the step's MoE losses and expert load (train/moe_stats.cpp)
      const uint64_t layers = uint64_t(pm.model.n_layer), E = uint64_t(pm.model.moe.num_experts);
      v.world.bytes += (2 + layers * E + layers) * sizeof(double);  // [aux, z, (L, E), (L)]
      v.world.calls += 1;
    }
  }
  return v;
}

namespace {

// How the groups spanning `axes` lie on nodes: does any group span nodes, and how many members
// share a node (taken from the group of rank 0). A collective spreads over the NICs of the
// members on a node; a ring of point-to-point sends (`p2p`) waits for its slowest hop, one NIC.
AxisLink link_of(const ClusterSpec& cl, const Grid& g, std::initializer_list<Axis> axes,
                 bool p2p = false) {
  const int gpn = cl.gpus_per_node;
  AxisLink l;
  for (Axis a : axes) l.size *= g.size(a);
  int per_node = 0;
  for (int r = 0; r < g.size(); ++r) {
    Coord base = g.coord_of(r);
    bool in_group0 = true;
    for (Axis a : {Axis::DP, Axis::PP, Axis::TP, Axis::CP}) {
      const bool member = std::find(axes.begin(), axes.end(), a) != axes.end();
      if (member)
        base.at(a) = 0;
      else
        in_group0 = in_group0 && base[a] == 0;
    }
    const int b = g.rank_of(base);
    if (b / gpn != r / gpn) l.spans_nodes = true;
    if (in_group0 && r / gpn == 0) ++per_node;
  }
  const double intra = cl.intra_node.bytes_per_s(), inter = cl.inter_node.bytes_per_s();
  const int nics = p2p ? 1 : std::max(1, per_node);
  l.bytes_per_s = l.spans_nodes ? std::min(intra, inter * nics) : intra;
  l.latency_s = l.spans_nodes ? cl.inter_node.latency_s() : cl.intra_node.latency_s();
  return l;
}

}  // namespace

Placement place(const ClusterSpec& cl, const Candidate& c, const std::string& order) {
  Grid g(c.dp, c.pp, c.tp, order, c.cp);
  Placement p;
  p.tp = link_of(cl, g, {Axis::TP});
  p.pp = link_of(cl, g, {Axis::PP});
  p.cp = link_of(cl, g, {Axis::CP}, true);
  p.dp = link_of(cl, g, {Axis::DP, Axis::CP});
  // The embedding group pairs stage 0 with the last stage of the same (dp, tp, cp).
  p.embed = p.pp;
  p.embed.size = c.pp > 1 ? 2 : 1;
  if (c.pp > 1) {
    bool spans = false;
    for (int d = 0; d < c.dp; ++d)
      for (int t = 0; t < c.tp; ++t)
        for (int k = 0; k < c.cp; ++k) {
          int a = g.rank_of(Coord{d, 0, t, k}), b = g.rank_of(Coord{d, c.pp - 1, t, k});
          spans = spans || a / cl.gpus_per_node != b / cl.gpus_per_node;
        }
    p.embed.spans_nodes = spans;
    p.embed.bytes_per_s = spans ? cl.inter_node.bytes_per_s() : cl.intra_node.bytes_per_s();
    p.embed.latency_s = spans ? cl.inter_node.latency_s() : cl.intra_node.latency_s();
  }
  // The expert-parallel group: ep consecutive dp ranks of the same (pp, tp, cp).
  p.ep = p.dp;
  p.ep.size = c.ep;
  if (c.ep > 1) {
    bool spans = false;
    int per_node = 0;
    for (int r = 0; r < g.size(); ++r) {
      Coord base = g.coord_of(r);
      const bool in_group0 = base.dp < c.ep && base.pp == 0 && base.tp == 0 && base.cp == 0;
      base.dp -= base.dp % c.ep;
      spans = spans || g.rank_of(base) / cl.gpus_per_node != r / cl.gpus_per_node;
      if (in_group0 && r / cl.gpus_per_node == 0) ++per_node;
    }
    const double intra = cl.intra_node.bytes_per_s(), inter = cl.inter_node.bytes_per_s();
    p.ep.spans_nodes = spans;
    p.ep.bytes_per_s = spans ? std::min(intra, inter * std::max(1, per_node)) : intra;
    p.ep.latency_s = spans ? cl.inter_node.latency_s() : cl.intra_node.latency_s();
  }
  const int world = c.world();
  const double lat =
      world > cl.gpus_per_node ? cl.inter_node.latency_s() : cl.intra_node.latency_s();
  p.world_latency_s = world > 1 ? 2.0 * std::ceil(std::log2(double(world))) * lat : 0.0;
  return p;
}

double all_reduce_s(const AxisLink& l, double bytes, int64_t calls) {
  if (l.size <= 1 || calls <= 0) return 0;
  const double n = l.size;
  return double(calls) * 2 * (n - 1) * l.latency_s + 2 * (n - 1) / n * bytes / l.bytes_per_s;
}

double gather_s(const AxisLink& l, double bytes, int64_t calls) {
  if (l.size <= 1 || calls <= 0) return 0;
  const double n = l.size;
  return double(calls) * (n - 1) * l.latency_s + (n - 1) / n * bytes / l.bytes_per_s;
}

double all_to_all_s(const AxisLink& l, double bytes, int64_t calls) {
  if (l.size <= 1 || calls <= 0) return 0;
  return double(calls) * (l.size - 1) * l.latency_s + bytes / l.bytes_per_s;
}

double p2p_s(const AxisLink& l, double bytes, int64_t calls) {
  if (l.size <= 1 || calls <= 0) return 0;
  return double(calls) * l.latency_s + bytes / l.bytes_per_s;
}

}  // namespace loom::plan
