// Pipeline schedules: exact action lists, warm-up counts, in-flight bounds, no deadlock.
#include <gtest/gtest.h>

#include <algorithm>

#include "layout/schedule.h"

namespace loom {
namespace {

const PipeAction F(int mb) { return {PipeOp::Forward, mb}; }
const PipeAction B(int mb) { return {PipeOp::Backward, mb}; }

TEST(Schedule, OneFOneBActionListsOfFourStages) {
  // 4 stages, 6 micro-batches: stage s warms up with 3-s forwards.
  EXPECT_EQ(make_1f1b(4, 0, 6),
            (Schedule{F(0), F(1), F(2), F(3), B(0), F(4), B(1), F(5), B(2), B(3), B(4), B(5)}));
  EXPECT_EQ(make_1f1b(4, 2, 6),
            (Schedule{F(0), F(1), B(0), F(2), B(1), F(3), B(2), F(4), B(3), F(5), B(4), B(5)}));
  EXPECT_EQ(make_1f1b(4, 3, 6),
            (Schedule{F(0), B(0), F(1), B(1), F(2), B(2), F(3), B(3), F(4), B(4), F(5), B(5)}));
  // Fewer micro-batches than stages: warm-up is capped by m.
  EXPECT_EQ(make_1f1b(4, 0, 2), (Schedule{F(0), F(1), B(0), B(1)}));
}

TEST(Schedule, GPipeIsAllForwardsThenAllBackwards) {
  EXPECT_EQ(make_gpipe(2, 1, 3), (Schedule{F(0), F(1), F(2), B(0), B(1), B(2)}));
}

TEST(Schedule, EveryMicroBatchOnceForwardThenBackward) {
  for (int P = 1; P <= 8; ++P)
    for (int m = 1; m <= 16; ++m)
      for (int s = 0; s < P; ++s)
        for (const Schedule& sch : {make_1f1b(P, s, m), make_gpipe(P, s, m)}) {
          ASSERT_EQ(int(sch.size()), 2 * m);
          std::vector<int> f(size_t(m), -1), b(size_t(m), -1);
          for (size_t i = 0; i < sch.size(); ++i)
            (sch[i].op == PipeOp::Forward ? f : b)[size_t(sch[i].mb)] = int(i);
          for (int j = 0; j < m; ++j) {
            ASSERT_GE(f[size_t(j)], 0);
            ASSERT_GT(b[size_t(j)], f[size_t(j)]);
            if (j) {
              ASSERT_GT(b[size_t(j)], b[size_t(j - 1)]);  // backwards in FIFO order
            }
          }
        }
}

TEST(Schedule, InFlightBound) {
  for (int P = 1; P <= 8; ++P)
    for (int m = 1; m <= 16; ++m)
      for (int s = 0; s < P; ++s) {
        EXPECT_EQ(max_in_flight(make_1f1b(P, s, m)), std::min(P - s, m))
            << P << " " << s << " " << m;
        EXPECT_EQ(max_in_flight(make_gpipe(P, s, m)), m);
      }
}

TEST(Schedule, NoDeadlockUpTo8StagesAnd16MicroBatches) {
  for (ScheduleKind kind : {ScheduleKind::OneFOneB, ScheduleKind::GPipe})
    for (int P = 1; P <= 8; ++P)
      for (int m = 1; m <= 16; ++m) {
        std::vector<Schedule> all;
        for (int s = 0; s < P; ++s) all.push_back(make_schedule(kind, P, s, m));
        EXPECT_EQ(simulate_pipeline(all), "") << schedule_name(kind) << " P=" << P << " m=" << m;
      }
}

TEST(Schedule, SimulatorDetectsADeadlock) {
  // Stage 1 wants the backward of micro-batch 1 first, but stage 0 never forwarded it yet
  // and stage 0 waits for backward 0: a cycle.
  std::vector<Schedule> bad = {{F(0), B(0), F(1), B(1)}, {F(1), B(1), F(0), B(0)}};
  EXPECT_NE(simulate_pipeline(bad), "");
}

}  // namespace
}  // namespace loom
