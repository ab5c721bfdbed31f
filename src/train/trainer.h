// Trainer: builds this rank's stage of the model, the optimizer, the pipeline executor and the
// data loader from a validated Config, and runs optimizer steps.
#pragma once
#include <array>
#include <functional>
#include <memory>

#include "ckpt/async_writer.h"
#include "ckpt/dir_lock.h"
#include "config/config.h"
#include "core/timer.h"
#include "data/loader.h"
#include "layout/run_layout.h"
#include "model/gpt_stage.h"
#include "optim/loss_scale.h"
#include "optim/zero.h"
#include "parallel/parallel_ctx.h"
#include "pipeline/executor.h"
#include "train/console.h"
#include "train/metrics.h"
#include "train/mfu.h"
#include "train/moe_stats.h"
#include "train/step_feed.h"

namespace loom {

struct StepStats {
  int step = 0;
  double loss = 0;       // mean CE of the step's global batch, before the update
  double grad_norm = 0;  // global L2 norm before clipping (unscaled; inf/nan on overflow)
  double lr = 0;
  double loss_scale = 0;  // the scale this step's backward used (0: no loss scaling)
  bool skipped = false;   // gradients overflowed: no update, the loss scale was lowered
  double step_ms = 0;
  std::vector<std::pair<std::string, double>> time_ms;  // breakdown (log.timers), this rank
};

// Fills `rows` training samples starting at global sample `first`: inputs, targets (rows, T).
using SampleFn = std::function<void(int64_t first, int rows, int32_t* inputs, int32_t* targets)>;

class Trainer {
 public:
  // cfg must be validated; dp resolved (cfg.parallel.dp == world / (tp*pp)). Samples come from
  // `samples` when given (tests), else from the datasets of cfg.data. backend: the device to run
  // on (null: made from cfg.device and cfg.train.dtype on GPU pc.gpu; a cuda backend made here
  // also gets NCCL attached to pc's communicators, collectively).
  Trainer(const Config& cfg, ParallelCtx& pc, SampleFn samples = {}, SampleFn valid = {},
          std::unique_ptr<Backend> backend = nullptr);
  ~Trainer();

  // Random init (train.seed) or train.init_from; collective.
  void init_weights();
  // Continues from the checkpoint that checkpoint.resume names (auto: the newest valid one), if
  // any: parameters, AdamW moments, step and data position. Collective.
  void resume();
  int start_step() const { return start_step_; }
  // A checkpoint of the state after `step` steps; collective. With checkpoint.async it is
  // copied to host memory here and written in the background (a save still in flight is
  // committed first); finish_checkpoint() or a later run() step boundary commits it.
  void save(int step);
  // Waits for the asynchronous save in flight, if any, and commits it. Collective.
  void finish_checkpoint();
  void load(const std::string& dir);  // parameters and moments of a checkpoint (eval)
  // One optimizer step (1-based) and its results: run_step() then step_stats().
  StepStats train_step(int step);
  // Enqueues a step without waiting for the device (cuda; dynamic loss scaling waits for its
  // overflow decision). timed: mark its forward and backward passes for step_stats' breakdown.
  void run_step(int step, bool timed = false);
  // The results of the steps run since the last call: the last one's loss, norm, lr, scale;
  // step_ms is their mean wall time. Waits for the device; collective.
  StepStats step_stats();
  // Mean validation loss over `iters` global batches of validation samples (the same batches
  // every time: a fixed yardstick). Needs validation data (has_valid()). Collective.
  double evaluate(int iters);
  bool has_valid() const;
  void log_eval(int step);  // evaluate and write a val_loss line (console and metrics.jsonl)
  // Every step with logging and metrics; false when a stop signal ended it before train.steps.
  bool run();

  GPTStage& stage() { return *stage_; }
  // Mixture of Experts: the last step's statistics read by step_stats() (train_step).
  const MoeStats& moe_stats() const { return moe_; }
  Backend& backend() { return *be_; }
  float loss_scale() const { return dynamic_ ? dynamic_->scale() : static_scale_; }
  int skipped_steps() const { return skipped_; }
  // This rank's parameters as one flat copy (layout offsets), whatever the ZeRO stage.
  // Collective over DP with ZeRO-3.
  std::vector<float> full_params();
  const ParamLayout& layout() const { return run_->params(); }
  const RunLayout& run_layout() const { return *run_; }
  ZeroOptimizer& optimizer() { return *opt_; }
  const Timers& timers() const { return timers_; }

