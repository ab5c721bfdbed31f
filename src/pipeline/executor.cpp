// Executes a pipeline schedule: receive, compute, send (non-blocking), per (chunk, slot).
#include "pipeline/executor.h"

#include <algorithm>

#include "core/check.h"

namespace loom {

namespace {
// Tags: the activation of micro-batch mb for global chunk g is g*m + mb, its gradient for
// chunk g kGradTag + g*m + mb; unique within a step.
constexpr int kGradTag = 1 << 20;
}  // namespace

PipelineExecutor::PipelineExecutor(GPTStage& stage, ParallelCtx& pc, const RunLayout& run,
                                   const RankMemory& mem)
    : stage_(stage),
      pc_(pc),
      microbatches_(run.microbatches()),
      overlap_(run.overlap()),
      pp_(run.pp()),
      stage_idx_(run.coord().pp),
      chunks_(run.virtual_stages()),
      chunk_slots_(run.chunk_slots()) {
  schedule_ = make_schedule(run.schedule(), pp_, stage_idx_, microbatches_, chunks_);
  num_slots_ = run.slots();
  LOOM_CHECK(int(chunk_slots_.size()) == chunks_, chunk_slots_.size(), " slot counts for ", chunks_,
             " chunks");
  for (int c = 0; c < chunks_; ++c) {
    LOOM_CHECK(max_in_flight(schedule_, chunks_ == 1 ? -1 : c) == chunk_slots_[size_t(c)], "the ",
               schedule_name(run.schedule()), " schedule keeps ",
               max_in_flight(schedule_, chunks_ == 1 ? -1 : c), " micro-batches of chunk ", c,
               " in flight on stage ", stage_idx_, " but the stage was built with ",
               chunk_slots_[size_t(c)], " slots");
    slot0_.push_back(c == 0 ? 0 : slot0_.back() + chunk_slots_[size_t(c) - 1]);
  }
  const int G = pp_ * chunks_;
  int sent = 0;  // input-gradient buffers: the slots of every chunk but the model's first
  for (int c = 0; c < chunks_; ++c) sent += global(c) > 0 ? chunk_slots_[size_t(c)] : 0;
  const bool recv_grads = global(chunks_ - 1) < G - 1 || chunks_ > 1;
  LOOM_CHECK(mem.recv_grads == (recv_grads ? (overlap_ ? 2 : 1) : 0) && mem.sent_grads == sent,
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
  const int g = global(a.chunk);
  return a.op == PipeOp::Forward ? g > 0 : g < pp_ * chunks_ - 1;
}

void* PipelineExecutor::dout(int backwards) {
  const size_t b = overlap_ ? size_t(backwards % 2) : 0;
  return static_cast<char*>(dout_buf_.data()) + b * act_bytes_;
}

CommRequest PipelineExecutor::post_recv(const PipeAction& a, int backwards) {
  const size_t NC = stage_.boundary_elems();
  const int tag = global(a.chunk) * microbatches_ + a.mb;
  if (a.op == PipeOp::Forward)
    return pc_.pp.start_recv(stage_.input(a.chunk, slot(a)), NC, act_dtype_,
                             (stage_idx_ + pp_ - 1) % pp_, tag, Ring::Next);
  return pc_.pp.start_recv(dout(backwards), NC, act_dtype_, (stage_idx_ + 1) % pp_, kGradTag + tag,
                           Ring::Prev);
}

void PipelineExecutor::progress() { pc_.pp.test(early_); }

// Deadlock-freedom. Without overlap every action receives (blocking) what it needs, computes,
// and sends without blocking (isend; a send buffer is waited for only before it is rewritten,
// and its receiver's matching receive comes no later than in the no-overlap run). The
// schedules are proven by simulate_pipeline to finish under exactly these semantics. With
// overlap the only change is that the receive of action i+1 is posted (MPI_Irecv, which never
// blocks) before action i computes, and waited for where the blocking receive used to be: the
// blocking points and their order are unchanged, so the same proof holds; a receive posted
// early can only let the peer's send complete sooner. Tags (chunk, micro-batch, direction) are
// unique within a step and every early receive is waited for within the step, so no receive
// can match a message meant for another. It is posted only when its buffer is free during
// action i: a forward's input (chunk, slot) differs from action i's (the slot's previous
// micro-batch finished its backward no later than action i, schedules completing each chunk's
// micro-batches in order), and a backward's output gradient alternates between two buffers,
// the other one held by action i at most.
void PipelineExecutor::run(const StepTokens& in, float dloss) {
  passes_.clear();
  const size_t NC = stage_.boundary_elems();
  const int prev = (stage_idx_ + pp_ - 1) % pp_, next = (stage_idx_ + 1) % pp_;
  const int G = pp_ * chunks_;
  std::vector<int> chunk_backwards(size_t(chunks_), 0);
  int backwards = 0;     // backward actions so far
  size_t early_for = 0;  // the action whose receive early_ holds (valid while posted)
  bool posted = false;
  for (size_t i = 0; i < schedule_.size(); ++i) {
    const PipeAction& a = schedule_[i];
    const int sl = slot(a), g = global(a.chunk);
    const size_t r = req(a);
    if (a.op == PipeOp::Forward) pc_.pp.wait(&act_req_[r]);  // its output has left
    if (receives(a)) {
      if (!posted || early_for != i) early_ = post_recv(a, backwards);  // not posted early
      pc_.pp.wait(early_);
      posted = false;
    }
    if (overlap_ && i + 1 < schedule_.size()) {
      const PipeAction& n = schedule_[i + 1];
      const bool free = n.op == PipeOp::Backward || req(n) != r;
      if (receives(n) && free) {
        early_ = post_recv(n, backwards + (a.op == PipeOp::Backward));
        early_for = i + 1, posted = true;
      }
    }
    if (a.op == PipeOp::Forward) {
      const size_t at = size_t(a.mb) * size_t(stage_.tokens_per_micro_batch());
      timed(false, [&] { stage_.forward(a.chunk, sl, in.tokens + at, in.targets + at, dloss); });
      if (g + 1 < G)
        act_req_[r] = pc_.pp.isend(stage_.output(a.chunk, sl), NC, act_dtype_, next,
                                   (g + 1) * microbatches_ + a.mb, Ring::Next);
    } else {
      const void* d = g + 1 == G ? nullptr : dout(backwards);
      void* dinput = nullptr;
      if (g > 0) {
        pc_.pp.wait(&grad_req_[r]);
        const size_t at = size_t(slot0_[size_t(a.chunk)] - (global(0) > 0 ? 0 : chunk_slots_[0]));
        dinput = static_cast<char*>(dinput_buf_.data()) + (at + size_t(sl)) * act_bytes_;
      }
      // The chunk's last micro-batch: its layers' gradients are final. Schedules end on the
      // step's last backward.
      const bool last = ++chunk_backwards[size_t(a.chunk)] == microbatches_;
      const bool step_last = i + 1 == schedule_.size();
      timed(true, [&] { stage_.backward(a.chunk, sl, d, dinput, last, step_last); });
      if (dinput)
        grad_req_[r] = pc_.pp.isend(dinput, NC, act_dtype_, prev,
                                    kGradTag + (g - 1) * microbatches_ + a.mb, Ring::Prev);
      ++backwards;
    }
  }
  for (auto& q : act_req_) pc_.pp.wait(&q);
  for (auto& q : grad_req_) pc_.pp.wait(&q);
  pc_.pp.wait_sends();  // device sends (cuda): delivered before the next step's work runs
}

// Every micro-batch through every chunk in order (chunk 0 of all stages, then chunk 1, ...):
// each stage's receives come in the order its predecessor sends.
void PipelineExecutor::run_forward(const StepTokens& in) {
  const size_t NC = stage_.boundary_elems();
  const int prev = (stage_idx_ + pp_ - 1) % pp_, next = (stage_idx_ + 1) % pp_;
  const int G = pp_ * chunks_;
  for (int mb = 0; mb < microbatches_; ++mb)
    for (int c = 0; c < chunks_; ++c) {
      const int g = global(c);
      const size_t r = size_t(slot0_[size_t(c)]);  // slot 0 of the chunk
      pc_.pp.wait(&act_req_[r]);                   // its previous output has left
      if (g > 0)
        pc_.pp.recv(stage_.input(c, 0), NC, act_dtype_, prev, g * microbatches_ + mb, Ring::Next);
      const size_t at = size_t(mb) * size_t(stage_.tokens_per_micro_batch());
      stage_.forward(c, 0, in.tokens + at, in.targets + at, 0.0f);
      if (g + 1 < G)
        act_req_[r] = pc_.pp.isend(stage_.output(c, 0), NC, act_dtype_, next,
                                   (g + 1) * microbatches_ + mb, Ring::Next);
    }
  for (auto& q : act_req_) pc_.pp.wait(&q);
  pc_.pp.wait_sends();
}

}  // namespace loom
