// loom: the executable. `loom train CONFIG.yaml [--set key=value]...` (under mpirun/srun).
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ckpt/canonical.h"
#include "ckpt/checkpoint.h"
#include "core/blas_setup.h"
#include "core/exec_ctx.h"
#include "core/log.h"
#include "parallel/parallel_ctx.h"
#include "train/flops.h"
#include "train/signals.h"
#include "train/startup.h"
#include "train/trainer.h"

namespace {

const char* kUsage =
    "usage: loom <command> [options]\n"
    "\n"
    "commands:\n"
    "  train CONFIG.yaml [--set key.path=value]...   train a GPT model (run every rank under\n"
    "                                                mpirun/srun; world = dp*pp*tp ranks)\n"
    "  export CHECKPOINT OUT.h5|OUT.safetensors      gather a checkpoint (a step directory, or a\n"
    "                                                checkpoint.dir with 'latest') into canonical\n"
    "                                                GPT-2 weights; one process\n"
    "\n"
    "options:\n"
    "  --set key.path=value   override any config key, e.g. --set train.steps=100\n"
    "  -h, --help             show this help\n"
    "\n"
    "Config keys: see README.md and docs/config.md.\n";

// Set once every rank is past start-up: from then on an error on one rank aborts the job.
bool g_running = false;

struct Args {
  std::string command, config, extra;  // config: the first operand, extra: the second
  std::vector<std::string> overrides;
  bool help = false;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "-h" || s == "--help") {
      a.help = true;
    } else if (s == "--set" || s.rfind("--set=", 0) == 0) {
      std::string v = s == "--set" ? (i + 1 < argc ? argv[++i] : "") : s.substr(6);
      if (v.empty()) throw loom::UserError("--set needs key.path=value, e.g. --set train.steps=100");
      a.overrides.push_back(v);
    } else if (s.rfind("-", 0) == 0) {
      throw loom::UserError(loom::str("unknown option '", s, "'; see loom --help"));
    } else if (a.command.empty()) {
      a.command = s;
    } else if (a.config.empty()) {
      a.config = s;
    } else if (a.extra.empty() && a.command == "export") {
      a.extra = s;
    } else {
      throw loom::UserError(loom::str("unexpected argument '", s, "'; see loom --help"));
    }
  }
  return a;
}

int cmd_train(const Args& a) {
  using namespace loom;
  if (a.config.empty()) throw UserError("loom train needs a config file: loom train CONFIG.yaml");
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  Config cfg = load_and_validate(a.config, a.overrides, world);
  Grid grid(cfg.parallel.dp, cfg.parallel.pp, cfg.parallel.tp, cfg.parallel.order);
  auto pc = make_parallel_ctx(grid);
  set_log_prefix(str("[loom r", pc->rank, " ", grid.describe(pc->rank), "] "), pc->rank == 0);
  configure_cpu_threads(default_num_threads(pc->local_size));
  info("cpu backend: ", default_num_threads(pc->local_size), " OpenMP threads per rank, OpenBLAS ",
       blas_core_name(), " kernels");
  info("model ", cfg.model.n_layer, "L ", cfg.model.n_head, "H ", cfg.model.d_model,
       "C vocab ", cfg.model.vocab_size, " T ", cfg.model.seq_len, " | grid dp", cfg.parallel.dp,
       " x pp", cfg.parallel.pp, " x tp", cfg.parallel.tp, " | ", cfg.train.steps, " steps of ",
       cfg.train.global_batch_size, " sequences");
  std::unique_ptr<Trainer> trainer;
  collectively([&] { trainer = std::make_unique<Trainer>(cfg, *pc); });
  collectively([&] { trainer->init_weights(); });
  trainer->resume();
  install_stop_signals();
  g_running = true;
  trainer->run();
  return 0;
}

// A failure that may be on this rank alone: print it with the rank and abort the whole job,
// so no other rank waits forever in a collective.
int abort_job(const char* what, int world) {
  std::fprintf(stderr, "%serror: %s\n", loom::log_prefix().c_str(), what);
  std::fflush(stderr);
  if (world > 1) MPI_Abort(MPI_COMM_WORLD, 1);
  return 1;
}

int cmd_export(const Args& a) {
  using namespace loom;
  if (a.config.empty() || a.extra.empty())
    throw UserError("loom export needs a checkpoint and an output: loom export CKPT OUT.h5");
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world != 1) throw UserError("run loom export as one process (not under mpirun -np N)");
  std::string dir = resolve_checkpoint_dir(a.config);
  Config cfg = checkpoint_config(dir);
  verify_checkpoint(dir, cfg.model);
  ParamLayout layout(cfg.model, 1, 0, 1, 0);
  std::vector<float> params(layout.total());
  read_checkpoint_tensors(dir, layout, params.data(), nullptr, nullptr);
  auto pc = make_parallel_ctx(Grid(1, 1, 1));
  save_canonical(a.extra, layout, params.data(), *pc);
  std::printf("loom export: %s -> %s (%lld parameters)\n", dir.c_str(), a.extra.c_str(),
              static_cast<long long>(count_params(cfg.model)));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  loom::ensure_fast_blas(argv);
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1, code = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  try {
    Args a = parse_args(argc, argv);
    if (a.help || a.command.empty()) {
      if (rank == 0) std::fputs(kUsage, a.help ? stdout : stderr);
      code = a.help ? 0 : 2;
    } else if (a.command == "train") {
      code = cmd_train(a);
    } else if (a.command == "export") {
      code = cmd_export(a);
    } else {
      throw loom::UserError(loom::str("unknown command '", a.command, "'; see loom --help"));
    }
  } catch (const loom::ReportedError& e) {
    code = e.code;
  } catch (const loom::UserError& e) {
    if (!g_running) {
      // Arguments are the same on every rank, so every rank gets here: rank 0 speaks.
      if (rank == 0) std::fprintf(stderr, "loom: error: %s\n", e.what());
      code = 1;
    } else {
      code = abort_job(e.what(), world);
    }
  } catch (const std::exception& e) {
    code = abort_job(e.what(), world);
  }
  MPI_Finalize();
  return code;
}
