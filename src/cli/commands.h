// loom's commands: train, eval, generate, export. Each returns the process exit code.
#pragma once
#include "cli/args.h"

namespace loom::cli {

// Set once every rank is past start-up: from then on an error on one rank aborts the job.
extern bool g_running;

int cmd_train(const Args& a);
int cmd_eval(const Args& a);
int cmd_generate(const Args& a);
int cmd_export(const Args& a);

}  // namespace loom::cli
