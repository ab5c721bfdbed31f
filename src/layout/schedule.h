// Pipeline schedules as pure action lists per stage (no MPI): 1F1B, GPipe and interleaved 1F1B
// over virtual stages (model chunks), plus a simulator of all stages used by tests to prove
// deadlock-freedom and in-flight bounds.
#pragma once
#include <string>
#include <vector>

namespace loom {

enum class PipeOp { Forward, Backward };
struct PipeAction {
  PipeOp op;
  int mb;         // micro-batch index in [0, microbatches)
  int chunk = 0;  // virtual stage on this rank in [0, v): global chunk chunk * stages + stage
  bool operator==(const PipeAction& o) const {
    return op == o.op && mb == o.mb && chunk == o.chunk;
  }
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
// Interleaved 1F1B (Megatron-LM) with v chunks per stage; needs m % stages == 0. The m*v
// (micro-batch, chunk) forwards run in groups of `stages` micro-batches per chunk: forward k
// is chunk (k % (stages*v)) / stages of micro-batch (k / (stages*v)) * stages + k % stages;
// backward k the same with the chunks reversed. Warm-up: (stages-stage-1)*2 + (v-1)*stages
// forwards (capped at m*v; all of them when m == stages), then one forward and one backward
// each, then the remaining backwards. v == 1 is make_1f1b.
Schedule make_interleaved(int stages, int stage, int microbatches, int v);
// v > 1 needs kind 1f1b (InternalError otherwise; validate() reports it first).
Schedule make_schedule(ScheduleKind kind, int stages, int stage, int microbatches, int v = 1);

// Largest number of micro-batches forwarded but not yet backwarded at any point (of one chunk
// when chunk >= 0, of all chunks together when -1).
int max_in_flight(const Schedule& s, int chunk = -1);
// max_in_flight(make_schedule(kind, stages, stage, microbatches)) in closed form: 1F1B
// min(stages - stage, m), GPipe m. The micro-batch slots a stage is built with (v == 1).
int slots_in_flight(ScheduleKind kind, int stages, int stage, int microbatches);
// The slots of each chunk: max_in_flight(schedule, c) for c < v (v == 1: {slots_in_flight}).
std::vector<int> chunk_slots(ScheduleKind kind, int stages, int stage, int microbatches, int v);

// Runs every stage's list under loom's p2p semantics (sends never block; a forward of global
// chunk g > 0 waits for the forward of chunk g-1 of that micro-batch on stage (s-1) mod P, a
// backward of chunk g < P*v-1 for the backward of chunk g+1). Returns "" when all stages
// finish, else a description of the stall.
std::string simulate_pipeline(const std::vector<Schedule>& stages, int v = 1);

}  // namespace loom
