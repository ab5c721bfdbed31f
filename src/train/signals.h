// Stop requests from the scheduler: SIGTERM and SIGUSR1 (Slurm's warning before the time
// limit) set a flag the trainer polls between steps, so it can save and exit cleanly.
#pragma once

namespace loom {

void install_stop_signals();
bool stop_requested();   // this process received SIGTERM or SIGUSR1
int stop_signal();       // which one (0 if none)

}  // namespace loom
