// Communication watchdog: a background thread that notices when this rank has been blocked in
// one collective or receive longer than a timeout, prints which call on which axis with which
// peer ranks, and ends the process so that mpirun/srun tear the job down instead of hanging.
#pragma once
#include <string>

namespace loom {

// Starts the thread (idempotent). timeout_s <= 0 leaves it off.
void start_comm_watchdog(double timeout_s);

// Marks the start and end of a blocking call on this thread; `what` names the call, the axis
// and the peers ("all_reduce on tp (world ranks 2,3)"). Cheap: two atomic stores.
void watchdog_enter(const std::string* what);
void watchdog_leave();

}  // namespace loom
