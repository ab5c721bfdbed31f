// Per-axis bytes of a step as loom's Comm counts them, rank placement, alpha-beta times.
#pragma once
#include <cstdint>

#include "plan/cluster.h"
#include "plan/layout_model.h"

namespace loom::plan {

struct AxisTraffic {
  uint64_t bytes = 0;  // payload as Comm::bytes_sent() counts it
  int64_t calls = 0;   // collective / p2p calls (approximate for ZeRO-2's per-owner reduces)
  // The all-reduce bytes the time model charges, when they differ from `bytes` (sequence
  // parallelism: Comm counts an all-gather's own share only); 0: bytes.
  uint64_t time_bytes = 0;
};

// One rank of `stage` (replica `dp_rank` of the dp x cp: ZeRO 3 gathers depend on its shard)
// over one train_step: forward/backward of every micro-batch (a full recompute repeats each
// block's two forward TP all-reduces and its forward ring), gradient reduction, optimizer, loss.
// dp: the gradient replicas' traffic (the dp x cp ranks of the same (pp, tp)); cp: the ring
// attention's point-to-point sends. Exact for the cpu backend; a size-1 axis counts nothing, as
// in loom. With ep > 1, dp also counts the experts' own sharding group (the dp / ep expert
// replicas), exactly as well.
// ep: the Mixture of Experts' all-to-all exchanges of token rows (expected bytes under uniform
// routing: they depend on where the router sends each token, so never exact).
struct CommVolume {
  AxisTraffic tp, pp, dp, cp, ep, embed, world;
  bool exact = false;
};
// One rank's all-to-all traffic of one MoE layer and micro-batch in one direction (dispatch or
// combine): its N x top_k assignments, of which (ep-1)/ep go to other ranks under uniform
// routing, C values each in the act dtype (drops by a capacity are not counted).
uint64_t expert_exchange_bytes(const PlanModel& pm, const Candidate& c);
// One exchange of the ring attention of one layer and micro-batch: `hops` = cp steps; the
// (N, 2*KV*D) [k | v] block of this rank's N = micro_batch x seq_len/cp rows in the act dtype
// (kv bytes) and its fp32 gradient (dkv bytes).
struct RingBlock {
  uint64_t hops = 1, kv = 0, dkv = 0;
};
RingBlock ring_block(const PlanModel& pm, const Candidate& c);

CommVolume step_comm_volume(const PlanModel& pm, const Candidate& c, const StageShape& sh,
                            int microbatches, int dp_rank = 0);

// The link one group of an axis uses: intra-node when every member shares a node, else the
// inter-node network with min(intra, inter x members-per-node) bandwidth (each device has its
// own NIC and NCCL spreads rings over them).
struct AxisLink {
  int size = 1;
  bool spans_nodes = false;
  double bytes_per_s = 1;
  double latency_s = 0;
};
struct Placement {
  AxisLink tp, pp, cp;
  AxisLink ep;  // the ep consecutive data-parallel ranks that split the experts
  AxisLink dp;  // the gradient replicas: the dp x cp ranks of the same (pp, tp)
  AxisLink embed;
  double world_latency_s = 0;  // one tiny world all-reduce (tree: 2 log2(world) hops)
};
// Ranks are placed with the grid's axis order (default tp-dp-pp: consecutive ranks fill a node;
// cp comes right after tp unless the order names it).
Placement place(const ClusterSpec& cl, const Candidate& c, const std::string& order);

// Alpha-beta times of `calls` collectives moving `bytes` in all (the full buffer): ring
// all-reduce 2(n-1)/n, reduce-scatter / all-gather (n-1)/n, point-to-point 1.
double all_reduce_s(const AxisLink& l, double bytes, int64_t calls);
double gather_s(const AxisLink& l, double bytes, int64_t calls);
double p2p_s(const AxisLink& l, double bytes, int64_t calls);
// An all-to-all of `calls` exchanges in which this rank sends `bytes` in all to the other
// members: each call waits for its n-1 peers' latency, the bytes cross the link once.
double all_to_all_s(const AxisLink& l, double bytes, int64_t calls);

}  // namespace loom::plan
