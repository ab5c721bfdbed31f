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

Schedule make_interleaved(int P, int stage, int m, int v) {
  LOOM_CHECK(P >= 1 && stage >= 0 && stage < P && m >= 1 && v >= 1, "interleaved(", P, ", ", stage,
             ", ", m, ", ", v, ")");
  if (v == 1) return make_1f1b(P, stage, m);
  LOOM_CHECK(m % P == 0, "interleaved 1F1B needs the micro-batches (", m,
             ") to be a multiple of the stages (", P, ")");
  const int total = m * v, group = P * v;
  // The k-th forward (backward) of this stage: its micro-batch and chunk.
  auto mb = [&](int k) { return (k / group) * P + k % P; };
  auto fwd = [&](int k) { return PipeAction{PipeOp::Forward, mb(k), (k % group) / P}; };
  auto bwd = [&](int k) { return PipeAction{PipeOp::Backward, mb(k), v - 1 - (k % group) / P}; };
  const int warmup = m == P ? total : std::min((P - stage - 1) * 2 + (v - 1) * P, total);
  Schedule s;
  for (int k = 0; k < warmup; ++k) s.push_back(fwd(k));
  for (int i = 0; i < total - warmup; ++i) {
    s.push_back(fwd(warmup + i));
    s.push_back(bwd(i));
  }
  for (int k = total - warmup; k < total; ++k) s.push_back(bwd(k));
  return s;
}

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "1f1b") return ScheduleKind::OneFOneB;
  if (name == "gpipe") return ScheduleKind::GPipe;
  throw UserError(str("parallel.schedule: unknown schedule '", name, "'; use 1f1b or gpipe"));
}

const char* schedule_name(ScheduleKind k) { return k == ScheduleKind::GPipe ? "gpipe" : "1f1b"; }

Schedule make_schedule(ScheduleKind kind, int stages, int stage, int m, int v) {
  LOOM_CHECK(v == 1 || kind == ScheduleKind::OneFOneB,
             "virtual pipeline stages need the 1f1b schedule");
  if (kind == ScheduleKind::GPipe) return make_gpipe(stages, stage, m);
  return make_interleaved(stages, stage, m, v);
}

int slots_in_flight(ScheduleKind kind, int stages, int stage, int m) {
  return kind == ScheduleKind::GPipe ? m : std::min(stages - stage, m);
}

std::vector<int> chunk_slots(ScheduleKind kind, int stages, int stage, int m, int v) {
  if (v == 1) return {slots_in_flight(kind, stages, stage, m)};
  const Schedule s = make_schedule(kind, stages, stage, m, v);
  std::vector<int> out;
  for (int c = 0; c < v; ++c) out.push_back(max_in_flight(s, c));
  return out;
}

int max_in_flight(const Schedule& s, int chunk) {
  int alive = 0, peak = 0;
  for (const PipeAction& a : s) {
    if (chunk >= 0 && a.chunk != chunk) continue;
    alive += a.op == PipeOp::Forward ? 1 : -1;
    peak = std::max(peak, alive);
  }
  return peak;
}

std::string simulate_pipeline(const std::vector<Schedule>& stages, int v) {
  const size_t P = stages.size(), G = P * size_t(v);  // G global chunks
  size_t m = 0;
  for (const auto& s : stages)
    for (const auto& a : s) m = std::max(m, size_t(a.mb) + 1);
  std::vector<size_t> next(P, 0);  // next action of each stage
  // Done flags per global chunk and micro-batch.
  std::vector<std::vector<char>> fwd(G, std::vector<char>(m, 0)), bwd = fwd;
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t s = 0; s < P; ++s) {
      for (; next[s] < stages[s].size(); ++next[s], progress = true) {
        const PipeAction& a = stages[s][next[s]];
        const size_t mb = size_t(a.mb), g = size_t(a.chunk) * P + s;
        LOOM_CHECK(a.chunk >= 0 && a.chunk < v, "action of chunk ", a.chunk, " with v=", v);
        bool ready = a.op == PipeOp::Forward ? (g == 0 || fwd[g - 1][mb])
                                             : (fwd[g][mb] && (g + 1 == G || bwd[g + 1][mb]));
        if (!ready) break;
        (a.op == PipeOp::Forward ? fwd : bwd)[g][mb] = 1;
      }
    }
  }
  for (size_t s = 0; s < P; ++s)
    if (next[s] < stages[s].size()) {
      const PipeAction& a = stages[s][next[s]];
      return str("stage ", s, " stalls at action ", next[s], " (",
                 a.op == PipeOp::Forward ? "forward" : "backward", " of micro-batch ", a.mb,
                 ", chunk ", a.chunk, ")");
    }
  return "";
}

}  // namespace loom
