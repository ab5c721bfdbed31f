// Ring neighbours, colours and p2p lanes (pure functions).
#include "parallel/p2p_route.h"

#include "core/check.h"

namespace loom {

int ring_peer(int rank, Ring way, int n) {
  LOOM_CHECK(n >= 1 && rank >= 0 && rank < n, "ring_peer: rank ", rank, " of ", n);
  return way == Ring::Next ? (rank + 1) % n : (rank + n - 1) % n;
}

int ring_color(int rank, int n) {
  LOOM_CHECK(n >= 2 && rank >= 0 && rank < n, "ring_color: rank ", rank, " of ", n);
  return n % 2 == 1 && rank == n - 1 ? 2 : rank % 2;
}

int p2p_lane(int sender, Ring way, int n) {
  return (way == Ring::Next ? 0 : 3) + ring_color(sender, n);
}

bool p2p_lane_used(int lane, int n) {
  if (n < 2 || lane < 0 || lane >= kP2PLanes) return false;
  return lane % 3 < 2 || n % 2 == 1;
}

}  // namespace loom
