// CUDA emulator: the intrinsics that synchronize threads: __syncthreads (and its _or, _and,
// _count forms) waits for every thread of the block, warp shuffles and votes for all 32 lanes.
#include <sstream>

#include "block.h"

namespace loom_emu::detail {

using namespace loom_emu::rt;

namespace {

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::ShflIdx:
      return "__shfl_sync";
    case WarpOp::ShflXor:
      return "__shfl_xor_sync";
    case WarpOp::ShflDown:
      return "__shfl_down_sync";
    case WarpOp::ShflUp:
      return "__shfl_up_sync";
    case WarpOp::Ballot:
      return "__ballot_sync";
    case WarpOp::Any:
      return "__any_sync";
    case WarpOp::All:
      return "__all_sync";
    case WarpOp::SyncWarp:
      return "__syncwarp";
    case WarpOp::WmmaLoad:
      return "wmma::load_matrix_sync";
    case WarpOp::WmmaStore:
      return "wmma::store_matrix_sync";
    case WarpOp::WmmaMma:
      return "wmma::mma_sync";
  }
  return "?";
}

}  // namespace

int barrier(int op, int pred) {
  Block& b = *g_block;
  Thread& t = *g_thread;
  if (b.aborting) throw Abort{};
  counters().barriers++;
  if (b.exited > 0) {
    kernel_fault(cudaErrorLaunchFailure,
                 "reaches __syncthreads after " + std::to_string(b.exited) +
                     " threads of its block have exited (every thread must reach it)");
    throw Abort{};
  }
  const uint32_t gen = b.gen;
  Reduction& r = b.red[gen & 1];
  r.any |= pred != 0;
  r.all &= pred != 0;
  r.count += pred != 0;
  if (++b.arrived == b.live) {  // the last thread: release the block
    b.arrived = 0;
    b.gen++;
    b.red[(gen + 1) & 1] = Reduction{};
    shared_new_epoch();
    for (int i = 0; i < b.nthreads; i++) {
      Thread& o = (*b.threads)[i];
      if (o.state == State::AtBarrier) o.state = State::Runnable;
    }
  } else {
    t.state = State::AtBarrier;
    yield(t);
    if (b.aborting) throw Abort{};
  }
  switch (op) {
    case 1:
      return r.any;
    case 2:
      return r.all;
    case 3:
      return r.count;
    default:
      return 0;
  }
}

uint64_t warp_exchange(WarpOp op, unsigned mask, uint64_t bits, int arg, int width) {
  Block& b = *g_block;
  Thread& t = *g_thread;
  if (b.aborting) throw Abort{};
  counters().warp_exchanges++;
  Warp& w = b.warps[t.warp];
  if (mask != 0xffffffffu || width != 32 || w.lanes != 32) {
    std::ostringstream os;
    os << "a warp intrinsic with mask 0x" << std::hex << mask << std::dec << ", width " << width
       << " in a warp of " << w.lanes
       << " threads (the emulator implements full 32-lane warps only)";
    kernel_fault(cudaErrorLaunchFailure, os.str());
    throw Abort{};
  }
  if (w.exited > 0) {
    kernel_fault(cudaErrorLaunchFailure, "a warp intrinsic names lanes that have exited");
    throw Abort{};
  }
  const int buf = (int)(w.gen & 1);
  if (w.arrived == 0) {
    w.op[buf] = op;
    w.mask[buf] = mask;
  } else if (w.op[buf] != op || w.mask[buf] != mask) {
    kernel_fault(cudaErrorLaunchFailure,
                 std::string("lanes of one warp are at different warp intrinsics (divergent "
                             "code): this lane at ") +
                     op_name(op) + ", others at " + op_name(w.op[buf]));
    throw Abort{};
  }
  w.vals[buf][t.lane] = bits;
  if (++w.arrived == w.lanes) {  // the last lane: the exchange is complete
    w.arrived = 0;
    w.gen++;
    if (op == WarpOp::SyncWarp) shared_warp_sync(t.warp);
    for (int l = 0; l < w.lanes; l++) {
      Thread& o = (*b.threads)[t.warp * 32 + l];
      if (o.state == State::AtWarp) o.state = State::Runnable;
    }
  } else {
    t.state = State::AtWarp;
    yield(t);
    if (b.aborting) throw Abort{};
  }
  const uint64_t* v = w.vals[buf];
  const int lane = t.lane;
  switch (op) {
    case WarpOp::ShflIdx:
      return v[((arg % 32) + 32) % 32];
    case WarpOp::ShflXor:
      return v[(lane ^ arg) & 31];
    case WarpOp::ShflDown:
      return lane + arg < 32 ? v[lane + arg] : v[lane];
    case WarpOp::ShflUp:
      return lane - arg >= 0 ? v[lane - arg] : v[lane];
    case WarpOp::SyncWarp:
    case WarpOp::WmmaLoad:
    case WarpOp::WmmaStore:
    case WarpOp::WmmaMma:
      return v[0];
    default:
      break;
  }
  unsigned ballot = 0;
  for (int l = 0; l < 32; l++) ballot |= (v[l] ? 1u : 0u) << l;
  if (op == WarpOp::Ballot) return ballot;
  if (op == WarpOp::Any) return ballot != 0;
  return ballot == 0xffffffffu;  // WarpOp::All
}

}  // namespace loom_emu::detail
