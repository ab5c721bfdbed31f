// Support for equivalence tests: a tiny model config, synthetic samples that are a pure
// function of the sample index, and a run of N steps on any layout returning losses and the
// gathered canonical weights.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "ckpt/canonical.h"
#include "config/config.h"
#include "train/trainer.h"

namespace loom::test {

// 4 layers, 4 heads, d_model 32, vocab 97 (not a multiple of 128 or of any tp), T 8, G 8.
Config tiny_parallel_config();

// Sample i: T+1 pseudo-random ids in [0, V) seeded by i (inputs = first T, targets = last T).
SampleFn synthetic_samples(int vocab, int seq_len);

struct RunResult {
  std::vector<double> losses;                         // every step, on every rank
  std::map<std::string, CanonicalTensor> weights;     // on rank 0 of `world` only
  MemoryReport memory;                                // this rank's buffers
};

// Trains cfg for cfg.train.steps steps on the ranks of `world` (its size = dp*pp*tp).
RunResult run_layout(const Config& cfg, MPI_Comm world);

// Worst norm-wise relative error over all tensors (the key part of attn.c_attn.bias is left
// out: its gradient is zero in exact arithmetic, see test_gpt2_reference.cpp), and the name.
std::pair<double, std::string> worst_weight_error(const std::map<std::string, CanonicalTensor>& got,
                                                  const std::map<std::string, CanonicalTensor>& ref,
                                                  int d_model);

}  // namespace loom::test
