// The training step: pipeline forward/backward over micro-batches, gradient reduction over
// the tied-embedding and data-parallel groups, global-norm clipping, AdamW.
#include "train/trainer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <csignal>
#include <cstdlib>

#include "ckpt/canonical.h"
#include "ckpt/checkpoint.h"
#include "core/check.h"
#include "core/log.h"
#include "model/init.h"
#include "optim/lr_schedule.h"
#include "train/device_fit.h"
#ifdef LOOM_HAVE_NCCL
#include "parallel/nccl_comm.h"
#endif
#include "core/process.h"
#include "model/flops.h"
#include "parallel/collective.h"
#include "train/signals.h"

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

Trainer::Trainer(const Config& cfg, ParallelCtx& pc, SampleFn samples, SampleFn valid,
                 std::unique_ptr<Backend> backend)
    : cfg_(cfg),
      pc_(pc),
      be_(std::move(backend)),
      samples_(std::move(samples)),
      valid_(std::move(valid)) {
  try {
    build();
  } catch (...) {
    release_device_comms();  // before the backend (and its stream) goes with this object
    throw;
  }
}

void Trainer::release_device_comms() {
#ifdef LOOM_HAVE_NCCL
  // The communicators run on the backend's stream: drop them first.
  if (be_ && be_->device() == Device::CUDA && pc_.world.device_comm() != nullptr) detach_nccl(pc_);
#endif
}

void Trainer::build() {
  const Config& cfg = cfg_;
  ParallelCtx& pc = pc_;
  run_ = std::make_unique<RunLayout>(cfg, pc.grid, pc.rank);
  LOOM_CHECK(run_->coord() == pc.coord, "grid coordinate of rank ", pc.rank);
  if (!be_) {
    be_ = make_backend(cfg.device, cfg.train.dtype, std::max(pc.gpu, 0));
#ifdef LOOM_HAVE_NCCL
    if (be_->device() == Device::CUDA && pc.world.device_comm() == nullptr)
      attach_nccl(pc, be_->stream());
#endif
  }
#if defined(LOOM_CUDA_EMULATE)
  // The CPU emulation build has no NCCL: device collectives would have no communicator.
  LOOM_USER_CHECK(
      be_->device() != Device::CUDA || pc.world.size() == 1,
      "device: cuda in the CUDA emulation build (LOOM_CUDA=EMULATE) runs one rank only, "
      "NCCL is not emulated; run ",
      pc.world.size(), " ranks with device: cpu, or build with LOOM_CUDA=ON for GPUs");
#endif
  if (be_->device() == Device::CUDA) {  // estimate before allocating: one clear error
    size_t free_b = 0, total_b = 0;
    be_->memory_info(&free_b, &total_b);
    check_device_fit(cfg, *run_, pc.rank, free_b, total_b, be_->device_name());
  }
  const RankMemory mem = run_->memory(be_->traits());
  const std::string& ls = cfg.train.loss_scale;
  if (ls == "dynamic" || (ls == "auto" && cfg.train.dtype == "fp16"))
    dynamic_ = std::make_unique<LossScaler>(float(cfg.train.initial_loss_scale), 2.0f, 0.5f,
                                            cfg.train.loss_scale_window);
  else if (ls != "auto" && ls != "none")
    static_scale_ = std::stof(ls);
  opt_ = std::make_unique<ZeroOptimizer>(*run_, mem, cfg.optimizer, pc, *be_);
  stage_ = std::make_unique<GPTStage>(*run_, mem, pc, *be_, opt_->grad_hooks(), opt_->param_hooks());
  opt_->attach(*stage_);
  exec_ = std::make_unique<PipelineExecutor>(*stage_, pc, *run_, mem);
  exec_->set_timing(cfg.log.timers);
  if (run_->overlap())  // between layers, let MPI move what was started early
    stage_->set_progress([this] {
      opt_->progress();
      exec_->progress();
    });
  if (!samples_) {
    data_ = std::make_unique<DataLoader>(cfg.data, cfg.model.seq_len, cfg.model.vocab_size,
                                         cfg.train.seed);
    samples_ = [this](int64_t first, int rows, int32_t* in, int32_t* tg) {
      data_->train_batch(first, rows, in, tg);
    };
    if (data_->has_valid())
      valid_ = [this](int64_t first, int rows, int32_t* in, int32_t* tg) {
        data_->valid_batch(first, rows, in, tg);
      };
  }
  flops_per_token_ = flops_per_token(cfg.model);
}

Trainer::~Trainer() { release_device_comms(); }

void Trainer::init_weights() {
  std::vector<float> full(run_->params().total());
  if (!cfg_.train.init_from.empty())
    load_canonical(cfg_.train.init_from, run_->params(), full.data());
  else
    init_params(run_->params(), cfg_.model, cfg_.train.seed, full.data());
  opt_->set_full_params(full.data());
}

