// Elastic restarts (scripts/elastic.sh, docs/elastic.md): the restart event of metrics.jsonl and
// the test hooks LOOM_FAULT_KILL_RANK (one rank dies) and LOOM_TRACE_SAMPLES (samples read).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>

#include "layout/run_layout.h"

namespace loom {

// Reads and checks the environment once: LOOM_FAULT_KILL_RANK=RANK:STEP,
// LOOM_TRACE_SAMPLES=PATH, LOOM_ELASTIC_ATTEMPT=N (>= 0). A malformed value throws UserError
// naming the variable; Trainer calls it at start-up, before any work.
void check_elastic_env();

// LOOM_FAULT_KILL_RANK=RANK:STEP: world rank RANK raises SIGKILL at the start of step STEP (as a
// lost node would end it: no message, no checkpoint). No effect on other ranks or steps.
void fault_kill_rank(int rank, int step);

// LOOM_TRACE_SAMPLES=PATH: appends one line per micro-batch this rank reads,
// "attempt A step S rank R dp D first F rows N" (A: LOOM_ELASTIC_ATTEMPT, 0 when unset).
void trace_samples(int step, int rank, int dp_rank, int64_t first, int rows);

// On a restart (LOOM_ELASTIC_ATTEMPT >= 1): {"event":"restart","attempt":N,"reason":...,
// "hosts":...,"ranks":world,"layout":{...},"step":S} with the reason and hosts that
// scripts/elastic.sh passes (LOOM_ELASTIC_REASON, LOOM_ELASTIC_HOSTS) and this run's layout.
// A null json otherwise.
nlohmann::ordered_json restart_event(const RunLayout& run, int world, int step);

}  // namespace loom
