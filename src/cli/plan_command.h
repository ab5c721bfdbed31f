// loom plan: the ranked layouts of a config's model on a cluster (src/plan/), text or JSON.
#pragma once
#include "cli/args.h"

namespace loom::cli {

// loom plan CONFIG.yaml [--cluster CLUSTER.yaml] [--json] [--set key=value]...
// Without --cluster: this machine (one node, one cpu rank per physical core). Exit 0 when some
// layout fits; otherwise the plan is printed and one line on stderr names what is short.
// loom plan CONFIG.yaml --kernels [--gpu-flops F] [--attention-flops F] [--vector-flops F]
//   [--gpu-bandwidth BYTES_PER_S] [--launch-us U]: one GPU's kernels of one step at the
// config's micro-batch, accumulation and tp (src/plan/kernel_model.h); defaults H100 SXM.
int cmd_plan(const Args& a);

}  // namespace loom::cli
