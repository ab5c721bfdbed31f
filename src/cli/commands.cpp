// The loom commands over the library: start-up (config, grid, threads) shared by train and eval,
// and the single-process command export (generate: generate_command.cpp).
#include "cli/commands.h"

#include <cstdio>

#include "backend/blas_setup.h"
#include "backend/cpu_threads.h"
#include "ckpt/canonical.h"
#include "ckpt/checkpoint.h"
#include "ckpt/export_checkpoint.h"
#include "core/check.h"
#include "core/log.h"
#include "parallel/parallel_ctx.h"
#ifdef LOOM_HAVE_NCCL
#include "parallel/nccl_comm.h"
#endif
#include "cli/load_config.h"
#include "model/flops.h"
#include "parallel/collective.h"
#include "parallel/device_comms.h"
#include "parallel/watchdog.h"
#include "train/signals.h"
#include "train/trainer.h"

namespace loom::cli {

namespace {

struct Job {
  Config cfg;
  std::unique_ptr<ParallelCtx> pc;
  std::unique_ptr<Trainer> trainer;  // owns the backend; detaches NCCL before it goes
};

// Config, grid, threads and the model of this rank, every step checked on every rank.
Job start(const std::string& config, const std::vector<std::string>& overrides) {
  Job j;
  j.cfg = load_and_validate(config, overrides, world_size());
  const Config& cfg = j.cfg;
  Grid grid(cfg.parallel.dp, cfg.parallel.pp, cfg.parallel.tp, cfg.parallel.order, cfg.parallel.cp);
  j.pc = make_parallel_ctx(grid);
  start_comm_watchdog(cfg.parallel.comm_timeout);
  set_log_prefix(str("[loom r", j.pc->rank, " ", grid.describe(j.pc->rank), "] "), j.pc->rank == 0);
  // Topology, decided alike on every rank: a TP group across nodes warns (strict_topology: every
  // rank stops); on cuda each rank's GPU, a node with more ranks than GPUs stops every rank.
  collectively([&] { check_topology(*j.pc, cfg.parallel.strict_topology); });
  std::vector<int> gpus;  // empty on cpu: the rank map shows "-"
#ifdef LOOM_HAVE_NCCL
  if (cfg.device == "cuda") {
    // The host-staged testing mode (LOOM_DEVICE_COMM=host) lets ranks share a GPU; a bad value
    // of the variable is one message from every rank.
    collectively([&] {
      const bool share = device_comm_kind() == DeviceCommKind::Host;
      gpus = gpus_for_ranks(*j.pc, visible_gpu_ids(), share);
    });
    j.pc->gpu = gpus[size_t(j.pc->rank)];
  }
#endif
  configure_cpu_threads(default_num_threads(j.pc->local_size));
  const int threads = default_num_threads(j.pc->local_size);
  info("cpu backend: ", threads, threads == 1 ? " OpenMP thread" : " OpenMP threads",
       " per rank, OpenBLAS ", blas_core_name(), " kernels");
  for (const auto& l : rank_map_lines(*j.pc, gpus)) info(l);  // rank, host, GPU, dp/pp/tp
  // The backend (cuda: this rank's GPU and its compute stream), then NCCL on that stream for
  // every axis, outside collectively() (its failures end the job through abort_job), then the
  // model, whose device-memory estimate is checked before anything is allocated.
  std::unique_ptr<Backend> backend;
  collectively([&] {
    backend = make_backend(cfg.device, cfg.train.dtype, std::max(j.pc->gpu, 0));
    if (backend->device() == Device::CUDA) device_comm_kind();  // a bad LOOM_DEVICE_COMM: here
  });
  if (backend->device() == Device::CUDA) {
    info(backend->describe(), ", device communicators: ", device_comm_name(device_comm_kind()));
    attach_device_comms(*j.pc, *backend);
  }
  collectively([&] {
    j.trainer = std::make_unique<Trainer>(cfg, *j.pc, SampleFn{}, SampleFn{}, std::move(backend));
  });
  return j;
}

void need_one_process(const char* cmd) {
  if (world_size() != 1)
    throw UserError(str("run loom ", cmd, " as one process (not under mpirun -np N)"));
}

}  // namespace

int world_size() {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  return world;
}

int cmd_train(const Args& a, Phase& phase) {
  if (a.operands.size() != 1)
    throw UserError("loom train needs one config file: loom train CONFIG.yaml [--set k=v]...");
  Job j = start(a.operands[0], a.overrides);
  collectively([&] { j.trainer->init_weights(); });
  j.trainer->resume();
  phase = Phase::Running;
  return j.trainer->run() ? 0 : kExitStoppedEarly;
}

int cmd_eval(const Args& a, Phase& phase) {
  if (a.operands.size() != 1 || option(a, "--checkpoint", "").empty())
    throw UserError(
        "loom eval needs a config and a checkpoint: loom eval CONFIG.yaml --checkpoint DIR");
  Job j = start(a.operands[0], a.overrides);
  if (!j.trainer->has_valid())
    throw UserError(
        str("loom eval: ", a.operands[0], " has no validation data; set data.valid or data.split"));
  collectively([&] { j.trainer->load(resolve_checkpoint_dir(option(a, "--checkpoint", ""))); });
  phase = Phase::Running;
  const int iters = j.cfg.train.eval_iters;
  double loss = j.trainer->evaluate(iters);
  info(str("eval: val loss ", loss, " | perplexity ", std::exp(loss), " | ", iters, " batches of ",
           j.cfg.train.global_batch_size, " x ", j.cfg.model.seq_len, " tokens"));
  return 0;
}

int cmd_export(const Args& a) {
  if (a.operands.size() != 2)
    throw UserError(
        "loom export needs a checkpoint and an output: loom export CKPT OUT.h5|OUT.safetensors");
  need_one_process("export");
  std::string dir = resolve_checkpoint_dir(a.operands[0]);
  Config cfg = checkpoint_config(dir);
  verify_checkpoint(dir, cfg.model);
  export_checkpoint(dir, a.operands[1], cfg.model);  // one layer in memory at a time
  std::printf("loom export: %s -> %s (%lld parameters)\n", dir.c_str(), a.operands[1].c_str(),
              static_cast<long long>(count_params(cfg.model)));
  return 0;
}

}  // namespace loom::cli