std::vector<float> Trainer::full_params() {
  std::vector<float> full(run_->params().total());
  opt_->get_full_params(full.data());
  return full;
}

// Milliseconds each communicator has spent blocked so far: tp, pp, dp + embed, world.
std::array<double, 4> Trainer::comm_busy() const {
  return {pc_.tp.busy_ms(), pc_.pp.busy_ms(), pc_.dp.busy_ms() + pc_.embed.busy_ms(),
          pc_.world.busy_ms()};
}

StepStats Trainer::train_step(int step) {
  Stopwatch sw;
  const std::array<double, 4> busy0 = comm_busy();
  const int G = run_->global_batch(), T = run_->model().seq_len, mb = run_->micro_batch();
  opt_->zero_grad();
  stage_->reset_loss();

  // This DP rank's rows of the step's global batch, in micro-batches.
  const int64_t first =
      base_samples_ + int64_t(step - start_step_ - 1) * G + int64_t(pc_.coord.dp) * (G / run_->dp());
  BatchFn batch = [&](int j, int32_t* tokens, int32_t* targets) {
    samples_(first + int64_t(j) * mb, mb, tokens, targets);
  };
  // The backward runs on the loss times the loss scale (a power of two unless set otherwise,
  // so the scaling is exact until it overflows); the update divides it out again.
  const float loss_scale = this->loss_scale();
  const float dloss = fault_nan_grads(step) ? NAN : loss_scale / float(int64_t(G) * T);
  exec_->run(batch, dloss);

  StepStats s;
  s.step = step;
  s.loss_scale = dynamic_ || static_scale_ != 1.0f ? double(loss_scale) : 0.0;
  s.grad_norm = opt_->reduce_grads_and_norm() / double(loss_scale);  // the same on every rank
  // Inf/nan gradients are never applied: with dynamic scaling the scale drops and training
  // goes on; otherwise the step is skipped with a warning (a diverging run shows it).
  const bool overflow = !std::isfinite(s.grad_norm);
  const bool apply = dynamic_ ? dynamic_->update(overflow) : !overflow;
  if (overflow && !dynamic_)
    warn("step ", step, ": the gradient norm is ", s.grad_norm, "; the update is skipped");
  s.skipped = !apply;
  skipped_ += s.skipped;
  float grad_scale = 1.0f / loss_scale;
  if (cfg_.train.grad_clip > 0 && apply) {
    double coef = cfg_.train.grad_clip / (s.grad_norm + 1e-6);
    if (coef < 1.0) grad_scale = float(coef) / loss_scale;
  }
  s.lr = lr_at(cfg_.optimizer, step, cfg_.train.steps);
  Stopwatch opt_sw;
  if (apply) opt_->step(s.lr, grad_scale, step - skipped_);
  const double opt_sw_ms = opt_sw.ms();
  timers_.add("optimizer", opt_sw_ms);

  // Mean loss of the global batch: summed by the last stage's TP-rank-0 ranks over DP.
  double loss = (pc_.last_stage() && pc_.coord.tp == 0) ? stage_->loss_sum() : 0.0;
  pc_.world.all_reduce(&loss, 1, ReduceOp::Sum);
  s.loss = loss / (double(G) * T);
  s.step_ms = sw.ms();
  timers_.add("step", s.step_ms);
  const std::array<double, 4> busy1 = comm_busy();
  const char* axes[4] = {"tp_comm", "pp_wait", "dp_comm", "world_comm"};
  for (int i = 0; i < 4; ++i) timers_.add(axes[i], busy1[size_t(i)] - busy0[size_t(i)]);
  if (cfg_.log.timers) {
    double fwd = exec_->forward_ms(), bwd = exec_->backward_ms(), opt = opt_sw_ms;
    double tp = busy1[0] - busy0[0], pp = busy1[1] - busy0[1], dp = busy1[2] - busy0[2];
    s.time_ms = {{"forward", fwd},
                 {"backward", bwd},
                 {"optimizer", opt},
                 {"tp_comm", tp},
                 {"pp_wait", pp},
                 {"dp_comm", dp},
                 {"other", s.step_ms - fwd - bwd - opt - tp - pp - dp}};
  }
  return s;
}

