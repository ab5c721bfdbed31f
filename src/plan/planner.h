// The planner: enumerates layouts, rejects impossible ones with a reason, ranks the rest.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "plan/cluster.h"
#include "plan/comm_model.h"
#include "plan/layout_model.h"
#include "plan/memory_model.h"
#include "plan/step_model.h"

namespace loom::plan {

// The config lines that make planning impossible (model shape, global batch, schedule, order),
// as validate() words them; the configured parallel layout itself is ignored.
std::vector<std::string> config_errors(const Config& cfg);

// The model of a config on a cluster. A cpu cluster runs loom's cpu backend (fp32); a cuda
// cluster runs train.dtype when the config is a cuda run, else its bf16 twin. `note` says which
// precision was chosen when it differs from the config.
PlanModel plan_model(const Config& cfg, const ClusterSpec& cl, std::string* note = nullptr);

// Context-parallel sizes the search takes: cp = 1, and cp > 1 where seq_len splits into 2*cp
// chunks (validation's rule) of at least pm.min_cp_chunk tokens each; a Mixture of Experts only
// cp = 1 (loom refuses cp > 1 with experts).
bool cp_searched(const PlanModel& pm, int cp);

// Virtual stages the search takes for a pipeline of pp stages: 1, and with pp > 1 and the 1f1b
// schedule each v in 2..pm.max_virtual_stages whose pp*v chunks split n_layer evenly (the
// micro-batches per step must also be a multiple of pp: make_plan checks that per batch).
std::vector<int> virtual_stages_searched(const PlanModel& pm, int pp);

// Expert-parallel sizes the search takes on a grid of dp data-parallel ranks: 1, and for a
// Mixture of Experts each ep > 1 dividing both dp and num_experts.
std::vector<int> experts_searched(const PlanModel& pm, int dp);

struct PlanEntry {
  Candidate c;
  int microbatches = 0;    // per DP rank per step
  MemoryEstimate memory;   // the largest rank's
  int memory_stage = 0;    // its pipeline stage
  StepTime time;           // valid entries only
  CommVolume comm;         // per axis, the largest count over stages (bytes per rank per step)
  bool estimate = false;   // some part is modelled from its definition, not from loom's code
  std::string reason;      // rejected entries: why
  double short_bytes = 0;  // rejected for memory: the excess over the device's memory
  bool grid_only = false;  // rejected before micro-batch / ZeRO / recompute were chosen
};

struct Plan {
  PlanModel pm;
  ClusterSpec cluster;
  std::vector<PlanEntry> valid;     // fastest first (ties: less memory first)
  std::vector<PlanEntry> rejected;  // grid rejections first, then memory (closest to fit first)
  int64_t grids = 0;                // (dp, pp, tp, cp) factorizations searched (cp_searched)
  int64_t evaluated = 0;            // full candidates whose memory was modelled
};

// Every (tp, pp, cp) with tp*pp*cp dividing the cluster's devices (dp = devices / (tp*pp*cp);
// cp as cp_searched allows), the virtual stages of virtual_stages_searched, every micro-batch
// size dividing global_batch/dp, ZeRO 0-3 (only 0 when dp*cp = 1: nothing to shard), recompute
// none/selective/full (selective only where attention keeps its probabilities: cpu without cp;
// elsewhere it is the same run as none), each with and without sequence parallelism where
// tp > 1 and the rank's micro_batch*seq_len/cp rows split over tp.
Plan make_plan(const PlanModel& pm, const ClusterSpec& cl);

// "" when some layout fits; else one line naming the short resource and by how much.
std::string no_fit_message(const Plan& p);

}  // namespace loom::plan
