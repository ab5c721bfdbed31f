// loom: the executable. Parses the command line, runs a command, and turns errors into one
// clear line and a non-zero exit on every rank (aborting the job when only one rank failed).
#include <mpi.h>

#include <cstdio>
#include <string>

#include "backend/blas_setup.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/plan_command.h"
#include "core/check.h"
#include "core/crash_report.h"
#include "core/log.h"
#include "core/process.h"
#include "parallel/collective.h"
#include "train/signals.h"

namespace {

const char* kUsage =
    "usage: loom <command> [options]\n"
    "\n"
    "commands:\n"
    "  train CONFIG.yaml [--set key.path=value]...   train (every rank, under mpirun/srun;\n"
    "                                                dp*pp*tp ranks)\n"
    "  eval CONFIG.yaml --checkpoint DIR [--set ...]  validation loss and perplexity of a\n"
    "                                                checkpoint over train.eval_iters batches\n"
    "  generate --checkpoint DIR --prompt TEXT       continuations with a KV cache, on any\n"
    "           | --prompts FILE [--set parallel.*]  dp*pp*tp layout (docs/inference.md);\n"
    "           [--max-tokens N] [--temperature T]   defaults: 64 tokens, T=1 (0: greedy),\n"
    "           [--top-k K] [--top-p P] [--seed S]   whole vocabulary, seed 1; FILE: a prompt\n"
    "           [--stop TEXT] [--batch B]            per line or JSON lines {\"prompt\": ..}\n"
    "           [--no-cache]                         (B: sequences at a time, default 32)\n"
    "  serve --checkpoint DIR [--host H] [--port P]  OpenAI-compatible completions over HTTP\n"
    "        [--batch B] [--set parallel.tp/pp=..]   on rank 0 (default 127.0.0.1:8000, B 16\n"
    "                                                sequences at a time; docs/inference.md)\n"
    "  export CHECKPOINT OUT.h5|OUT.safetensors      a checkpoint's weights: canonical .h5, or\n"
    "                                                Hugging Face GPT-2/Llama safetensors\n"
    "                                                (one process; .safetensors adds config.json)\n"
    "  plan CONFIG.yaml [--cluster CLUSTER.yaml]     ranked (dp, pp, tp, micro-batch, zero,\n"
    "       [--json] [--ranks N] [--layout-args]     recompute) layouts: memory, comm, step time;\n"
    "                                                --ranks: for N ranks; --layout-args: the\n"
    "                                                fastest of <= N ranks as --set arguments\n"
    "  plan CONFIG.yaml --kernels [--gpu-flops F]    one GPU's kernels of one step: FLOPs, bytes,\n"
    "       [--gpu-bandwidth B] [--launch-us U]      roofline time, predicted step and MFU\n"
    "       [--attention-flops F] [--vector-flops F] (defaults: H100 SXM, 989e12, 3.35e12, 3)\n"
    "\n"
    "CHECKPOINT/DIR: a step directory, or a checkpoint.dir holding 'latest'.\n"
    "--set key.path=value overrides any config key, e.g. --set train.steps=100.\n"
    "Config keys: README.md and docs/config.md.\n";

// A failure that may be on this rank alone: print it with the rank and abort the whole job,
// so no other rank waits forever in a collective.
int abort_job(const char* what, int world) {
  std::fprintf(stderr, "%serror: %s\n", loom::log_prefix().c_str(), what);
  std::fflush(stderr);
  if (world > 1) MPI_Abort(MPI_COMM_WORLD, 1);
  return 1;
}

int dispatch(const loom::cli::Args& a, int rank, loom::cli::Phase& phase) {
  using namespace loom::cli;
  if (a.help || a.command.empty()) {
    if (rank == 0) std::fputs(kUsage, a.help ? stdout : stderr);
    return a.help ? 0 : 2;
  }
  if (a.command == "train") return cmd_train(a, phase);
  if (a.command == "eval") return cmd_eval(a, phase);
  if (a.command == "generate") return cmd_generate(a, phase);
  if (a.command == "serve") return cmd_serve(a, phase);
  if (a.command == "export") return cmd_export(a);
  if (a.command == "plan") return cmd_plan(a);
  throw loom::UserError(
      loom::str("unknown command '", a.command,
                "'; use train, eval, generate, serve, export or plan (see loom --help)"));
}

}  // namespace

int main(int argc, char** argv) {
  loom::ensure_fast_blas(argv);
  // The command line needs no MPI: parsed first, its error reported after MPI_Init by rank 0.
  loom::cli::Args args;
  std::string bad_args;
  try {
    args = loom::cli::parse_args(argc, argv);
  } catch (const loom::UserError& e) {
    bad_args = e.what();
  }
  // train and serve turn SIGTERM/SIGUSR1 into a stop request polled at a safe point. Caught
  // before MPI_Init (about a second under srun), so no signal in start-up kills the rank.
  if (args.command == "train" || args.command == "serve") loom::install_stop_signals();
  // Test hook: LOOM_TEST_START_DELAY_MS=N sleeps N ms here, a start-up a signal can reach.
  loom::TestDelay("LOOM_TEST_START_DELAY_MS")();
  // Threads besides the main one (OpenMP, the asynchronous checkpoint writer) never call MPI.
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  loom::install_crash_report();  // a crashing rank names itself, after MPI's own handlers
  int rank = 0, world = 1, code = 0;
  loom::cli::Phase phase = loom::cli::Phase::StartUp;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  try {
    if (!bad_args.empty()) throw loom::UserError(bad_args);
    code = dispatch(args, rank, phase);
  } catch (const loom::ReportedError& e) {
    code = e.code;
  } catch (const loom::UserError& e) {
    if (phase == loom::cli::Phase::Running) {
      code = abort_job(e.what(), world);
    } else {  // before start-up finished every rank sees the same input: rank 0 speaks
      if (rank == 0) std::fprintf(stderr, "loom: error: %s\n", e.what());
      code = 1;
    }
  } catch (const std::exception& e) {
    code = abort_job(e.what(), world);
  }
  MPI_Finalize();
  return code;
}
