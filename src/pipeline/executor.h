// PipelineExecutor: runs one step's schedule on this stage, sending activations forward and
// their gradients back over the pipeline communicator. With virtual stages, global chunk g =
// c*pp + stage sends its output to chunk g+1 on stage (stage+1) mod pp and its input gradient
// to chunk g-1 on stage (stage-1) mod pp. With overlap, the receive of the next action's input
// or output gradient is posted before the current action computes.
#pragma once
#include <functional>
#include <vector>

#include "core/buffer.h"
#include "layout/schedule.h"
#include "model/gpt_stage.h"

namespace loom {

// Fills tokens (N) and targets (N) of micro-batch `mb` of this rank's share of the step.
using BatchFn = std::function<void(int mb, int32_t* tokens, int32_t* targets)>;

// A step's inputs in backend memory: (microbatches, N) tokens and targets, N per micro-batch.
struct StepTokens {
  const int32_t* tokens;
  const int32_t* targets;
};

class PipelineExecutor {
 public:
  // run: this rank's resolved layout (schedule, micro-batches, slots, overlap); mem: its buffer
  // sizes (the pipeline's gradient buffers are allocated as mem.sent_grads and mem.recv_grads
  // say). The stage must have been built with run.slots() slots, the schedule's in-flight bound.
  PipelineExecutor(GPTStage& stage, ParallelCtx& pc, const RunLayout& run, const RankMemory& mem);

  // Forward and backward of every micro-batch; gradients accumulate in the stage, whose gradient
  // hooks learn which backward is the step's last. Time blocked
  // in pipeline receives (bubble + transfer) is counted by pc.pp.busy_ms().
  void run(const StepTokens& in, float dloss);
  // Forward only (evaluation): every micro-batch through the pipeline in order, the last
  // stage accumulating the loss; no gradients, one activation slot.
  void run_forward(const StepTokens& in);
  // Tests the receive posted early (overlap), letting MPI progress it; called between layers.
  void progress();

  // Compute time of the last run() in forward and in backward passes, excluding the host's
  // time blocked in TP communication inside them. Measured only when timing is on: two timing
  // marks on the stream per pass (Backend::record_mark), read after the step, so reading them
  // waits for the device; the backend's marks must not be cleared before.
  void set_timing(bool on) { timing_ = on; }
  double forward_ms() const { return total_ms(false); }
  double backward_ms() const { return total_ms(true); }

 private:
  template <typename F>
  void timed(bool backward, F&& pass);
  double total_ms(bool backward) const;
  int global(int chunk) const { return chunk * pp_ + stage_idx_; }  // the model's chunk index
  bool receives(const PipeAction& a) const;  // takes an input or output gradient from a peer
  int slot(const PipeAction& a) const { return a.mb % chunk_slots_[size_t(a.chunk)]; }
  size_t req(const PipeAction& a) const { return size_t(slot0_[size_t(a.chunk)] + slot(a)); }
  // Posts action a's receive; `backwards` backward actions precede it in the step.
  CommRequest post_recv(const PipeAction& a, int backwards);
  void* dout(int backwards);  // where the backward after `backwards` others receives dout

  GPTStage& stage_;
  ParallelCtx& pc_;
  Schedule schedule_;
  int microbatches_, num_slots_;  // num_slots_: all chunks together
  bool overlap_;
  int pp_, stage_idx_, chunks_;
  std::vector<int> chunk_slots_, slot0_;  // slots of each chunk, index of its first in all
  DType act_dtype_ = DType::F32;
  size_t act_bytes_ = 0;          // one (N, C) activation
  Buffer dinput_buf_, dout_buf_;  // dout_buf_: one output gradient (two with overlap)
  CommRequest early_;             // the receive posted for the next action (overlap)
  std::vector<MPI_Request> act_req_, grad_req_;  // per slot of each chunk (req())
  bool timing_ = false;
  struct Pass {
    bool backward;
    int begin, end;  // timing marks
    double tp_ms;    // host time blocked in TP communication meanwhile
  };
  std::vector<Pass> passes_;  // of the last run()
};

}  // namespace loom
