// The Trainer: building a rank's stage, optimizer and executor; the run loop, evaluation,
// checkpoints, and the end-of-run breakdown (one step: train/trainer_step.cpp).
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
#include "core/process.h"
#include "model/context_attention.h"
#include "model/flops.h"
#include "model/init.h"
#include "optim/lr_schedule.h"
#include "parallel/collective.h"
#include "parallel/device_comms.h"
#include "train/console.h"
#include "train/device_fit.h"
#include "train/elastic_hooks.h"
#include "train/signals.h"

namespace loom {

namespace {
// Test hook: LOOM_TEST_STEP_SLEEP_MS=N makes every step last at least N ms more (the Slurm
// time-limit test needs a job that surely outlasts its limit, however fast the machine).
const TestDelay test_step_delay("LOOM_TEST_STEP_SLEEP_MS");
}  // namespace

Trainer::Trainer(const Config& cfg, ParallelCtx& pc, SampleFn samples, SampleFn valid,
                 std::unique_ptr<Backend> backend)
    : cfg_(cfg),
      pc_(pc),
      be_(std::move(backend)),
      samples_(std::move(samples)),
      valid_(std::move(valid)) {
  try {
    check_elastic_env();  // the fault and trace hooks' variables, before any work
    build();
  } catch (...) {
    release_device_comms();  // before the backend (and its stream) goes with this object
    throw;
  }
}

void Trainer::release_device_comms() {
  // The communicators run on the backend's stream: drop them first.
  if (be_ && be_->device() == Device::CUDA && pc_.world.device_comm() != nullptr)
    detach_device_comms(pc_);
}

void Trainer::build() {
  const Config& cfg = cfg_;
  ParallelCtx& pc = pc_;
  run_ = std::make_unique<RunLayout>(cfg, pc.grid, pc.rank);
  LOOM_CHECK(run_->coord() == pc.coord, "grid coordinate of rank ", pc.rank);
  if (pc.ep != run_->ep()) add_expert_comms(pc, run_->ep());  // collective
  if (!be_) {
    be_ = make_backend(cfg.device, cfg.train.dtype, std::max(pc.gpu, 0));
    // NCCL, or the host-staged testing mode (LOOM_DEVICE_COMM; the only one in the CPU
    // emulation build, which has no NCCL).
    if (be_->device() == Device::CUDA && pc.world.device_comm() == nullptr)
      attach_device_comms(pc, *be_);
  }
  // The expert communicators made above when the caller attached the others before.
  if (be_->device() == Device::CUDA && pc.world.device_comm() != nullptr)
    attach_expert_device_comms(pc, *be_);
  if (be_->device() == Device::CUDA) {  // estimate before allocating: one clear error
    size_t free_b = 0, total_b = 0;
    be_->memory_info(&free_b, &total_b);
    device_estimate_ =
        check_device_fit(cfg, *run_, pc.rank, free_b, total_b, be_->device_name()).total();
    device_used_start_ = total_b - free_b;
  }
  const RankMemory mem = run_->memory(be_->traits());
  const std::string& ls = cfg.train.loss_scale;
  if (ls == "dynamic" || (ls == "auto" && cfg.train.dtype == "fp16"))
    dynamic_ = std::make_unique<LossScaler>(float(cfg.train.initial_loss_scale), 2.0f, 0.5f,
                                            cfg.train.loss_scale_window);
  else if (ls != "auto" && ls != "none")
    static_scale_ = std::stof(ls);
  opt_ = std::make_unique<ZeroOptimizer>(*run_, mem, cfg.optimizer, pc, *be_);
  stage_ =
      std::make_unique<GPTStage>(*run_, mem, pc, *be_, opt_->grad_hooks(), opt_->param_hooks());
  opt_->attach(*stage_);
  exec_ = std::make_unique<PipelineExecutor>(*stage_, pc, *run_, mem);
  feed_ = std::make_unique<StepFeed>(*be_, run_->microbatches(), stage_->tokens_per_micro_batch());
  LOOM_CHECK(feed_->bytes() == mem.step_inputs,
             "memory model and trainer disagree on the step "
             "inputs: ",
             mem.step_inputs, " bytes modelled, ", feed_->bytes(), " allocated");
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
  if (run_->cp() > 1) {  // this rank's share of every sequence (model/context_attention.h)
    auto share = [this](SampleFn full) -> SampleFn {
      if (!full) return full;
      const int T = run_->dims().T, cp = run_->cp(), r = pc_.coord.cp;
      return [full, T, cp, r](int64_t first, int rows, int32_t* in, int32_t* tg) {
        std::vector<int32_t> a(size_t(rows) * size_t(T) * size_t(cp)), b(a.size());
        full(first, rows, a.data(), b.data());
        take_cp_rows(in, a.data(), rows, T, cp, r);
        take_cp_rows(tg, b.data(), rows, T, cp, r);
      };
    };
    samples_ = share(samples_);
    valid_ = share(valid_);
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
  m.mem_peak_bytes = mem_peak_bytes();
  m.time_ms = s.time_ms;
  m.loss_scale = s.loss_scale;
  m.skipped = s.skipped;
  if (cfg_.model.is_moe()) m.moe = moe_stats_json(moe_);
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

bool Trainer::run() {
  if (pc_.rank == 0) metrics_ = MetricsWriter(cfg_.run_dir(), start_step_, cfg_.log.tensorboard);
  if (pc_.rank == 0) {  // scripts/elastic.sh restarted the job: why, and on which layout
    nlohmann::ordered_json r = restart_event(*run_, pc_.world.size(), start_step_);
    if (!r.is_null()) metrics_.write(r);
  }
  if (pc_.rank == 0 && !resumed_from_.empty()) {  // a restart shows in metrics.jsonl too
    nlohmann::ordered_json j;
    j["event"] = "resume";
    j["step"] = start_step_;
    j["checkpoint"] = resumed_from_;
    // Under Slurm: the job and how many times Slurm restarted it (a requeue after a time limit).
    if (const char* id = std::getenv("SLURM_JOB_ID")) j["slurm_job"] = id;
    if (const char* n = std::getenv("SLURM_RESTART_COUNT")) j["slurm_restart"] = std::atoi(n);
    metrics_.write(j);
  }
  print_banner();  // config, grid table, peak FLOP/s for MFU (train/banner.cpp)
  if (data_) info(data_->describe());
  print_memory();
  const int interval = cfg_.checkpoint.save_interval;
  int saved = start_step_, step = start_step_;
  while (step < cfg_.train.steps) {
    ++step;
    const bool log_now =
        step % cfg_.train.log_interval == 0 || step == start_step_ + 1 || step == cfg_.train.steps;
    run_step(step, cfg_.log.timers && log_now);  // the breakdown of the logged steps
    test_step_delay();
    const bool eval_now = cfg_.train.eval_interval > 0 && has_valid() &&
                          (step % cfg_.train.eval_interval == 0 || step == cfg_.train.steps);
    const bool save_now = interval > 0 && step % interval == 0;
    // A stop signal on any rank stops every rank after the same step, with a checkpoint. The
    // same reduction tells whether every rank has written its part of an asynchronous save.
    double flags[2] = {double(stop_signal()), ckpt_writer_.written() ? 0.0 : 1.0};
    pc_.world.all_reduce(flags, 2, ReduceOp::Max);
    const double stop = flags[0];
    if (ckpt_writer_.in_flight() && flags[1] == 0) ckpt_writer_.commit(cfg_, pc_);
    // The device is waited for only here: to log, before evaluating or saving (their time is
    // not the steps'), and after a skipped step (dynamic loss scaling).
    if (log_now || eval_now || save_now || stop > 0 || last_step_skipped()) {
      StepStats s = step_stats();
      if (pc_.rank == 0 && (log_now || s.skipped)) log_step(s);
      if (s.skipped && dynamic_)
        info("step ", step, ": gradients overflowed at loss scale ", s.loss_scale,
             "; update skipped, loss scale now ", dynamic_->scale());
    }
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
  finish_checkpoint();                            // an asynchronous save still in flight
  print_breakdown(step - start_step_);
  print_summary(step);  // steps, tokens, time, tok/s, MFU, losses, peak memory (banner.cpp)
  return step >= cfg_.train.steps;
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
    feed_->load(cpu::StepInputs{0.0f, 1.0f, 0.0}, [&](int j, int32_t* tokens, int32_t* targets) {
      valid_(first + int64_t(j) * mb, mb, tokens, targets);
    });
    exec_->run_forward(feed_->tokens());
  }
  if (!(pc_.last_stage() && pc_.coord.tp == 0)) stage_->reset_loss();
  pc_.world.all_reduce(stage_->loss_acc(), 1, DType::F64, ReduceOp::Sum);
  const double loss = stage_->loss_sum();
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
  opt_->set_update_counts(rp.step - skipped_, skipped_);
  if (dynamic_ && rp.state.loss_scale > 0)
    dynamic_->restore(float(rp.state.loss_scale), rp.state.loss_scale_clean, skipped_);
  resumed_from_ = rp.dir;
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
  if (!cfg_.checkpoint.async) {
    save_checkpoint(cfg_, step, consumed, run_->params(), *stage_, *opt_, pc_, st);
    return;
  }
  finish_checkpoint();  // one save in flight at a time: the previous one is committed first
  ckpt_writer_.start(stage_checkpoint(cfg_, step, consumed, run_->params(), *stage_, *opt_, pc_, st,
                                      true, ckpt_writer_.take_buffers()));
}

void Trainer::finish_checkpoint() {
  if (ckpt_writer_.in_flight()) ckpt_writer_.commit(cfg_, pc_);
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
  if (steps <= 0) return;  // resumed at the last step: nothing ran
  // Per-step averages over steps and ranks. Communication time is time spent inside blocking
  // calls, so it includes waiting for slower ranks (load imbalance) as well as transfer.
  const auto& t = timers_.totals();
  auto total = [&](const char* k) { return t.count(k) ? t.at(k) : 0.0; };
  // Only time inside train_step counts (not evaluation or checkpoint saves).
  double v[8] = {total("step"),       0,
                 total("optimizer"),  total("tp_comm"),
                 total("pp_wait"),    total("dp_comm"),
                 total("world_comm"), total("cp_comm")};
  v[1] = v[0] - v[2] - v[3] - v[4] - v[5] - v[6] - v[7];  // compute
  pc_.world.all_reduce(v, 8, ReduceOp::Sum);
  for (double& x : v) x /= double(steps) * pc_.world.size();
  auto pct = [&](double x) { return 100.0 * x / v[0]; };
  char line[512];
  std::snprintf(line, sizeof line,
                "time per step (mean over ranks): %.1f ms = compute %.1f%% + optimizer %.1f%% + "
                "tp comm %.1f%% + pp wait (bubble + transfer) %.1f%% + dp comm %.1f%% + "
                "norm/loss reduce %.1f%%%s",
                v[0], pct(v[1]), pct(v[2]), pct(v[3]), pct(v[4]), pct(v[5]), pct(v[6]),
                run_->cp() > 1 ? str(" + cp ring ", pct(v[7]), "%").c_str() : "");
  info(line);
  const int P = run_->pp(), m = run_->microbatches(), V = run_->virtual_stages();
  if (P > 1) {
    std::snprintf(line, sizeof line,
                  "pipeline: measured pp wait %.1f%% of the step; ideal bubble "
                  "(pp-1)/(v*m+pp-1) = %.1f%% for pp=%d, v=%d virtual stages, m=%d micro-batches",
                  pct(v[4]), 100.0 * (P - 1) / (V * m + P - 1), P, V, m);
    info(line);
  }
}

// cpu: the peak resident memory of the process. cuda: the device memory in use (total - free, as
// cudaMemGetInfo reports it for the whole device: the context and libraries included, and any
// other process on the same GPU), the largest seen at a log point; every buffer is allocated before
// step 1, so after it the figure no longer moves. The first time, rank 0 also reports what was
// allocated after the fit check against the estimate that check made.
uint64_t Trainer::mem_peak_bytes() {
  if (be_->device() != Device::CUDA) return peak_rss_bytes();
  size_t free_b = 0, total_b = 0;
  be_->memory_info(&free_b, &total_b);
  const uint64_t used = total_b - free_b;
  if (device_used_peak_ == 0 && pc_.rank == 0)
    info("device memory: ", format_bytes(double(used)),
         " in use = ", format_bytes(double(device_used_start_)),
         " at the fit check (context, libraries, GEMM workspace) + ",
         format_bytes(double(used - std::min(used, device_used_start_))),
         " since; the check's estimate for the latter: ", format_bytes(double(device_estimate_)));
  device_used_peak_ = std::max(device_used_peak_, used);
  return device_used_peak_;
}

}  // namespace loom
