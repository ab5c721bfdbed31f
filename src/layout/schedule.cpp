// Schedule generators and the all-stages simulator.
#include "layout/schedule.h"

#include <algorithm>

#include "core/check.h"

namespace loom {

Schedule make_1f1b(int stages, int stage, int m) {
  LOOM_CHECK(stages >= 1 && stage >= 0 && stage < stages && m >= 1, "1f1b(", stages, ", ", stage,
             ", ", m, ")");
  int warmup = std::min(stages - stage - 1, m);
  Schedule s;
  for (int i = 0; i < warmup; ++i) s.push_back({PipeOp::Forward, i});
  for (int i = 0; i < m - warmup; ++i) {
    s.push_back({PipeOp::Forward, warmup + i});
    s.push_back({PipeOp::Backward, i});
  }
  for (int i = m - warmup; i < m; ++i) s.push_back({PipeOp::Backward, i});
  return s;
}

Schedule make_gpipe(int stages, int stage, int m) {
  LOOM_CHECK(stages >= 1 && stage >= 0 && stage < stages && m >= 1, "gpipe(", stages, ", ", stage,
             ", ", m, ")");
  Schedule s;
  for (int i = 0; i < m; ++i) s.push_back({PipeOp::Forward, i});
  for (int i = 0; i < m; ++i) s.push_back({PipeOp::Backward, i});
  return s;
}

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "1f1b") return ScheduleKind::OneFOneB;
  if (name == "gpipe") return ScheduleKind::GPipe;
  throw UserError(str("parallel.schedule: unknown schedule '", name, "'; use 1f1b or gpipe"));
}

const char* schedule_name(ScheduleKind k) { return k == ScheduleKind::GPipe ? "gpipe" : "1f1b"; }

Schedule make_schedule(ScheduleKind kind, int stages, int stage, int m) {
  return kind == ScheduleKind::GPipe ? make_gpipe(stages, stage, m) : make_1f1b(stages, stage, m);
}

int slots_in_flight(ScheduleKind kind, int stages, int stage, int m) {
  return kind == ScheduleKind::GPipe ? m : std::min(stages - stage, m);
}

int max_in_flight(const Schedule& s) {
  int alive = 0, peak = 0;
  for (const PipeAction& a : s) {
    alive += a.op == PipeOp::Forward ? 1 : -1;
    peak = std::max(peak, alive);
  }
  return peak;
}

std::string simulate_pipeline(const std::vector<Schedule>& stages) {
  const size_t P = stages.size();
  size_t m = 0;
  for (const auto& s : stages)
    for (const auto& a : s) m = std::max(m, size_t(a.mb) + 1);
  std::vector<size_t> next(P, 0);  // next action of each stage
  std::vector<std::vector<char>> fwd(P, std::vector<char>(m, 0)), bwd = fwd;  // done flags
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t s = 0; s < P; ++s) {
      for (; next[s] < stages[s].size(); ++next[s], progress = true) {
        const PipeAction& a = stages[s][next[s]];
        const size_t mb = size_t(a.mb);
        bool ready = a.op == PipeOp::Forward ? (s == 0 || fwd[s - 1][mb])
                                             : (fwd[s][mb] && (s + 1 == P || bwd[s + 1][mb]));
        if (!ready) break;
        (a.op == PipeOp::Forward ? fwd : bwd)[s][mb] = 1;
      }
    }
  }
  for (size_t s = 0; s < P; ++s)
    if (next[s] < stages[s].size()) {
      const PipeAction& a = stages[s][next[s]];
      return str("stage ", s, " stalls at action ", next[s], " (",
                 a.op == PipeOp::Forward ? "forward" : "backward", " of micro-batch ", a.mb, ")");
    }
  return "";
}

}  // namespace loom
