// Stop requests from the scheduler: SIGTERM and SIGUSR1 (Slurm's warning before the time
// limit) set a flag the trainer polls between steps, so it can save and exit cleanly.
#pragma once

namespace loom {

void install_stop_signals();
int stop_signal();  // the SIGTERM or SIGUSR1 this process received (0 if none)

}  // namespace loom
