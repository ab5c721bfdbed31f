// DataLoader: the token batches of training and validation, as a pure function of the
// global sample index (so a run resumes exactly from "consumed samples N").
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "config/config.h"

namespace loom {

class DataLoader {
 public:
  // Opens and checks every dataset named in `data` (train list with weights, valid list, or a
  // split of the train prefixes) before any work; throws UserError naming the file and problem.
  // Token ids must be < vocab_size (checked when batches are read).
  DataLoader(const DataConfig& data, int seq_len, int vocab_size, uint64_t seed);
  ~DataLoader();

  // Global training sample i is T+1 consecutive tokens; inputs are its first T, targets its last
  // T. With shuffle: false, sample i is tokens [i*T, i*T+T+1) of the concatenation of all
  // documents in file order (wrapping to the start after the last full sample). Fills `rows`
  // samples starting at global sample `first`: inputs and targets are (rows, T) row-major.
  void train_batch(int64_t first, int rows, int32_t* inputs, int32_t* targets) const;

  bool has_valid() const;
  // Validation sample i (no shuffle, i wraps over the validation set).
  void valid_batch(int64_t first, int rows, int32_t* inputs, int32_t* targets) const;

  int64_t train_samples_per_epoch() const;
  std::string describe() const;  // one line: datasets, tokens, samples per epoch

  // Added by the data module (see docs/data.md, "Sample order"):
  int64_t valid_samples() const;  // samples in one pass over the validation set (0: none)
  // Which dataset (index into the train list) and which of its samples global sample i uses.
  std::pair<int, int64_t> train_source(int64_t i) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Per-DP-rank slicing of a global batch of G samples starting at global sample `step_first`:
// data-parallel rank r owns the contiguous block [step_first + r*G/dp, step_first + (r+1)*G/dp)
// and its micro-batch m (0-based) is the `micro_batch_size` samples starting at
//   step_first + r * (G / dp) + m * micro_batch_size.
// The union over ranks and micro-batches is exactly [step_first, step_first + G) for any layout,
// so every layout trains on the same global batch. (This is the trainer's order; Megatron's
// sampler interleaves ranks per micro-batch instead, which gives the same set per step.)
inline int64_t micro_batch_first_sample(int64_t step_first, int global_batch, int dp, int dp_rank,
                                        int micro, int micro_batch_size) {
  return step_first + int64_t(dp_rank) * (global_batch / dp) + int64_t(micro) * micro_batch_size;
}

}  // namespace loom
