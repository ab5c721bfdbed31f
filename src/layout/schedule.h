// Pipeline schedules as pure action lists per stage (no MPI): 1F1B and GPipe, plus a
// simulator of all stages used by tests to prove deadlock-freedom and in-flight bounds.
#pragma once
#include <string>
#include <vector>

namespace loom {

enum class PipeOp { Forward, Backward };
struct PipeAction {
  PipeOp op;
  int mb;  // micro-batch index in [0, microbatches)
  bool operator==(const PipeAction& o) const { return op == o.op && mb == o.mb; }
};
using Schedule = std::vector<PipeAction>;

// parallel.schedule.
enum class ScheduleKind { OneFOneB, GPipe };
ScheduleKind parse_schedule(const std::string& name);  // 1f1b | gpipe; UserError otherwise
const char* schedule_name(ScheduleKind k);

// 1F1B (PipeDream-flush): min(stages-stage-1, m) warm-up forwards, then alternate one forward
// and one backward, then drain the remaining backwards. At most stages-stage micro-batches of
// activations are alive on a stage.
Schedule make_1f1b(int stages, int stage, int microbatches);
// GPipe: all forwards, then all backwards (in the same order); m micro-batches alive.
Schedule make_gpipe(int stages, int stage, int microbatches);
Schedule make_schedule(ScheduleKind kind, int stages, int stage, int microbatches);

// Largest number of micro-batches forwarded but not yet backwarded at any point.
int max_in_flight(const Schedule& s);
// max_in_flight(make_schedule(kind, stages, stage, microbatches)) in closed form: 1F1B
// min(stages - stage, m), GPipe m. The micro-batch slots a stage is built with.
int slots_in_flight(ScheduleKind kind, int stages, int stage, int microbatches);

// Runs every stage's list under loom's p2p semantics (sends never block; a forward on stage
// s>0 waits for stage s-1's forward of that micro-batch, a backward on stage s<last waits for
// stage s+1's backward). Returns "" when all stages finish, else a description of the stall.
std::string simulate_pipeline(const std::vector<Schedule>& stages);

}  // namespace loom
