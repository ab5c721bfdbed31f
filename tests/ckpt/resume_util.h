// Support for the checkpoint resume tests: train a config on the first ranks of the job
// (optionally resuming and saving), a fresh directory per case, and the check that a resumed run
// continues an uninterrupted one within the reorder class.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "ckpt/canonical.h"
#include "config/config.h"

namespace loom::test {

struct TrainRun {
  std::vector<double> losses;  // one per step run by this call
  std::vector<double> lrs;
  std::map<std::string, CanonicalTensor> weights;  // gathered to rank 0 of the run
};

// Trains c (its parallel.* give the layout; dp*pp*tp*cp ranks of MPI_COMM_WORLD take part, the
// others return an empty TrainRun) on synthetic samples until step `until`: resuming from
// c.checkpoint.dir when `resume`, saving after step `save_at`.
TrainRun train_resumable(Config c, int until, bool resume, int save_at = -1);

// <build>/<group>/<name>, emptied by rank 0 (collective over MPI_COMM_WORLD).
std::string fresh_dir(const std::string& group, const std::string& name);

// The resumed steps 11-20 of r equal the uninterrupted run's within the reorder tolerance class
// (tests/support/tolerance.h): the runs summed in different orders since step 1.
void expect_continues(const TrainRun& r, const TrainRun& straight, const std::string& what);

// The joined losses of a run saved at step 10 and resumed to 20 equal the uninterrupted run's
// bitwise, and so do the final weights (on rank 0).
void expect_bitwise_resume(const TrainRun& first, const TrainRun& second, const TrainRun& straight);

}  // namespace loom::test