void Trainer::log_step(const StepStats& s) {
  const double tokens = double(cfg_.train.global_batch_size) * cfg_.model.seq_len;
  TrainMetrics m;
  m.step = s.step;
  m.loss = s.loss;
  m.lr = s.lr;
  m.grad_norm = s.grad_norm;
  m.tokens = int64_t(tokens) * s.step;
  m.step_ms = s.step_ms;
  m.tokens_per_s = tokens / (s.step_ms / 1000.0);
  m.mfu =
      model_flops_utilization(flops_per_token_, m.tokens_per_s, peak_.per_device, pc_.world.size());
  m.mem_peak_bytes = peak_rss_bytes();
  m.time_ms = s.time_ms;
  m.loss_scale = s.loss_scale;
  m.skipped = s.skipped;
  metrics_.write(train_metrics_line(m));
  const double recent_ms = progress_.on_log(s.step, run_clock_.ms(), s.loss);
  StepLine l;
  l.step = s.step;
  l.total_steps = cfg_.train.steps;
  l.loss = s.loss;
  l.lr = s.lr;
  l.grad_norm = s.grad_norm;
  l.tokens_per_s = m.tokens_per_s;
  l.mfu = m.mfu;
  l.step_ms = s.step_ms;
  l.mem_peak_bytes = double(m.mem_peak_bytes);
  l.eta_s = Progress::eta_s(s.step, cfg_.train.steps, recent_ms);
  info(format_step_line(l));
}

void Trainer::run() {
  if (pc_.rank == 0) metrics_ = MetricsWriter(cfg_.run_dir(), start_step_ == 0);
  print_banner();  // config, grid table, peak FLOP/s for MFU (train/banner.cpp)
  if (data_) info(data_->describe());
  print_memory();
  const int interval = cfg_.checkpoint.save_interval;
  int saved = start_step_, step = start_step_;
  while (step < cfg_.train.steps) {
    StepStats s = train_step(++step);
    if (pc_.rank == 0 && (s.skipped || step % cfg_.train.log_interval == 0 ||
                          step == start_step_ + 1 || step == cfg_.train.steps))
      log_step(s);
    if (s.skipped && dynamic_)
      info("step ", step, ": gradients overflowed at loss scale ", s.loss_scale,
           "; update skipped, loss scale now ", dynamic_->scale());
    // A stop signal on any rank stops every rank after the same step, with a checkpoint.
    double stop = stop_signal();
    pc_.world.all_reduce(&stop, 1, ReduceOp::Max);
    if (stop > 0) {
      info("received ", int(stop) == SIGUSR1 ? "SIGUSR1" : "SIGTERM",
           ": saving a checkpoint and stopping after step ", step);
      save(step);
      saved = step;
      break;
    }
    if (cfg_.train.eval_interval > 0 &&
        (step % cfg_.train.eval_interval == 0 || step == cfg_.train.steps))
      log_eval(step);
    if (interval > 0 && step % interval == 0) save(step), saved = step;
  }
  if (interval > 0 && saved != step) save(step);  // the final save on a normal exit
  print_breakdown(step - start_step_);
  print_summary(step);  // steps, tokens, time, tok/s, MFU, losses, peak memory (banner.cpp)
}

bool Trainer::has_valid() const { return bool(valid_); }

void Trainer::log_eval(int step) {
  if (!has_valid()) return;  // validate() requires validation data when eval_interval > 0
  Stopwatch sw;
  double loss = evaluate(cfg_.train.eval_iters);
  if (pc_.rank != 0) return;
  nlohmann::ordered_json j;
  j["step"] = step;
  j["val_loss"] = loss;
  j["val_ppl"] = std::exp(loss);
  j["eval_ms"] = sw.ms();
  metrics_.write(j);
  char line[160];
  std::snprintf(line, sizeof line,
                "eval  %5d | val loss %.4f | val ppl %.2f | %d batches in %.0f ms", step, loss,
                std::exp(loss), cfg_.train.eval_iters, sw.ms());
  info(line);
}

double Trainer::evaluate(int iters) {
  LOOM_CHECK(has_valid(), "evaluate() without validation data");
  const int G = run_->global_batch(), T = run_->model().seq_len, mb = run_->micro_batch();
  stage_->reset_loss();
  for (int i = 0; i < iters; ++i) {
    const int64_t first = int64_t(i) * G + int64_t(pc_.coord.dp) * (G / run_->dp());
    exec_->run_forward([&](int j, int32_t* tokens, int32_t* targets) {
      valid_(first + int64_t(j) * mb, mb, tokens, targets);
    });
  }
  double loss = (pc_.last_stage() && pc_.coord.tp == 0) ? stage_->loss_sum() : 0.0;
  pc_.world.all_reduce(&loss, 1, ReduceOp::Sum);
  stage_->reset_loss();
  return loss / (double(iters) * G * T);
}

void Trainer::lock_checkpoint_dir() {
  if (ckpt_lock_tried_) return;
  collectively(
      [&] {
        if (pc_.rank == 0) ckpt_lock_ = DirLock(cfg_.checkpoint_dir());
      },
      pc_.world.mpi());
  ckpt_lock_tried_ = true;
}

