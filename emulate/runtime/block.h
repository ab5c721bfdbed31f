// Internal to the CUDA emulator runtime: the running block, its threads (fibers) and warps.
#pragma once
#include <boost/context/fiber.hpp>
#include <vector>

#include "state.h"

namespace loom_emu::rt {

// Thrown at a thread's next barrier or warp intrinsic once the kernel has faulted: unwinds the
// thread (caught at the bottom of its fiber).
struct Abort {};

enum class State { Runnable, AtBarrier, AtWarp, Done, Abandoned };

struct Thread {
  detail::Coords coords;
  int linear = 0, warp = 0, lane = 0;
  State state = State::Runnable;
  boost::context::fiber fiber;  // the suspended thread
  boost::context::fiber back;   // the scheduler, while the thread runs
};

struct Warp {
  int lanes = 0, arrived = 0, exited = 0;
  uint32_t gen = 0;
  detail::WarpOp op[2];
  unsigned mask[2];
  uint64_t vals[2][32];
};

struct Reduction {
  int any = 0, all = 1, count = 0;
};

struct Block {
  const detail::LaunchInfo* info = nullptr;
  detail::ThreadFn fn = nullptr;
  void* closure = nullptr;
  uint3 idx{};
  int nthreads = 0, live = 0, exited = 0, arrived = 0;
  uint32_t gen = 0;
  Reduction red[2];
  std::vector<Thread>* threads = nullptr;
  std::vector<Warp> warps;
  bool aborting = false;
};

// The block being executed and the thread running in it (nullptr outside kernels).
extern Block* g_block;
extern Thread* g_thread;

// Suspends the running thread t and returns to the scheduler (scheduler.cpp).
inline void yield(Thread& t) { t.back = std::move(t.back).resume(); }

}  // namespace loom_emu::rt
