// Plan agreement-test support: one real train_step of a layout, its memory and Comm bytes.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>

#include "config/config.h"
#include "optim/zero.h"
#include "plan/cluster.h"
#include "plan/planner.h"

namespace loom::test {

struct Measured {
  MemoryReport memory;          // ZeroOptimizer::memory() after the step
  size_t activation_bytes = 0;  // GPTStage::activation_bytes()
  // bytes_sent() deltas over the step; dp: the gradient replicas (dp x cp) and, with ep > 1,
  // the expert replicas; cp: the ring; ep: the experts' all-to-all.
  uint64_t tp = 0, pp = 0, dp = 0, cp = 0, ep = 0, embed = 0, world = 0;
  int stage = 0, dp_rank = 0, microbatches = 0;  // dp_rank: the index among the replicas
};

// Builds the layout of cfg on `world` (size dp*pp*tp*cp), initializes the weights, then runs
// train_step(1) and records this rank's memory report and per-axis byte deltas.
Measured measure_step(const Config& cfg, MPI_Comm world);

// The cpu cluster used by the agreement tests (configs/clusters/cpu_2core.yaml's values).
plan::ClusterSpec cpu_cluster();

// cfg's layout as a plan candidate.
plan::Candidate candidate_of(const Config& cfg);

// "dp2 pp2 v1 tp1 cp1 mb2 zero1 1f1b none" for messages.
std::string layout_name(const Config& cfg);

// Current resident set size of this process in bytes (/proc/self/statm).
uint64_t current_rss_bytes();

}  // namespace loom::test
