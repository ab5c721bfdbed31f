// Executes a pipeline schedule: receive, compute, send (non-blocking), per micro-batch slot.
#include "pipeline/executor.h"

#include <algorithm>

#include "core/timer.h"

namespace loom {

namespace {
constexpr int kGradTag = 1 << 20;  // tags: activations use mb, gradients kGradTag + mb
}

int PipelineExecutor::slots_needed(const std::string& schedule, int stages, int stage, int m) {
  return max_in_flight(make_schedule(schedule, stages, stage, m));
}

PipelineExecutor::PipelineExecutor(GPTStage& stage, ParallelCtx& pc, const std::string& schedule,
                                   int microbatches)
    : stage_(stage), pc_(pc), microbatches_(microbatches) {
  const int P = pc.grid.size(Axis::PP);
  schedule_ = make_schedule(schedule, P, pc.coord.pp, microbatches);
  num_slots_ = max_in_flight(schedule_);
  const size_t NC = size_t(stage.tokens_per_micro_batch()) * size_t(stage.d_model());
  const Backend& be = stage.backend();
  act_dtype_ = be.act_dtype();
  act_bytes_ = NC * be.act_size();
  if (!pc.first_stage()) dinput_buf_ = Buffer(size_t(num_slots_) * act_bytes_, be.device());
  if (!pc.last_stage()) dout_buf_ = Buffer(act_bytes_, be.device());
  tokens_.resize(size_t(stage.tokens_per_micro_batch()));
  targets_.resize(tokens_.size());
  act_req_.assign(size_t(num_slots_), MPI_REQUEST_NULL);
  grad_req_.assign(size_t(num_slots_), MPI_REQUEST_NULL);
}

template <typename F>
void PipelineExecutor::timed(double& total, F&& pass) {
  if (!timing_) return pass();
  const double tp0 = pc_.tp.busy_ms();
  Stopwatch sw;
  pass();
  total += sw.ms() - (pc_.tp.busy_ms() - tp0);
}

void PipelineExecutor::run(const BatchFn& batch, float dloss) {
  forward_ms_ = backward_ms_ = 0;
  const size_t NC = size_t(stage_.tokens_per_micro_batch()) * size_t(stage_.d_model());
  const int prev = pc_.coord.pp - 1, next = pc_.coord.pp + 1;
  for (const PipeAction& a : schedule_) {
    const int slot = a.mb % num_slots_;
    if (a.op == PipeOp::Forward) {
      pc_.pp.wait(&act_req_[size_t(slot)]);  // the slot's previous output has left
      if (!pc_.first_stage()) pc_.pp.recv(stage_.input(slot), NC, act_dtype_, prev, a.mb);
      batch(a.mb, tokens_.data(), targets_.data());
      timed(forward_ms_, [&] { stage_.forward(slot, tokens_.data(), targets_.data(), dloss); });
      if (!pc_.last_stage())
        act_req_[size_t(slot)] = pc_.pp.isend(stage_.output(slot), NC, act_dtype_, next, a.mb);
    } else {
      const void* dout = nullptr;
      if (!pc_.last_stage()) {
        pc_.pp.recv(dout_buf_.data(), NC, act_dtype_, next, kGradTag + a.mb);
        dout = dout_buf_.data();
      }
      void* dinput = nullptr;
      if (!pc_.first_stage()) {
        pc_.pp.wait(&grad_req_[size_t(slot)]);
        dinput = static_cast<char*>(dinput_buf_.data()) + size_t(slot) * act_bytes_;
      }
      timed(backward_ms_, [&] { stage_.backward(slot, dout, dinput); });
      if (dinput)
        grad_req_[size_t(slot)] = pc_.pp.isend(dinput, NC, act_dtype_, prev, kGradTag + a.mb);
    }
  }
  for (auto& r : act_req_) pc_.pp.wait(&r);
  for (auto& r : grad_req_) pc_.pp.wait(&r);
  pc_.pp.wait_sends();  // device sends (cuda): delivered before the step goes on
}

void PipelineExecutor::run_forward(const BatchFn& batch) {
  const size_t NC = size_t(stage_.tokens_per_micro_batch()) * size_t(stage_.d_model());
  const int prev = pc_.coord.pp - 1, next = pc_.coord.pp + 1;
  for (int mb = 0; mb < microbatches_; ++mb) {
    pc_.pp.wait(&act_req_[0]);  // slot 0's previous output has left
    if (!pc_.first_stage()) pc_.pp.recv(stage_.input(0), NC, act_dtype_, prev, mb);
    batch(mb, tokens_.data(), targets_.data());
    stage_.forward(0, tokens_.data(), targets_.data(), 0.0f);
    if (!pc_.last_stage()) act_req_[0] = pc_.pp.isend(stage_.output(0), NC, act_dtype_, next, mb);
  }
  pc_.pp.wait(&act_req_[0]);
  pc_.pp.wait_sends();
}

}  // namespace loom
