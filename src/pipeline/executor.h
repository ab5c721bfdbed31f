// PipelineExecutor: runs one step's schedule on this stage, sending activations forward and
// their gradients back over the pipeline communicator.
#pragma once
#include <functional>
#include <vector>

#include "core/buffer.h"
#include "model/gpt_stage.h"
#include "pipeline/schedule.h"

namespace loom {

// Fills tokens (N) and targets (N) of micro-batch `mb` of this rank's share of the step.
using BatchFn = std::function<void(int mb, int32_t* tokens, int32_t* targets)>;

class PipelineExecutor {
 public:
  PipelineExecutor(GPTStage& stage, ParallelCtx& pc, const std::string& schedule, int microbatches);

  // Slots (in-flight micro-batches) the stage must be built with for this schedule.
  static int slots_needed(const std::string& schedule, int stages, int stage, int microbatches);

  // Forward and backward of every micro-batch; gradients accumulate in the stage. Time blocked
  // in pipeline receives (bubble + transfer) is counted by pc.pp.busy_ms().
  void run(const BatchFn& batch, float dloss);
  // Forward only (evaluation): every micro-batch through the pipeline in order, the last
  // stage accumulating the loss; no gradients, one activation slot.
  void run_forward(const BatchFn& batch);

  // Compute time of the last run() in forward and in backward passes, excluding the TP
  // communication inside them (measured only when timing is on: two clock reads per pass).
  void set_timing(bool on) { timing_ = on; }
  double forward_ms() const { return forward_ms_; }
  double backward_ms() const { return backward_ms_; }

 private:
  template <typename F>
  void timed(double& total, F&& pass);

  GPTStage& stage_;
  ParallelCtx& pc_;
  Schedule schedule_;
  int microbatches_, num_slots_;
  DType act_dtype_ = DType::F32;
  size_t act_bytes_ = 0;  // one (N, C) activation
  Buffer dinput_buf_, dout_buf_;
  std::vector<int32_t> tokens_, targets_;
  std::vector<MPI_Request> act_req_, grad_req_;  // per slot
  bool timing_ = false;
  double forward_ms_ = 0, backward_ms_ = 0;
};

}  // namespace loom