void Trainer::resume() {
  if (cfg_.checkpoint.save_interval > 0 || cfg_.checkpoint.resume == "auto") lock_checkpoint_dir();
  ResumePoint rp = find_resume(cfg_, pc_);
  if (rp.dir.empty()) {
    if (cfg_.checkpoint.resume == "auto")
      info("no checkpoint under ", cfg_.checkpoint_dir(), "; starting fresh");
    return;
  }
  Stopwatch sw;
  collectively([&] { load_checkpoint(rp.dir, run_->params(), *opt_); }, pc_.world.mpi());
  start_step_ = rp.step;
  base_samples_ = rp.consumed_samples;
  skipped_ = rp.state.skipped_steps;
  if (dynamic_ && rp.state.loss_scale > 0)
    dynamic_->restore(float(rp.state.loss_scale), rp.state.loss_scale_clean, skipped_);
  info("resumed from ", rp.dir, " at step ", rp.step, " (", rp.consumed_samples,
       " samples consumed; loaded in ", int64_t(sw.ms()), " ms)");
}

void Trainer::load(const std::string& dir) {
  verify_checkpoint(dir, cfg_.model);
  load_checkpoint(dir, run_->params(), *opt_);
}

void Trainer::save(int step) {
  lock_checkpoint_dir();
  int64_t consumed = base_samples_ + int64_t(step - start_step_) * cfg_.train.global_batch_size;
  TrainerState st;
  st.skipped_steps = skipped_;
  if (dynamic_) st.loss_scale = dynamic_->scale(), st.loss_scale_clean = dynamic_->clean_steps();
  save_checkpoint(cfg_, step, consumed, run_->params(), *stage_, *opt_, pc_, st);
}

void Trainer::print_memory() {
  // Rank 0's buffers and the largest rank's (pipeline stages differ; ZeRO shards shrink them).
  MemoryReport r = opt_->memory();
  double v[6] = {double(r.params),       double(r.param_buckets), double(r.grads),
                 double(r.grad_buckets), double(r.optimizer),     double(r.activations)};
  double mx[6];
  std::copy(v, v + 6, mx);
  pc_.world.all_reduce(mx, 6, ReduceOp::Max);
  auto mib = [](double b) { return b / double(1 << 20); };
  char line[400];
  std::snprintf(line, sizeof line,
                "memory per rank (MiB, rank 0 / largest rank), ZeRO stage %d: params %.1f / %.1f "
                "(+ gather %.1f / %.1f) | grads %.1f / %.1f (+ buckets %.1f / %.1f) | optimizer "
                "state %.1f / %.1f | activations %.1f / %.1f",
                opt_->stage(), mib(v[0]), mib(mx[0]), mib(v[1]), mib(mx[1]), mib(v[2]), mib(mx[2]),
                mib(v[3]), mib(mx[3]), mib(v[4]), mib(mx[4]), mib(v[5]), mib(mx[5]));
  info(line);
}

void Trainer::print_breakdown(int steps) {
  // Per-step averages over steps and ranks. Communication time is time spent inside blocking
  // calls, so it includes waiting for slower ranks (load imbalance) as well as transfer.
  const auto& t = timers_.totals();
  auto total = [&](const char* k) { return t.count(k) ? t.at(k) : 0.0; };
  // Only time inside train_step counts (not evaluation or checkpoint saves).
  double v[7] = {total("step"),      0,
                 total("optimizer"), total("tp_comm"),
                 total("pp_wait"),   total("dp_comm"),
                 total("world_comm")};
  v[1] = v[0] - v[2] - v[3] - v[4] - v[5] - v[6];  // compute
  pc_.world.all_reduce(v, 7, ReduceOp::Sum);
  for (double& x : v) x /= double(steps) * pc_.world.size();
  auto pct = [&](double x) { return 100.0 * x / v[0]; };
  char line[512];
  std::snprintf(line, sizeof line,
                "time per step (mean over ranks): %.1f ms = compute %.1f%% + optimizer %.1f%% + "
                "tp comm %.1f%% + pp wait (bubble + transfer) %.1f%% + dp comm %.1f%% + "
                "norm/loss reduce %.1f%%",
                v[0], pct(v[1]), pct(v[2]), pct(v[3]), pct(v[4]), pct(v[5]), pct(v[6]));
  info(line);
  const int P = run_->pp(), m = run_->microbatches();
  if (P > 1) {
    std::snprintf(line, sizeof line,
                  "pipeline: measured pp wait %.1f%% of the step; ideal bubble (pp-1)/(m+pp-1) = "
                  "%.1f%% for pp=%d, m=%d micro-batches",
                  pct(v[4]), 100.0 * (P - 1) / (m + P - 1), P, m);
    info(line);
  }
}

}  // namespace loom
