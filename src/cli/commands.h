// loom's commands: train, eval, generate, export. Each returns the process exit code.
#pragma once
#include "cli/args.h"

namespace loom::cli {

// How far a command has got, owned by the caller (main) and advanced by the command. Before
// every rank is past start-up, every rank sees the same input and fails alike; from Running on,
// an error may be on one rank alone, and the caller aborts the whole job.
enum class Phase { StartUp, Running };

int world_size();  // ranks in MPI_COMM_WORLD

int cmd_train(const Args& a, Phase& phase);
int cmd_eval(const Args& a, Phase& phase);
int cmd_generate(const Args& a, Phase& phase);
int cmd_serve(const Args& a, Phase& phase);
int cmd_export(const Args& a);

}  // namespace loom::cli
