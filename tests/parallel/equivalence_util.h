// Support for equivalence tests: a tiny model config, synthetic samples that are a pure
// function of the sample index, and a run of N steps on any layout returning losses and the
// gathered canonical weights.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/canonical.h"
#include "config/config.h"
#include "tests/support/tolerance.h"
#include "train/trainer.h"

namespace loom::test {

// 4 layers, 4 heads, d_model 32, vocab 97 (not a multiple of 128 or of any tp), T 8, G 8.
Config tiny_parallel_config();
// The same size as a Llama: 8 query heads over kv_heads kv heads, SwiGLU 48, RoPE base 100,
// untied unless `tied`.
Config tiny_llama_config(int kv_heads = 4, bool tied = false);

// Sample i: T+1 pseudo-random ids in [0, V) seeded by i (inputs = first T, targets = last T).
SampleFn synthetic_samples(int vocab, int seq_len);

struct RunResult {
  std::vector<double> losses;  // every step, on every rank
  std::vector<double> lrs;     // every step's learning rate
  // The first step's clipped gradient c*g (c = min(1, clip/norm)), from AdamW's first moment
  // m1 = (1 - beta1) c g; on rank 0 of `world` only.
  std::map<std::string, CanonicalTensor> grads1;
  std::map<std::string, CanonicalTensor> weights;  // on rank 0 of `world` only
  MemoryReport memory;                             // this rank's buffers
};

// Trains cfg for cfg.train.steps steps on the ranks of `world` (its size = dp*pp*tp*cp).
RunResult run_layout(const Config& cfg, MPI_Comm world, SampleFn samples = {});

// Trains cfg on this process alone (a world of one rank).
inline RunResult run_alone(const Config& cfg) { return run_layout(cfg, MPI_COMM_SELF); }

// How far two runs of the same training are apart, in the units of the reorder tolerance
// class (tests/support/tolerance.h): step 1's loss, later losses (relative), step 1's gradient
// (norm-wise per tensor; skipped when either run has none) and the final weights (max |dw| in
// units of the summed learning rates of `ref`).
struct RunDiff {
  double first_loss = 0, later_loss = 0;
  int later_loss_step = 0;  // 1-based step of later_loss
  WorstTensor grad1, weights;
};
RunDiff compare_runs(const RunResult& got, const RunResult& ref, int d_model);

// The single-rank run of `base` (MPI_COMM_SELF), computed once per config and kept.
const RunResult& single_rank_run(const Config& base);

// Trains `c` (a layout of base's model) on the first dp*pp*tp*cp ranks of MPI_COMM_WORLD after
// checking it against validate()'s layout rules, and EXPECTs on rank 0 that it equals base's
// single-rank run within the reorder class (expect_reorder_equal, `name` in its line). Returns
// the run on rank 0, nothing on the other ranks or when the layout is invalid (a failure).
std::optional<RunResult> expect_equals_single_rank(const Config& c, const Config& base,
                                                   const std::string& name);

// The largest |a_i - b_i| / |b_i| (loss curves).
double max_rel(const std::vector<double>& a, const std::vector<double>& b);

// EXPECTs every part of compare_runs within the reorder class bounds and prints one line.
void expect_reorder_equal(const RunResult& got, const RunResult& ref, int d_model,
                          const std::string& what);

}  // namespace loom::test
