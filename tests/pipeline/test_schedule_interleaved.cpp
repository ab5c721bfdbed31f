// Interleaved 1F1B: Megatron's action lists, per-chunk order and in-flight bounds, no deadlock
// for many (stages, chunks, micro-batches), and the bubble of a unit-time run.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "core/check.h"
#include "layout/schedule.h"

namespace loom {
namespace {

PipeAction F(int mb, int c) { return {PipeOp::Forward, mb, c}; }
PipeAction B(int mb, int c) { return {PipeOp::Backward, mb, c}; }

TEST(Interleaved, ActionListsOfTwoStagesTwoChunks) {
  // pp 2, v 2, m 4: forwards in groups of 2 micro-batches per chunk (0,1 of chunk 0, 0,1 of
  // chunk 1, 2,3 of chunk 0, ...), backwards the same with the chunks reversed. Stage 0 warms
  // up with (2-0-1)*2 + (2-1)*2 = 4 forwards, stage 1 with 2.
  EXPECT_EQ(make_interleaved(2, 0, 4, 2),
            (Schedule{F(0, 0), F(1, 0), F(0, 1), F(1, 1), F(2, 0), B(0, 1), F(3, 0), B(1, 1),
                      F(2, 1), B(0, 0), F(3, 1), B(1, 0), B(2, 1), B(3, 1), B(2, 0), B(3, 0)}));
  EXPECT_EQ(make_interleaved(2, 1, 4, 2),
            (Schedule{F(0, 0), F(1, 0), F(0, 1), B(0, 1), F(1, 1), B(1, 1), F(2, 0), B(0, 0),
                      F(3, 0), B(1, 0), F(2, 1), B(2, 1), F(3, 1), B(3, 1), B(2, 0), B(3, 0)}));
  // v = 1 is plain 1F1B.
  EXPECT_EQ(make_interleaved(4, 1, 6, 1), make_1f1b(4, 1, 6));
  EXPECT_EQ(make_schedule(ScheduleKind::OneFOneB, 4, 1, 6, 1), make_1f1b(4, 1, 6));
}

TEST(Interleaved, RefusesWhatItCannotRun) {
  EXPECT_THROW(make_interleaved(2, 0, 3, 2), InternalError);  // m % pp != 0
  EXPECT_THROW(make_schedule(ScheduleKind::GPipe, 2, 0, 4, 2), InternalError);
}

// Every (micro-batch, chunk) forwarded once, then backwarded once; within a chunk both in
// micro-batch order (the slot of micro-batch mb is mb % slots).
void expect_well_formed(const Schedule& s, int m, int v) {
  ASSERT_EQ(int(s.size()), 2 * m * v);
  std::map<std::pair<int, int>, int> f, b;  // (chunk, mb) -> position
  std::vector<int> last_f(size_t(v), -1), last_b(size_t(v), -1);
  for (int i = 0; i < int(s.size()); ++i) {
    const PipeAction& a = s[size_t(i)];
    ASSERT_TRUE(a.chunk >= 0 && a.chunk < v && a.mb >= 0 && a.mb < m);
    auto& seen = a.op == PipeOp::Forward ? f : b;
    ASSERT_EQ(seen.count({a.chunk, a.mb}), 0u);
    seen[{a.chunk, a.mb}] = i;
    int& prev = (a.op == PipeOp::Forward ? last_f : last_b)[size_t(a.chunk)];
    ASSERT_EQ(a.mb, prev + 1) << "chunk " << a.chunk << " out of order at " << i;
    prev = a.mb;
    if (a.op == PipeOp::Backward) {
      ASSERT_LT(f.at({a.chunk, a.mb}), i);
    }
  }
}

TEST(Interleaved, WellFormedNoDeadlockAndInFlightBound) {
  int cases = 0;
  for (int P = 2; P <= 8; ++P)
    for (int v = 2; v <= 4; ++v)
      for (int m = P; m <= 4 * P; m += P) {
        SCOPED_TRACE("P=" + std::to_string(P) + " v=" + std::to_string(v) +
                     " m=" + std::to_string(m));
        std::vector<Schedule> all;
        for (int s = 0; s < P; ++s) {
          all.push_back(make_interleaved(P, s, m, v));
          expect_well_formed(all.back(), m, v);
          // Megatron's warm-up, plus the one forward of the first steady step: the activations
          // of that many (micro-batch, chunk) pairs are alive at most.
          const int warm = m == P ? m * v : std::min((P - s - 1) * 2 + (v - 1) * P, m * v);
          EXPECT_EQ(max_in_flight(all.back()), std::min(warm + 1, m * v)) << "stage " << s;
          const std::vector<int> slots = chunk_slots(ScheduleKind::OneFOneB, P, s, m, v);
          ASSERT_EQ(int(slots.size()), v);
          for (int c = 0; c < v; ++c) {
            EXPECT_EQ(slots[size_t(c)], max_in_flight(all.back(), c));
            EXPECT_GE(slots[size_t(c)], 1);
            EXPECT_LE(slots[size_t(c)], m);
          }
        }
        EXPECT_EQ(simulate_pipeline(all, v), "");
        ++cases;
      }
  EXPECT_EQ(cases, 7 * 3 * 4);
}

TEST(Interleaved, SimulatorFollowsChunksAcrossTheWrap) {
  // pp 2, v 2: chunk 1 on stage 0 (global chunk 2) needs stage 1's chunk 0 (global 1) first;
  // a stage 0 that runs it before stage 1 can have forwarded stalls.
  std::vector<Schedule> bad = {{F(0, 1), F(0, 0), B(0, 1), B(0, 0)},
                               {F(0, 0), F(0, 1), B(0, 1), B(0, 0)}};
  EXPECT_NE(simulate_pipeline(bad, 2), "");
  std::vector<Schedule> good = {{F(0, 0), F(0, 1), B(0, 1), B(0, 0)},
                                {F(0, 0), F(0, 1), B(0, 1), B(0, 0)}};
  EXPECT_EQ(simulate_pipeline(good, 2), "");
}

// Makespan of a run where a chunk's forward takes f and its backward b time units and
// transfers are free: each stage runs its actions in order, each as soon as its input is there.
double makespan(const std::vector<Schedule>& st, int v, double f, double b) {
  const size_t P = st.size();
  std::map<std::tuple<int, int, int>, double> done;  // (op, global chunk, mb) -> end time
  std::vector<size_t> next(P, 0);
  std::vector<double> clock(P, 0.0);
  const int G = int(P) * v;
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t s = 0; s < P; ++s)
      for (; next[s] < st[s].size(); ++next[s], progress = true) {
        const PipeAction& a = st[s][next[s]];
        const int g = a.chunk * int(P) + int(s);
        const bool fw = a.op == PipeOp::Forward;
        const auto dep = fw ? std::make_tuple(0, g - 1, a.mb) : std::make_tuple(1, g + 1, a.mb);
        const bool none = fw ? g == 0 : g + 1 == G;
        double ready = clock[s];
        if (!none) {
          auto it = done.find(dep);
          if (it == done.end()) break;
          ready = std::max(ready, it->second);
        }
        clock[s] = ready + (fw ? f : b);
        done[{fw ? 0 : 1, g, a.mb}] = clock[s];
      }
  }
  return *std::max_element(clock.begin(), clock.end());
}

TEST(Interleaved, BubbleShrinksByTheChunkCount) {
  // A stage's whole work per micro-batch is 1 (forward) + 2 (backward), split evenly over its v
  // chunks. The ideal bubble is (P-1)/(v*m) of the m*3 busy time; the schedule reaches it.
  for (int P : {2, 4})
    for (int v : {1, 2, 4})
      for (int m : {P, 2 * P, 4 * P}) {
        std::vector<Schedule> all;
        for (int s = 0; s < P; ++s) all.push_back(make_interleaved(P, s, m, v));
        const double busy = 3.0 * m, span = makespan(all, v, 1.0 / v, 2.0 / v);
        EXPECT_NEAR((span - busy) / busy, double(P - 1) / (v * m), 1e-9)
            << "P=" << P << " v=" << v << " m=" << m;
      }
}

}  // namespace
}  // namespace loom
