// Step time of a layout: per-stage compute, pipeline bubble, exposed communication.
#pragma once
#include <vector>

#include "plan/cluster.h"
#include "plan/comm_model.h"
#include "plan/layout_model.h"

namespace loom::plan {

// Seconds per optimizer step, split by what the slowest rank waits for.
struct StepTime {
  double compute = 0;  // m micro-batches of the slowest stage's forward + backward (+ recompute)
  double bubble = 0;   // pipeline fill and drain: (pp-1)/(v*m+pp-1) of the pipelined time
  double tp = 0;       // TP all-reduces of m micro-batches (never overlapped)
  double pp = 0;       // activation / gradient sends of m micro-batches (never overlapped)
  double cp = 0;       // the ring attention's exposed sends of m micro-batches
  double ep = 0;       // the Mixture of Experts' all-to-all exchanges of m micro-batches
  double dp = 0;       // exposed DP gradient reduction and parameter gathering
  double embed = 0;    // tied-embedding gradient all-reduce between first and last stage
  double world = 0;    // gradient-norm and loss reductions
  double total = 0;
  double tokens_per_s = 0;
  double mfu = 0;            // model FLOPs (flops_per_token) / (peak x devices)
  double hw_flops_rank = 0;  // FLOPs the slowest stage's rank executes per step (recompute in)
  int slowest_stage = 0;
};

// Hardware FLOPs of one micro-batch's forward + backward on one rank of `sh` (recompute in).
double stage_flops_per_micro_batch(const PlanModel& pm, const Candidate& c, const StageShape& sh);

// The ring attention's exposed time of one micro-batch on a stage of `sh` (0 without cp): per
// layer cp-1 [k | v] sends forward (twice with full recompute), cp-1 and cp fp32 gradient sends
// backward. cuda: each [k | v] send overlaps the attention of the ring step it runs beside
// (flops_per_s), the gradient sends follow their step's compute and are exposed; cpu: nothing
// overlaps.
double ring_exposed_s(const PlanModel& pm, const Candidate& c, const StageShape& sh,
                      const AxisLink& link, double flops_per_s);

// Overlap assumptions. cpu: nothing overlaps (loom's executor runs collectives in line).
// cuda: the DP gradient all-reduce / reduce-scatter overlaps the backward except the last
// bucket (or layer), the parameter all-gather overlaps the next forward except the first
// layer, the ring's [k | v] sends overlap each ring step's attention; TP, pipeline p2p, the
// ring's gradient sends, embedding and world reductions are always exposed.
StepTime step_time(const PlanModel& pm, const Candidate& c, const std::vector<StageShape>& shapes,
                   int microbatches, const ClusterSpec& cl, const Placement& place);

}  // namespace loom::plan
