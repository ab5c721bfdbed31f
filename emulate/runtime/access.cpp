// CUDA emulator: the per-access checks of kernel code. The .cu files are compiled with GCC's
// ThreadSanitizer instrumentation (-fsanitize=thread) but linked against these hooks instead of
// libtsan: every load and store of kernel code reaches them with its address and size.
// Device memory: inside a live allocation and naturally aligned. Shared memory: naturally
// aligned, written in this block before it is read, and no race: per barrier interval (epoch)
// each 4-byte word remembers its writer and readers, and a read of a word another thread wrote,
// or a write of a word another thread read or wrote, in the same interval is reported, unless
// both threads are lanes of one warp and a __syncwarp of that warp lies between the two.
#include <sys/mman.h>

#include <sstream>
#include <vector>

#include "state.h"

namespace loom_emu::rt {
namespace {

// Bits of Cell::flags.
constexpr uint8_t kInit = 1;       // written by this block
constexpr uint8_t kWrite = 2;      // written in this epoch (by `writer`)
constexpr uint8_t kRead = 4;       // read in this epoch (by `reader`)
constexpr uint8_t kMultiRead = 8;  // read by more than one thread in this epoch
constexpr uint8_t kAtomic = 16;    // the epoch's writes were atomic
constexpr uint16_t kManyThreads = 0xffff;

struct Cell {
  uint32_t block;  // serial of the block the flags belong to
  uint32_t epoch;
  uint32_t wsync, rsync;  // the writer's warp's __syncwarp count at the write; the readers' at
                          // the last read
  uint16_t writer, reader;
  uint16_t rwarp;  // the warp of every reader, or kManyThreads
  uint8_t flags;
};

bool g_active = false;
uintptr_t g_sh_lo = 0;
size_t g_sh_size = 0;
Cell* g_cells = nullptr;
uint32_t g_block = 0, g_epoch = 0;
uint32_t g_warp_syncs[32];  // __syncwarp count of each warp of the running block

std::string hex(uintptr_t a) {
  std::ostringstream os;
  os << "0x" << std::hex << a;
  return os.str();
}

std::string thread_name(int linear) {
  const detail::Coords* c = detail::coords();
  const unsigned bx = c->block_dim.x, by = c->block_dim.y;
  const unsigned l = (unsigned)linear;
  return "(" + std::to_string(l % bx) + "," + std::to_string((l / bx) % by) + "," +
         std::to_string(l / (bx * by)) + ")";
}

std::string shared_where(uintptr_t a, size_t size) {
  return "the " + std::to_string(size) + " bytes at shared address " + hex(a) + " (offset " +
         std::to_string(a - g_sh_lo) + " in the module's static data)";
}

// thread `t` `verb` bytes that thread `other` `other_verb` in the same barrier interval.
[[noreturn]] void race(int t, const char* verb, uintptr_t a, size_t size, int other,
                       const char* other_verb) {
  const std::string who = other == kManyThreads ? "other threads" : "thread " + thread_name(other);
  kernel_fault(cudaErrorLaunchFailure,
               "shared-memory race: thread " + thread_name(t) + " " + verb + " " +
                   shared_where(a, size) + " that " + who + " " + other_verb +
                   " in the same barrier interval (no __syncthreads between the two)");
  abandon_thread();
}

// Reads of words this block had not written: a bug unless another thread writes the word in
// the same interval (then the write reports a race). Judged when the interval ends.
struct UninitRead {
  uintptr_t a;
  size_t size;
  int reader;
};
std::vector<UninitRead> g_uninit;

enum class Kind { Read, Write, Atomic };

void shared_word(uintptr_t a, size_t size, Kind k) {
  const int t = running_thread();
  const int warp = t / 32;
  const uint32_t syncs = g_warp_syncs[warp];
  Cell& c = g_cells[(a - g_sh_lo) >> 2];
  if (c.block != g_block) c = Cell{g_block, g_epoch, 0, 0, 0, 0, 0, 0};
  if (c.epoch != g_epoch) {  // a barrier since the last access: earlier accesses are ordered
    c.epoch = g_epoch;
    c.flags &= kInit;
  }
  // Accesses of this warp's lanes before its last __syncwarp are ordered before this one.
  const bool write_synced = c.writer != kManyThreads && c.writer / 32 == warp && c.wsync < syncs;
  const bool reads_synced = c.rwarp == warp && c.rsync < syncs;
  const bool other_wrote = (c.flags & kWrite) && c.writer != t && !write_synced;
  const bool other_read =
      (c.flags & kRead) && ((c.flags & kMultiRead) || c.reader != t) && !reads_synced;
  switch (k) {
    case Kind::Read:
      if (other_wrote) race(t, "reads", a, size, c.writer, "wrote");
      if (!(c.flags & kInit) && g_uninit.size() < 64) g_uninit.push_back({a, size, t});
      if (!(c.flags & kRead) || reads_synced) {  // the first read, or the first since __syncwarp
        c.flags = (uint8_t)((c.flags | kRead) & ~kMultiRead);
        c.reader = (uint16_t)t;
        c.rwarp = (uint16_t)warp;
      } else {
        if (c.reader != t) c.flags |= kMultiRead;
        if (c.rwarp != warp) c.rwarp = kManyThreads;
      }
      c.rsync = syncs;
      return;
    case Kind::Write:
      if (other_wrote) race(t, "writes", a, size, c.writer, "wrote");
      if (other_read)
        race(t, "writes", a, size, (c.flags & kMultiRead) ? kManyThreads : c.reader, "read");
      c.flags = (uint8_t)((c.flags | kInit | kWrite) & ~kAtomic);
      c.writer = (uint16_t)t;
      c.wsync = syncs;
      return;
    case Kind::Atomic:
      if (other_wrote && !(c.flags & kAtomic))
        race(t, "updates atomically", a, size, c.writer, "wrote");
      if (other_read)
        race(t, "updates atomically", a, size, (c.flags & kMultiRead) ? kManyThreads : c.reader,
             "read");
      if (!(c.flags & kInit) && g_uninit.size() < 64) g_uninit.push_back({a, size, t});
      if ((c.flags & kWrite) && c.writer != t)
        c.writer = kManyThreads;
      else
        c.writer = (uint16_t)t;
      c.wsync = syncs;
      c.flags |= kInit | kWrite | kAtomic;
      return;
  }
}

// End of a barrier interval (or of the block): report a read of a word nobody had written.
void judge_uninit_reads() {
  if (g_uninit.empty()) return;
  const UninitRead u = g_uninit.front();
  g_uninit.clear();
  kernel_fault_by(u.reader, cudaErrorLaunchFailure,
                  "read of uninitialized shared memory: " + shared_where(u.a, u.size) +
                      " had not been written by this block");
}

void shared_access(uintptr_t a, size_t size, Kind k, bool aligned) {
  Stats& s = counters();
  s.shared_accesses++;
  if (aligned && (a & (size - 1)) != 0) {
    kernel_fault(cudaErrorMisalignedAddress, "misaligned " + std::to_string(size) +
                                                 "-byte access to shared memory at " + hex(a));
    abandon_thread();
  }
  for (uintptr_t w = a & ~uintptr_t(3); w < a + size; w += 4) shared_word(w, size, k);
}

void device_access(uintptr_t a, size_t size, bool write, bool aligned) {
  counters().device_accesses++;
  if (aligned && (a & (size - 1)) != 0) {
    kernel_fault(cudaErrorMisalignedAddress, "misaligned " + std::to_string(size) + "-byte " +
                                                 (write ? "write" : "read") + " at " +
                                                 describe_address(a));
    abandon_thread();
  }
  // Each 8-byte granule touched must be addressable up to the last byte accessed in it.
  const uint8_t* sh = shadow_of(a);
  for (uintptr_t g = a & ~uintptr_t(7); g < a + size; g += 8, sh++) {
    const uintptr_t end = std::min<uintptr_t>(a + size, g + 8) - g;  // bytes used in granule
    if (*sh == 8 || (*sh >= 1 && *sh < 8 && end <= *sh)) continue;
    kernel_fault(cudaErrorIllegalAddress, "out-of-bounds " + std::to_string(size) + "-byte " +
                                              (write ? "write" : "read") + " at " +
                                              describe_address(a));
    abandon_thread();
  }
}

inline void hook(const void* p, size_t size, bool write, bool aligned) {
  if (!g_active || running_thread() < 0) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (in_arena(a)) {
    device_access(a, size, write, aligned);
    global_access(a, size, write);
  } else if (a - g_sh_lo < g_sh_size) {
    shared_access(a, size, write ? Kind::Write : Kind::Read, aligned);
  }
}

// An atomic on p: checked like a write (device) or as an atomic (shared).
void atomic_hook(const void* p, size_t size) {
  if (!g_active || running_thread() < 0) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (in_arena(a))
    device_access(a, size, true, true);
  else if (a - g_sh_lo < g_sh_size)
    shared_access(a, size, Kind::Atomic, true);
}

}  // namespace

void checks_on() { g_active = true; }
void checks_off() { g_active = false; }

void set_shared_range(uintptr_t lo, size_t bytes) {
  if (lo == g_sh_lo && bytes == g_sh_size) return;
  if (g_cells) munmap(g_cells, (g_sh_size / 4 + 1) * sizeof(Cell));
  g_cells = static_cast<Cell*>(mmap(nullptr, (bytes / 4 + 1) * sizeof(Cell), PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
  if (g_cells == MAP_FAILED) std::abort();
  g_sh_lo = lo;
  g_sh_size = bytes;
}

void shared_new_block(uint32_t serial) {
  races_new_block(serial);
  g_block = serial;
  g_epoch = 0;
  g_uninit.clear();
  for (uint32_t& n : g_warp_syncs) n = 0;
}

void shared_warp_sync(int warp) { g_warp_syncs[warp]++; }

void shared_new_epoch() {
  races_new_epoch();
  judge_uninit_reads();
  g_epoch++;
}

void shared_end_block() { judge_uninit_reads(); }

}  // namespace loom_emu::rt

namespace loom_emu::detail {

using rt::atomic_hook;

#define LOOM_EMU_ATOMIC(ret, name, params, body) \
  ret name params {                              \
    atomic_hook(p, sizeof(*p));                  \
    body                                         \
  }
LOOM_EMU_ATOMIC(int, atomic_add, (int* p, int v), {
  const int o = *p;
  *p = o + v;
  return o;
})
LOOM_EMU_ATOMIC(unsigned, atomic_add, (unsigned* p, unsigned v), {
  const unsigned o = *p;
  *p = o + v;
  return o;
})
LOOM_EMU_ATOMIC(unsigned long long, atomic_add, (unsigned long long* p, unsigned long long v), {
  const unsigned long long o = *p;
  *p = o + v;
  return o;
})
LOOM_EMU_ATOMIC(float, atomic_add, (float* p, float v), {
  const float o = *p;
  *p = o + v;
  return o;
})
LOOM_EMU_ATOMIC(double, atomic_add, (double* p, double v), {
  const double o = *p;
  *p = o + v;
  return o;
})
LOOM_EMU_ATOMIC(int, atomic_max, (int* p, int v), {
  const int o = *p;
  *p = o > v ? o : v;
  return o;
})
LOOM_EMU_ATOMIC(unsigned, atomic_max, (unsigned* p, unsigned v), {
  const unsigned o = *p;
  *p = o > v ? o : v;
  return o;
})
LOOM_EMU_ATOMIC(int, atomic_min, (int* p, int v), {
  const int o = *p;
  *p = o < v ? o : v;
  return o;
})
LOOM_EMU_ATOMIC(unsigned, atomic_min, (unsigned* p, unsigned v), {
  const unsigned o = *p;
  *p = o < v ? o : v;
  return o;
})
LOOM_EMU_ATOMIC(int, atomic_exch, (int* p, int v), {
  const int o = *p;
  *p = v;
  return o;
})
LOOM_EMU_ATOMIC(unsigned, atomic_exch, (unsigned* p, unsigned v), {
  const unsigned o = *p;
  *p = v;
  return o;
})
LOOM_EMU_ATOMIC(float, atomic_exch, (float* p, float v), {
  const float o = *p;
  *p = v;
  return o;
})
LOOM_EMU_ATOMIC(int, atomic_cas, (int* p, int cmp, int v), {
  const int o = *p;
  if (o == cmp) *p = v;
  return o;
})
LOOM_EMU_ATOMIC(unsigned, atomic_cas, (unsigned* p, unsigned cmp, unsigned v), {
  const unsigned o = *p;
  if (o == cmp) *p = v;
  return o;
})
LOOM_EMU_ATOMIC(unsigned long long, atomic_cas,
                (unsigned long long* p, unsigned long long cmp, unsigned long long v), {
                  const unsigned long long o = *p;
                  if (o == cmp) *p = v;
                  return o;
                })
#undef LOOM_EMU_ATOMIC

}  // namespace loom_emu::detail

// The instrumentation's entry points (GCC's -fsanitize=thread ABI), implemented by the checks
// above.
extern "C" {
#define LOOM_EMU_HOOKS(n)                                                            \
  void __tsan_read##n(void* p) { loom_emu::rt::hook(p, n, false, true); }            \
  void __tsan_write##n(void* p) { loom_emu::rt::hook(p, n, true, true); }            \
  void __tsan_unaligned_read##n(void* p) { loom_emu::rt::hook(p, n, false, false); } \
  void __tsan_unaligned_write##n(void* p) { loom_emu::rt::hook(p, n, true, false); } \
  void __tsan_volatile_read##n(void* p) { loom_emu::rt::hook(p, n, false, true); }   \
  void __tsan_volatile_write##n(void* p) { loom_emu::rt::hook(p, n, true, true); }
LOOM_EMU_HOOKS(1)
LOOM_EMU_HOOKS(2)
LOOM_EMU_HOOKS(4)
LOOM_EMU_HOOKS(8)
LOOM_EMU_HOOKS(16)
#undef LOOM_EMU_HOOKS
void __tsan_read_range(void* p, unsigned long n) { loom_emu::rt::hook(p, n, false, false); }
void __tsan_write_range(void* p, unsigned long n) { loom_emu::rt::hook(p, n, true, false); }
// Atomics in host code of the instrumented files (static-local guards, shared_ptr counts): done
// as the compiler would without instrumentation (sequentially consistent: always valid).
#define LOOM_EMU_ATOMIC_OPS(bits)                                                                  \
  using a##bits = uint##bits##_t;                                                                  \
  a##bits __tsan_atomic##bits##_load(const volatile a##bits* a, int) {                             \
    return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                                   \
  }                                                                                                \
  void __tsan_atomic##bits##_store(volatile a##bits* a, a##bits v, int) {                          \
    __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                      \
  }                                                                                                \
  a##bits __tsan_atomic##bits##_exchange(volatile a##bits* a, a##bits v, int) {                    \
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                            \
  }                                                                                                \
  a##bits __tsan_atomic##bits##_fetch_add(volatile a##bits* a, a##bits v, int) {                   \
    return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                             \
  }                                                                                                \
  a##bits __tsan_atomic##bits##_fetch_sub(volatile a##bits* a, a##bits v, int) {                   \
    return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                             \
  }                                                                                                \
  a##bits __tsan_atomic##bits##_fetch_and(volatile a##bits* a, a##bits v, int) {                   \
    return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);                                             \
  }                                                                                                \
  a##bits __tsan_atomic##bits##_fetch_or(volatile a##bits* a, a##bits v, int) {                    \
    return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);                                              \
  }                                                                                                \
  a##bits __tsan_atomic##bits##_fetch_xor(volatile a##bits* a, a##bits v, int) {                   \
    return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);                                             \
  }                                                                                                \
  int __tsan_atomic##bits##_compare_exchange_strong(volatile a##bits* a, a##bits* c, a##bits v,    \
                                                    int, int) {                                    \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);        \
  }                                                                                                \
  int __tsan_atomic##bits##_compare_exchange_weak(volatile a##bits* a, a##bits* c, a##bits v, int, \
                                                  int) {                                           \
    return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);         \
  }                                                                                                \
  a##bits __tsan_atomic##bits##_compare_exchange_val(volatile a##bits* a, a##bits c, a##bits v,    \
                                                     int, int) {                                   \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);              \
    return c;                                                                                      \
  }
LOOM_EMU_ATOMIC_OPS(8)
LOOM_EMU_ATOMIC_OPS(16)
LOOM_EMU_ATOMIC_OPS(32)
LOOM_EMU_ATOMIC_OPS(64)
#undef LOOM_EMU_ATOMIC_OPS
void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}
}
