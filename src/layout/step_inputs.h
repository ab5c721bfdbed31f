// The layout of one step's inputs in backend memory: the host's scalars (cpu::StepInputs), then
// every micro-batch's tokens and targets, uploaded in one copy before the step runs.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/step_state.h"

namespace loom {

struct StepInputsLayout {
  static constexpr size_t kScalarBytes = 64;  // cpu::StepInputs, padded (16-byte aligned after)
  static_assert(sizeof(cpu::StepInputs) <= kScalarBytes, "step scalars outgrew their slot");

  StepInputsLayout(int microbatches, int tokens_per_micro_batch)
      : microbatches(microbatches),
        tokens(size_t(tokens_per_micro_batch)),
        tokens_at(kScalarBytes),
        targets_at(kScalarBytes + size_t(microbatches) * tokens * sizeof(int32_t)),
        bytes(targets_at + size_t(microbatches) * tokens * sizeof(int32_t)) {}

  int microbatches;
  size_t tokens;      // per micro-batch (N)
  size_t tokens_at;   // byte offset of the (microbatches, N) tokens
  size_t targets_at;  // byte offset of the (microbatches, N) targets
  size_t bytes;
};

}  // namespace loom