 private:
  void build();                 // the constructor's work
  void release_device_comms();  // NCCL off pc_'s communicators (cuda), before be_ goes
  void log_step(const StepStats& s);
  void print_breakdown(int steps);
  void print_memory();
  std::array<double, 5> comm_busy() const;
  bool last_step_skipped() const;  // dynamic loss scaling: the last step run overflowed
  struct PendingStep;
  void step_body(float dloss, PendingStep* p);
  void lock_checkpoint_dir();  // collective: rank 0 takes checkpoint.dir's lock, once

  Config cfg_;
  ParallelCtx& pc_;
  std::unique_ptr<Backend> be_;  // before everything that holds its buffers
  // Loss scaling (train.loss_scale): dynamic_ set for dynamic scaling; static_scale_ the fixed
  // scale otherwise (1: none). skipped_ counts steps skipped on overflow (AdamW's bias
  // correction counts applied updates).
  std::unique_ptr<LossScaler> dynamic_;
  float static_scale_ = 1.0f;
  int skipped_ = 0;
  std::unique_ptr<RunLayout> run_;  // resolved once from cfg_ and this rank's coordinate
  std::unique_ptr<GPTStage> stage_;
  MoeStats moe_;
  std::unique_ptr<ZeroOptimizer> opt_;
  std::unique_ptr<PipelineExecutor> exec_;
  std::unique_ptr<StepFeed> feed_;  // the step's scalars, tokens and targets, uploaded at once
  bool captured_ = false;           // train.cuda_graph: the step is captured (replay() runs it)
  std::unique_ptr<DataLoader> data_;
  SampleFn samples_, valid_;
  MetricsWriter metrics_;
  Timers timers_;
  // Steps run and not yet read (step_stats): their timing marks and host communication time.
  struct PendingStep {
    int step = 0;
    bool timed = false;  // its passes have timing marks (the breakdown of log.timers)
    double lr = 0, loss_scale = 0;
    int begin = 0, opt_begin = -1, opt_end = -1, end = 0;  // Backend timing marks (-1: none)
    std::array<double, 5> busy0{}, busy1{};                // comm_busy() at begin and end
  };
  std::vector<PendingStep> pending_;
  Stopwatch since_read_;  // wall clock since the last step_stats()
  double flops_per_token_ = 0;
  int start_step_ = 0;        // steps done before this process started (resume)
  std::string resumed_from_;  // the checkpoint resume() loaded (empty: a fresh start)
  int64_t base_samples_ = 0;  // samples consumed by then
  // Held by world rank 0 from the first read (resume: auto) or write of checkpoint.dir to the
  // end of the run: rank 0 creates, commits and prunes every checkpoint of this job, so its
  // lock keeps a second job out of the directory (docs/checkpoints.md).
  DirLock ckpt_lock_;
  bool ckpt_lock_tried_ = false;
  // checkpoint.async: the save being written in the background. Declared after everything its
  // writer thread reads (the layout), so it is destroyed (the thread joined) first; a save
  // still in flight then stays uncommitted, as after a crash.
  AsyncCheckpointWriter ckpt_writer_;

  // ---- Operator console: defined in train/banner.cpp (formatting: console.h, MFU: mfu.h) ----
  void print_banner();                // collective: resolved config, grid table, peak FLOP/s
  void print_summary(int last_step);  // collective: end-of-run summary (rank 0 prints)
  PeakFlops peak_;                    // per-device peak FLOP/s for MFU (0: unknown -> null)
  // cuda: device memory in use before loom allocated (context, libraries), the fit check's
  // estimate of what loom adds, and the most in use at a log point (mem_peak_bytes()).
  uint64_t device_used_start_ = 0, device_estimate_ = 0, device_used_peak_ = 0;
  uint64_t mem_peak_bytes();  // the metrics' mem_peak_bytes: host RSS on cpu, device on cuda
  Progress progress_;         // rank 0: log points (ETA) and the logged losses
  Stopwatch run_clock_;       // restarted by print_banner
};

}  // namespace loom
