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

// Overlap assumptions. cpu: nothing overlaps (loom's executor runs collectives in line).
// cuda: the DP gradient all-reduce / reduce-scatter overlaps the backward except the last
// bucket (or layer), the parameter all-gather overlaps the next forward except the first
// layer; TP, pipeline p2p, embedding and world reductions are always exposed.
StepTime step_time(const PlanModel& pm, const Candidate& c, const std::vector<StageShape>& shapes,
                   int microbatches, const ClusterSpec& cl, const Placement& place);

}  // namespace loom::plan
