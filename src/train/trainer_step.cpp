// One optimizer step of the Trainer: the inputs uploaded, the step enqueued (or its captured
// CUDA graph replayed), and its results read back once per log interval.
#include <cmath>
#include <cstdlib>
#include <string>

#include "core/check.h"
#include "core/log.h"
#include "optim/lr_schedule.h"
#include "train/elastic_hooks.h"
#include "train/trainer.h"

namespace loom {

namespace {
// Fault injection for the loss-scaling tests: LOOM_FAULT_NAN_GRADS=3 (or "1,2,3") makes the
// backward of those steps run on a NaN loss weight, as if every gradient had overflowed.
bool fault_nan_grads(int step) {
  const char* f = std::getenv("LOOM_FAULT_NAN_GRADS");
  if (!f) return false;
  const std::string list = std::string(",") + f + ",";
  return list.find("," + std::to_string(step) + ",") != std::string::npos;
}
}  // namespace

// Milliseconds each communicator has spent blocked so far: tp, pp, gradient replicas (dp, or
// dp x cp) + embed, world, cp (the ring attention).
std::array<double, 5> Trainer::comm_busy() const {
  return {pc_.tp.busy_ms(), pc_.pp.busy_ms(), pc_.replicas().busy_ms() + pc_.embed.busy_ms(),
          pc_.world.busy_ms(), pc_.cp.busy_ms()};
}

// Enqueues the step: nothing waits for the device (cuda) except, under dynamic loss scaling,
// the overflow decision that sets the next step's scale.
void Trainer::run_step(int step, bool timed) {
  fault_kill_rank(pc_.rank, step);  // LOOM_FAULT_KILL_RANK (train/elastic_hooks.h)
  Backend& be = *be_;
  if (pending_.empty()) {
    be.clear_marks();  // the marks of the steps read before
    since_read_.reset();
  }
  PendingStep p;
  p.busy0 = comm_busy();
  p.begin = be.record_mark();
  const int G = run_->global_batch(), T = run_->model().seq_len, mb = run_->micro_batch();

  // This DP rank's rows of the step's global batch, in micro-batches, and the step's scalars:
  // uploaded at once, so the step itself reads only backend memory.
  const int64_t first = base_samples_ + int64_t(step - start_step_ - 1) * G +
                        int64_t(pc_.coord.dp) * (G / run_->dp());
  BatchFn batch = [&](int j, int32_t* tokens, int32_t* targets) {
    trace_samples(step, pc_.rank, pc_.coord.dp, first + int64_t(j) * mb, mb);
    samples_(first + int64_t(j) * mb, mb, tokens, targets);
  };
  // The backward runs on the loss times the loss scale (a power of two unless set otherwise,
  // so the scaling is exact until it overflows); the update divides it out again.
  const float loss_scale = this->loss_scale();
  p.lr = lr_at(cfg_.optimizer, step, cfg_.train.steps);
  p.loss_scale = dynamic_ || static_scale_ != 1.0f ? double(loss_scale) : 0.0;
  feed_->load(cpu::StepInputs{float(p.lr), loss_scale, cfg_.train.grad_clip}, batch);
  const float dloss = fault_nan_grads(step) ? NAN : loss_scale / float(int64_t(G) * T);

  // A captured step (train.cuda_graph) replays all of it; the first step runs plainly, so that
  // everything allocated on first use (GEMM plans, timing events) exists before the capture.
  const bool graph = cfg_.train.cuda_graph && be.has_graphs();
  if (graph && captured_) {
    be.replay();
  } else if (graph && step > start_step_ + 1) {
    be.capture_begin();
    step_body(dloss, nullptr);
    be.capture_end();
    captured_ = true;
    be.replay();
  } else {
    exec_->set_timing(timed);
    p.timed = timed;
    step_body(dloss, &p);
    exec_->set_timing(false);
  }
  if (dynamic_) {  // the next step's scale depends on this step's overflow: read it
    const cpu::StepState st = opt_->read_state();
    dynamic_->update(st.apply == 0);
  }
  p.end = be.record_mark();
  p.busy1 = comm_busy();
  p.step = step;
  pending_.push_back(p);
}

// The step's device work, in stream order: forward/backward over the micro-batches, gradient
// reduction and norm, the decision and AdamW. p (not while capturing): its optimizer marks.
void Trainer::step_body(float dloss, PendingStep* p) {
  opt_->zero_grad();
  stage_->reset_loss();
  stage_->reset_moe_stats();
  exec_->run(feed_->tokens(), dloss);
  // Global norm, overflow (inf/nan gradients are never applied), clipping and AdamW, all
  // decided on the device from the norm there (cpu::decide_step).
  opt_->reduce_grads_and_norm();
  if (p) p->opt_begin = be_->record_mark();
  opt_->step(feed_->scalars());
  if (p) p->opt_end = be_->record_mark();
}

StepStats Trainer::train_step(int step) {
  run_step(step, cfg_.log.timers);
  return step_stats();
}

bool Trainer::last_step_skipped() const {
  return dynamic_ && !pending_.empty() && dynamic_->skipped() > skipped_;
}

// Waits for the device once for all the steps enqueued since the last read.
StepStats Trainer::step_stats() {
  LOOM_CHECK(!pending_.empty(), "step_stats() without a step since the last read");
  const int G = run_->global_batch(), T = run_->model().seq_len;
  // Mean loss of the last step's global batch: the last stage's TP-rank-0 sums over the world.
  if (!(pc_.last_stage() && pc_.coord.tp == 0)) stage_->reset_loss();
  pc_.world.all_reduce(stage_->loss_acc(), 1, DType::F64, ReduceOp::Sum);
  const double loss_sum = stage_->loss_sum();  // waits for the device
  const cpu::StepState st = opt_->read_state();
  if (cfg_.model.is_moe()) moe_ = gather_moe_stats(*stage_, *run_, pc_);  // collective
  const double wall_ms = since_read_.ms();
  const PendingStep& last = pending_.back();
  Backend& be = *be_;

  StepStats s;
  s.step = last.step;
  s.loss = loss_sum / (double(G) * T);
  s.grad_norm = st.grad_norm;  // the same on every rank
  s.lr = last.lr;
  s.loss_scale = last.loss_scale;
  s.skipped = st.apply == 0;
  // Steps skipped before the last one (without dynamic scaling, not every step is read).
  const int earlier = st.skipped - skipped_ - (s.skipped ? 1 : 0);
  if (earlier > 0 && !dynamic_)
    warn(earlier, " of steps ", pending_.front().step, "-", last.step - 1,
         " had a non-finite gradient norm; their updates were skipped");
  if (s.skipped && !dynamic_)
    warn("step ", s.step, ": the gradient norm is ", s.grad_norm, "; the update is skipped");
  skipped_ = st.skipped;
  // Throughput from the wall clock over the steps read now; the breakdown from the device.
  s.step_ms = wall_ms / double(pending_.size());
  timers_.add("step", wall_ms);
  const char* axes[5] = {"tp_comm", "pp_wait", "dp_comm", "world_comm", "cp_comm"};
  for (const PendingStep& p : pending_) {
    if (p.opt_begin >= 0) timers_.add("optimizer", be.mark_ms(p.opt_begin, p.opt_end));
    for (size_t i = 0; i < 5; ++i) timers_.add(axes[i], p.busy1[i] - p.busy0[i]);
  }
  if (last.timed) {  // the last step's breakdown (log.timers; not for a captured step)
    double fwd = exec_->forward_ms(), bwd = exec_->backward_ms();
    double opt = be.mark_ms(last.opt_begin, last.opt_end);
    double step_ms = be.mark_ms(last.begin, last.end);
    double tp = last.busy1[0] - last.busy0[0], pp = last.busy1[1] - last.busy0[1];
    double dp = last.busy1[2] - last.busy0[2], cp = last.busy1[4] - last.busy0[4];
    s.time_ms = {{"forward", fwd}, {"backward", bwd}, {"optimizer", opt},
                 {"tp_comm", tp},  {"pp_wait", pp},   {"dp_comm", dp}};
    if (run_->cp() > 1) s.time_ms.push_back({"cp_comm", cp});
    s.time_ms.push_back({"other", step_ms - fwd - bwd - opt - tp - pp - dp - cp});
  }
  pending_.clear();
  return s;
}

}  // namespace loom
