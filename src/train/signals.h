// Stop requests from the scheduler: SIGTERM and SIGUSR1 (Slurm's warning before the time
// limit) set a flag the trainer polls between steps, so it can save and exit cleanly.
#pragma once

namespace loom {

void install_stop_signals();
int stop_signal();  // the SIGTERM or SIGUSR1 this process received (0 if none)

// loom train's exit status when a stop signal ended it before train.steps, after saving a
// checkpoint (sysexits' EX_TEMPFAIL): run it again with checkpoint.resume to continue. 0 means
// train.steps are done, so a scheduler requeues a job on 75 only, never on a finished run.
constexpr int kExitStoppedEarly = 75;

}  // namespace loom
