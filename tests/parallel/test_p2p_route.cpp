// The routing of device pipeline transfers on a ring (parallel/p2p_route.h), for rings of 2..5:
// every send has one lane its receiver listens on, and no lane is both send and receive on a rank.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "parallel/p2p_route.h"

namespace loom {
namespace {

constexpr Ring kWays[] = {Ring::Next, Ring::Prev};

TEST(P2PRoute, NeighboursWrapAround) {
  EXPECT_EQ(ring_peer(0, Ring::Next, 2), 1);
  EXPECT_EQ(ring_peer(1, Ring::Next, 2), 0);  // the wrap: last stage to the first
  EXPECT_EQ(ring_peer(0, Ring::Prev, 2), 1);
  EXPECT_EQ(ring_peer(4, Ring::Next, 5), 0);
  EXPECT_EQ(ring_peer(0, Ring::Prev, 5), 4);
  EXPECT_EQ(ring_peer(2, Ring::Prev, 5), 1);
  EXPECT_EQ(ring_peer(0, Ring::Next, 1), 0);
}

TEST(P2PRoute, NeighboursHaveDifferentColours) {
  for (int n = 2; n <= 7; ++n)
    for (int r = 0; r < n; ++r) {
      EXPECT_NE(ring_color(r, n), ring_color(ring_peer(r, Ring::Next, n), n)) << r << " of " << n;
      EXPECT_GE(ring_color(r, n), 0);
      EXPECT_LE(ring_color(r, n), 2);
    }
  EXPECT_EQ(ring_color(4, 5), 2);  // odd ring: 0 1 0 1 2
  EXPECT_EQ(ring_color(3, 4), 1);  // even ring: parity
}

// Every transfer (sender, way) on a ring of n: the lane it is sent on.
struct Traffic {
  std::map<int, std::set<int>> sends, receives;          // rank -> lanes
  std::map<std::pair<int, int>, std::set<int>> senders;  // (receiver, lane) -> senders
  std::set<int> used;
};

Traffic traffic(int n) {
  Traffic t;
  for (int a = 0; a < n; ++a)
    for (Ring way : kWays) {
      const int b = ring_peer(a, way, n), lane = p2p_lane(a, way, n);
      EXPECT_EQ(lane_way(lane), way);
      t.sends[a].insert(lane);
      t.receives[b].insert(lane);
      t.senders[{b, lane}].insert(a);
      t.used.insert(lane);
    }
  return t;
}

TEST(P2PRoute, NoLaneIsBothSendAndReceiveOnARank) {
  for (int n = 2; n <= 5; ++n) {
    const Traffic t = traffic(n);
    for (int r = 0; r < n; ++r)
      for (int lane : t.sends.at(r))
        EXPECT_EQ(t.receives.at(r).count(lane), 0u)
            << "ring of " << n << ": rank " << r << " sends and receives on lane " << lane;
  }
}

// On a lane a rank receives from one peer only, so the lane's order at the receiver is that
// peer's send order (one FIFO per pair and way).
TEST(P2PRoute, EachLaneReceivesFromOnePeer) {
  for (int n = 2; n <= 5; ++n)
    for (const auto& [key, from] : traffic(n).senders)
      EXPECT_EQ(from.size(), 1u) << "ring of " << n << ": rank " << key.first << ", lane "
                                 << key.second;
}

// The lanes made (p2p_lane_used) are exactly those some transfer uses: 4 on even rings, 6 on odd.
TEST(P2PRoute, LanesMadeAreTheLanesUsed) {
  for (int n = 2; n <= 5; ++n) {
    const Traffic t = traffic(n);
    for (int lane = 0; lane < kP2PLanes; ++lane)
      EXPECT_EQ(p2p_lane_used(lane, n), t.used.count(lane) == 1)
          << "ring of " << n << ", lane " << lane;
    EXPECT_EQ(t.used.size(), n % 2 ? 6u : 4u) << "ring of " << n;
  }
  EXPECT_FALSE(p2p_lane_used(0, 1));
}

// Parity alone (the colour of a chain) fails on an odd ring: the last rank and rank 0 are both
// even, so rank 0 would receive the wrap on the lane it sends on. The third colour prevents it.
TEST(P2PRoute, OddRingNeedsTheThirdColour) {
  for (int n : {3, 5}) {
    EXPECT_EQ((n - 1) % 2, 0);
    EXPECT_NE(p2p_lane(n - 1, Ring::Next, n), p2p_lane(0, Ring::Next, n));
    EXPECT_NE(p2p_lane(0, Ring::Prev, n), p2p_lane(n - 1, Ring::Prev, n));
  }
}

}  // namespace
}  // namespace loom
