// Routing of device point-to-point transfers on a ring: which lane (communicator) carries each.
#pragma once
#include "parallel/comm.h"

namespace loom {

// The neighbour of `rank` on a ring of n ranks the way `way` goes ((rank +- 1) mod n).
int ring_peer(int rank, Ring way, int n);

// A colour per rank such that ring neighbours differ: rank % 2, and 2 for the last rank of an odd
// ring (whose successor, rank 0, is even too). Needs n >= 2.
int ring_color(int rank, int n);

// Device p2p has no tags, and one communicator must never carry both a rank's sends (send
// stream) and its receives (compute stream; parallel/nccl_p2p.cpp). So each way has one lane
// per sender colour: lane = way * 3 + colour of the sender, kP2PLanes in all. A rank sends on
// the lanes of its own colour and receives on those of its neighbours' colours, which differ
// from its own: on every rank each lane is send-only, receive-only or idle.
constexpr int kP2PLanes = 6;
int p2p_lane(int sender, Ring way, int n);
// Whether some rank of a ring of n sends on `lane` (colour 2 exists on odd rings only).
bool p2p_lane_used(int lane, int n);
// The way of a lane.
inline Ring lane_way(int lane) { return lane < 3 ? Ring::Next : Ring::Prev; }

}  // namespace loom
