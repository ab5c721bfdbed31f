// StepFeed: one step's inputs (the host's scalars, every micro-batch's tokens and targets) staged
// on the host and uploaded to backend memory in one copy that the host does not wait for.
#pragma once
#include <memory>

#include "backend/backend.h"
#include "core/buffer.h"
#include "layout/step_inputs.h"
#include "pipeline/executor.h"

namespace loom {

class StepFeed {
 public:
  // The buffer is the memory model's step_inputs (layout/rank_memory.h).
  StepFeed(Backend& be, int microbatches, int tokens_per_micro_batch);

  // Waits until the previous upload has been copied, fills the host staging (scalars, then each
  // micro-batch's rows through batch(mb, tokens, targets)), and enqueues the upload.
  void load(const cpu::StepInputs& scalars, const BatchFn& batch);

  // Backend memory, valid for the work enqueued after load().
  const cpu::StepInputs* scalars() const;
  StepTokens tokens() const;
  size_t bytes() const { return layout_.bytes; }

 private:
  Backend& be_;
  StepInputsLayout layout_;
  std::unique_ptr<HostStaging> host_;
  Buffer dev_;
};

}  // namespace loom
