// CUDA emulator: races on device (global) memory within one kernel launch. The blocks of a grid
// run in no defined order on a GPU, and the threads of a block are ordered only by
// __syncthreads; the emulator runs them one after another, so such a race would go unseen.
// Each 2-byte unit of the arena remembers its last writer and its readers (block, thread,
// barrier interval) in the current launch; a read or write that conflicts with an access not
// ordered before it is reported. Atomics are not tracked here.
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>

#include "state.h"

namespace loom_emu::rt {
namespace {

struct Cell {
  uint32_t wblock, rblock;    // block serials (0: none); < the launch's first: earlier launch
  uint16_t wthread, rthread;  // linear thread index, plus the flags below on rthread
  uint16_t wepoch, repoch;    // barrier interval of the access within its block
};
constexpr uint16_t kThreadMask = 0x3ff;
constexpr uint16_t kMultiThread = 0x8000;  // several threads of rblock read in repoch
constexpr uint16_t kMultiBlock = 0x4000;   // several blocks read in this launch

Cell* g_cells = nullptr;
uintptr_t g_lo = 0;
uint32_t g_first = 1, g_block = 0;
uint16_t g_epoch = 0;
dim3 g_grid, g_blockdim;

std::string block_name(uint32_t serial) {
  const uint32_t i = serial - g_first;
  return "(" + std::to_string(i % g_grid.x) + "," + std::to_string((i / g_grid.x) % g_grid.y) +
         "," + std::to_string(i / (g_grid.x * g_grid.y)) + ")";
}

std::string thread_name(uint16_t linear) {
  const unsigned l = linear & kThreadMask, bx = g_blockdim.x, by = g_blockdim.y;
  return "(" + std::to_string(l % bx) + "," + std::to_string((l / bx) % by) + "," +
         std::to_string(l / (bx * by)) + ")";
}

[[noreturn]] void race(bool write, uintptr_t a, size_t size, const char* other_verb,
                       uint32_t other_block, uint16_t other_thread) {
  std::string other = other_thread & kMultiBlock ? std::string("threads of several blocks")
                                                 : "thread " + thread_name(other_thread) +
                                                       " of block " + block_name(other_block);
  kernel_fault(cudaErrorLaunchFailure,
               std::string("global-memory race: this thread ") + (write ? "writes" : "reads") +
                   " the " + std::to_string(size) + " bytes at " + describe_address(a) + " that " +
                   other + " " + other_verb +
                   " in the same launch (blocks are not ordered; threads of a block only by "
                   "__syncthreads)");
  abandon_thread();
}

void unit(uintptr_t u, uintptr_t a, size_t size, bool write) {
  Cell& c = g_cells[(u - g_lo) >> 1];
  const uint16_t t = (uint16_t)running_thread();
  const uint32_t b = g_block;
  const uint16_t e = g_epoch;
  if (c.wblock >= g_first && !(c.wblock == b && (c.wthread == t || c.wepoch < e)))
    race(write, a, size, "wrote", c.wblock, c.wthread);
  const bool read_here = c.rblock >= g_first;
  if (write) {
    if (read_here) {
      const bool multi = c.rthread & kMultiThread;
      if ((c.rthread & kMultiBlock) || c.rblock != b ||
          (c.repoch == e && (multi || (c.rthread & kThreadMask) != t)))
        race(true, a, size, "read", c.rblock, c.rthread);
    }
    c.wblock = b;
    c.wthread = t;
    c.wepoch = e;
    return;
  }
  if (!read_here) {
    c.rblock = b;
    c.rthread = t;
    c.repoch = e;
  } else if (c.rblock != b) {
    c.rthread |= kMultiBlock;
  } else if (e > c.repoch && !(c.rthread & kMultiBlock)) {
    c.repoch = e;  // the earlier readers are ordered before anything from here on
    c.rthread = t;
  } else if (e == c.repoch && (c.rthread & kThreadMask) != t) {
    c.rthread |= kMultiThread;
  }
}

}  // namespace

void races_new_launch(uint32_t first_block_serial, dim3 grid, dim3 block) {
  if (!g_cells) {
    g_lo = arena_lo();
    const size_t bytes = arena_bytes() / 2 * sizeof(Cell);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "loom CUDA emulator: cannot reserve the race shadow\n");
      std::abort();
    }
    g_cells = static_cast<Cell*>(p);
  }
  g_first = first_block_serial;
  g_grid = grid;
  g_blockdim = block;
}

void races_new_block(uint32_t serial) {
  g_block = serial;
  g_epoch = 0;
}

void races_new_epoch() { g_epoch++; }

void global_access(uintptr_t a, size_t size, bool write) {
  for (uintptr_t u = a & ~uintptr_t(1); u < a + size; u += 2) unit(u, a, size, write);
}

}  // namespace loom_emu::rt
