// Executes a pipeline schedule: receive, compute, send (non-blocking), per micro-batch slot.
#include "pipeline/executor.h"

#include <algorithm>

#include "core/check.h"

namespace loom {

namespace {
constexpr int kGradTag = 1 << 20;  // tags: activations use mb, gradients kGradTag + mb
}

PipelineExecutor::PipelineExecutor(GPTStage& stage, ParallelCtx& pc, const RunLayout& run,
                                   const RankMemory& mem)
    : stage_(stage), pc_(pc), microbatches_(run.microbatches()), overlap_(run.overlap()) {
  schedule_ = make_schedule(run.schedule(), run.pp(), run.coord().pp, microbatches_);
  num_slots_ = run.slots();
  LOOM_CHECK(max_in_flight(schedule_) == num_slots_, "the ", schedule_name(run.schedule()),
             " schedule keeps ", max_in_flight(schedule_), " micro-batches in flight on stage ",
             run.coord().pp, " but the stage was built with ", num_slots_, " slots");
  LOOM_CHECK(mem.recv_grads == (pc.last_stage() ? 0 : (overlap_ ? 2 : 1)) &&
                 mem.sent_grads == (pc.first_stage() ? 0 : num_slots_),
             "memory model and executor disagree on the pipeline buffers");
  const size_t NC = stage.boundary_elems();
  const Backend& be = stage.backend();
  act_dtype_ = be.act_dtype();
  act_bytes_ = NC * be.act_size();
  // Device sends are staged (DeviceComm), in buffers allocated now, never during a step.
  if (mem.staged_sends > 0) pc_.pp.reserve_sends(act_bytes_, mem.staged_sends);
  if (mem.sent_grads > 0) dinput_buf_ = Buffer(size_t(mem.sent_grads) * act_bytes_, be.device());
  if (mem.recv_grads > 0) dout_buf_ = Buffer(size_t(mem.recv_grads) * act_bytes_, be.device());
  act_req_.assign(size_t(num_slots_), MPI_REQUEST_NULL);
  grad_req_.assign(size_t(num_slots_), MPI_REQUEST_NULL);
}

template <typename F>
void PipelineExecutor::timed(bool backward, F&& pass) {
  if (!timing_) return pass();
  Backend& be = stage_.backend();
  const double tp0 = pc_.tp.busy_ms();
  const int begin = be.record_mark();
  pass();
  const int end = be.record_mark();
  passes_.push_back(Pass{backward, begin, end, pc_.tp.busy_ms() - tp0});
}

double PipelineExecutor::total_ms(bool backward) const {
  double ms = 0;
  for (const Pass& p : passes_)
    if (p.backward == backward) ms += stage_.backend().mark_ms(p.begin, p.end) - p.tp_ms;
  return ms;
}

bool PipelineExecutor::receives(const PipeAction& a) const {
  return a.op == PipeOp::Forward ? !pc_.first_stage() : !pc_.last_stage();
}

void* PipelineExecutor::dout(int backwards) {
  const size_t b = overlap_ ? size_t(backwards % 2) : 0;
  return static_cast<char*>(dout_buf_.data()) + b * act_bytes_;
}

CommRequest PipelineExecutor::post_recv(const PipeAction& a, int backwards) {
  const size_t NC = stage_.boundary_elems();
  if (a.op == PipeOp::Forward)
    return pc_.pp.start_recv(stage_.input(a.mb % num_slots_), NC, act_dtype_, pc_.coord.pp - 1,
                             a.mb);
  return pc_.pp.start_recv(dout(backwards), NC, act_dtype_, pc_.coord.pp + 1, kGradTag + a.mb);
}

void PipelineExecutor::progress() { pc_.pp.test(early_); }

// Deadlock-freedom. Without overlap every action receives (blocking) what it needs, computes,
// and sends without blocking (isend; a send buffer is waited for only before it is rewritten,
// and its receiver's matching receive comes no later than in the no-overlap run). The
// schedules are proven by simulate_pipeline to finish under exactly these semantics. With
// overlap the only change is that the receive of action i+1 is posted (MPI_Irecv, which never
// blocks) before action i computes, and waited for where the blocking receive used to be: the
// blocking points and their order are unchanged, so the same proof holds; a receive posted
// early can only let the peer's send complete sooner. Tags (micro-batch, direction) are unique
// within a step and every early receive is waited for within the step, so no receive can match
// a message meant for another. It is posted only when its buffer is free during action i: a
// forward's input slot differs from action i's slot (the slot's previous micro-batch finished
// its backward no later than action i, schedules completing micro-batches in order), and a
// backward's output gradient alternates between two buffers, the other one held by action i at
// most.
void PipelineExecutor::run(const StepTokens& in, float dloss) {
  passes_.clear();
  const size_t NC = stage_.boundary_elems();
  const int prev = pc_.coord.pp - 1, next = pc_.coord.pp + 1;
  int backwards = 0;     // backward actions so far
  size_t early_for = 0;  // the action whose receive early_ holds (valid while posted)
  bool posted = false;
  for (size_t i = 0; i < schedule_.size(); ++i) {
    const PipeAction& a = schedule_[i];
    const int slot = a.mb % num_slots_;
    if (a.op == PipeOp::Forward) pc_.pp.wait(&act_req_[size_t(slot)]);  // its output has left
    if (receives(a)) {
      if (!posted || early_for != i) early_ = post_recv(a, backwards);  // not posted early
      pc_.pp.wait(early_);
      posted = false;
    }
    if (overlap_ && i + 1 < schedule_.size()) {
      const PipeAction& n = schedule_[i + 1];
      const bool free = n.op == PipeOp::Backward || n.mb % num_slots_ != slot;
      if (receives(n) && free) {
        early_ = post_recv(n, backwards + (a.op == PipeOp::Backward));
        early_for = i + 1, posted = true;
      }
    }
    if (a.op == PipeOp::Forward) {
      const size_t at = size_t(a.mb) * size_t(stage_.tokens_per_micro_batch());
      timed(false, [&] { stage_.forward(slot, in.tokens + at, in.targets + at, dloss); });
      if (!pc_.last_stage())
        act_req_[size_t(slot)] = pc_.pp.isend(stage_.output(slot), NC, act_dtype_, next, a.mb);
    } else {
      const void* d = pc_.last_stage() ? nullptr : dout(backwards);
      void* dinput = nullptr;
      if (!pc_.first_stage()) {
        pc_.pp.wait(&grad_req_[size_t(slot)]);
        dinput = static_cast<char*>(dinput_buf_.data()) + size_t(slot) * act_bytes_;
      }
      const bool last = backwards + 1 == microbatches_;  // schedules end on the last backward
      timed(true, [&] { stage_.backward(slot, d, dinput, last); });
      if (dinput)
        grad_req_[size_t(slot)] = pc_.pp.isend(dinput, NC, act_dtype_, prev, kGradTag + a.mb);
      ++backwards;
    }
  }
  for (auto& r : act_req_) pc_.pp.wait(&r);
  for (auto& r : grad_req_) pc_.pp.wait(&r);
  pc_.pp.wait_sends();  // device sends (cuda): delivered before the next step's work runs
}

void PipelineExecutor::run_forward(const StepTokens& in) {
  const size_t NC = stage_.boundary_elems();
  const int prev = pc_.coord.pp - 1, next = pc_.coord.pp + 1;
  for (int mb = 0; mb < microbatches_; ++mb) {
    pc_.pp.wait(&act_req_[0]);  // slot 0's previous output has left
    if (!pc_.first_stage()) pc_.pp.recv(stage_.input(0), NC, act_dtype_, prev, mb);
    const size_t at = size_t(mb) * size_t(stage_.tokens_per_micro_batch());
    stage_.forward(0, in.tokens + at, in.targets + at, 0.0f);
    if (!pc_.last_stage()) act_req_[0] = pc_.pp.isend(stage_.output(0), NC, act_dtype_, next, mb);
  }
  pc_.pp.wait(&act_req_[0]);
  pc_.pp.wait_sends();
}

}  // namespace loom
