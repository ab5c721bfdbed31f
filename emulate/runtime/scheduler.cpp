// CUDA emulator: kernel launches. Blocks run one after another; the threads of a block are
// cooperative fibers (Boost.Context) that switch only at barriers and warp intrinsics, so a
// barrier really waits for the whole block and a shuffle for the whole warp.
#include <link.h>
#include <sys/mman.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "block.h"

namespace loom_emu::rt {

namespace bctx = boost::context;

namespace {

constexpr int kMaxThreads = 1024;
constexpr size_t kStackBytes = size_t(256) << 10;
constexpr size_t kGuardBytes = size_t(4) << 10;
constexpr size_t kMaxDynamicShared = size_t(48) << 10;

// One stack per thread index of a block, reserved once (touched pages only are committed), each
// with an inaccessible guard page below it.
class StackPool {
 public:
  bctx::stack_context get(int i) {
    if (!base_) {
      void* p = mmap(nullptr, kMaxThreads * (kStackBytes + kGuardBytes), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) {
        std::fprintf(stderr, "loom CUDA emulator: cannot reserve the thread stacks\n");
        std::abort();
      }
      base_ = static_cast<char*>(p);
      for (int k = 0; k < kMaxThreads; k++)
        mprotect(base_ + k * (kStackBytes + kGuardBytes), kGuardBytes, PROT_NONE);
    }
    bctx::stack_context sc;
    sc.size = kStackBytes;
    sc.sp = base_ + (size_t)(i + 1) * (kStackBytes + kGuardBytes);  // top: stacks grow down
    return sc;
  }

 private:
  char* base_ = nullptr;
};

StackPool& stacks() {
  static StackPool p;
  return p;
}

struct PoolAlloc {
  int index;
  bctx::stack_context allocate() { return stacks().get(index); }
  void deallocate(bctx::stack_context&) noexcept {}
};

}  // namespace

Block* g_block = nullptr;
Thread* g_thread = nullptr;

namespace {

alignas(128) char g_dynamic_shared[kMaxDynamicShared];  // extern __shared__ of the running block

std::string dim(const uint3& d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}
std::string dim(const dim3& d) { return dim(uint3{d.x, d.y, d.z}); }

std::string kernel_name(const detail::LaunchInfo& i) {
  return std::string("kernel ") + i.kernel + " (launched at " + i.file + ":" +
         std::to_string(i.line) + ", grid " + dim(i.grid) + ", block " + dim(i.block) + ")";
}

// A thread's exit: barriers and warp intrinsics still awaited by others can no longer complete.
void thread_exits(Block& b, Thread& t) {
  t.state = State::Done;
  b.live--;
  b.exited++;
  Warp& w = b.warps[t.warp];
  w.exited++;
  if (b.arrived > 0 && !b.aborting)
    kernel_fault(cudaErrorLaunchFailure,
                 "exits while " + std::to_string(b.arrived) +
                     " threads of its block wait at __syncthreads (a barrier every thread "
                     "must reach)");
  else if (w.arrived > 0 && !b.aborting)
    kernel_fault(cudaErrorLaunchFailure,
                 "exits while " + std::to_string(w.arrived) +
                     " lanes of its warp wait for it at a warp intrinsic with a full mask");
}

void run_thread_body(Block& b, Thread& t) {
  try {
    b.fn(b.closure);
  } catch (const Abort&) {
  }
  thread_exits(b, t);
}

// Resumes t until it blocks or exits.
void resume(Thread& t) {
  g_thread = &t;
  t.fiber = std::move(t.fiber).resume();
  g_thread = nullptr;
}

std::string stuck_report(const Block& b) {
  int at_barrier = 0, at_warp = 0;
  for (int i = 0; i < b.nthreads; i++) {
    const State s = (*b.threads)[i].state;
    at_barrier += s == State::AtBarrier;
    at_warp += s == State::AtWarp;
  }
  return "block " + dim(b.idx) + " cannot go on: " + std::to_string(at_barrier) +
         " threads wait at __syncthreads, " + std::to_string(at_warp) + " at warp intrinsics, " +
         std::to_string(b.exited) +
         " have exited (a barrier or shuffle that not every thread reaches)";
}

void run_block(Block& b) {
  std::vector<Thread>& th = *b.threads;
  const dim3 bd = b.info->block;
  for (int i = 0; i < b.nthreads; i++) {
    Thread& t = th[i];
    t.coords.thread_idx = uint3{i % bd.x, (i / bd.x) % bd.y, i / (bd.x * bd.y)};
    t.coords.block_idx = b.idx;
    t.coords.block_dim = bd;
    t.coords.grid_dim = b.info->grid;
    t.linear = i;
    t.warp = i / 32;
    t.lane = i % 32;
    t.state = State::Runnable;
    Block* bp = &b;
    t.fiber = bctx::fiber(std::allocator_arg, PoolAlloc{i}, [bp, &t](bctx::fiber&& back) {
      t.back = std::move(back);
      run_thread_body(*bp, t);
      return std::move(t.back);
    });
  }
  while (b.live > 0) {
    bool ran = false;
    for (int i = 0; i < b.nthreads; i++) {
      if (th[i].state != State::Runnable) continue;
      resume(th[i]);
      ran = true;
    }
    if (!ran) {
      if (!b.aborting) fault(cudaErrorLaunchFailure, kernel_name(*b.info) + ": " + stuck_report(b));
      break;
    }
  }
  for (int i = 0; i < b.nthreads; i++) {
    if (th[i].state == State::Abandoned) {
      // Stopped inside an access hook, where no exception may pass: drop the context without
      // unwinding it (its frames hold nothing to release; the stack is the pool's).
      new (&th[i].fiber) bctx::fiber();
    } else {
      th[i].fiber = bctx::fiber();  // unwinds threads stuck at a barrier
    }
  }
}

// The writable segments of the module holding `code` (where its __shared__ statics live).
struct ModuleData {
  uintptr_t text_lo = 0, text_hi = 0, data_lo = 0, data_hi = 0;
};

ModuleData module_of(const void* code) {
  static ModuleData cached;
  const uintptr_t a = reinterpret_cast<uintptr_t>(code);
  if (a >= cached.text_lo && a < cached.text_hi) return cached;
  struct Search {
    uintptr_t a;
    ModuleData m;
    bool found = false;
  } s{a, {}, false};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* p) -> int {
        auto* s = static_cast<Search*>(p);
        ModuleData m{UINTPTR_MAX, 0, UINTPTR_MAX, 0};
        bool has = false;
        for (int i = 0; i < info->dlpi_phnum; i++) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD) continue;
          const uintptr_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
          if (ph.p_flags & PF_W) {
            m.data_lo = std::min(m.data_lo, lo);
            m.data_hi = std::max(m.data_hi, hi);
          } else {
            m.text_lo = std::min(m.text_lo, lo);
            m.text_hi = std::max(m.text_hi, hi);
            if (s->a >= lo && s->a < hi) has = true;
          }
        }
        if (!has) return 0;
        s->m = m;
        s->found = true;
        return 1;
      },
      &s);
  if (!s.found) {
    std::fprintf(stderr, "loom CUDA emulator: no loaded module holds the kernel code at %p\n",
                 code);
    std::abort();
  }
  cached = s.m;
  return cached;
}

std::string check_config(const detail::LaunchInfo& i) {
  const dim3 b = i.block, g = i.grid;
  const unsigned long long threads = (unsigned long long)b.x * b.y * b.z;
  if (threads == 0 || g.x == 0 || g.y == 0 || g.z == 0) return "a grid or block dimension is 0";
  if (threads > kMaxThreads || b.x > 1024 || b.y > 1024 || b.z > 64)
    return "block " + dim(b) + " exceeds 1024 threads (or 1024 x 1024 x 64)";
  if (g.x > 2147483647u || g.y > 65535 || g.z > 65535)
    return "grid " + dim(g) + " exceeds 2^31-1 x 65535 x 65535";
  if (i.smem > kMaxDynamicShared)
    return std::to_string(i.smem) + " bytes of dynamic shared memory exceed 48 KiB";
  return std::string();
}

}  // namespace

std::map<std::string, uint64_t>& launches_by_name() {
  static std::map<std::string, uint64_t> m;
  return m;
}

Block* running_block() { return g_block; }

int running_thread() { return g_thread ? g_thread->linear : -1; }

std::string where() {
  if (!g_block) return "outside kernels";
  std::string s = kernel_name(*g_block->info) + ", block " + dim(g_block->idx);
  if (g_thread) s += ", thread " + dim(g_thread->coords.thread_idx);
  return s;
}

void kernel_fault_by(int linear, cudaError_t code, const std::string& what) {
  const Thread& t = (*g_block->threads)[linear];
  fault(code, kernel_name(*g_block->info) + ", block " + dim(g_block->idx) + ", thread " +
                  dim(t.coords.thread_idx) + ": " + what);
  g_block->aborting = true;
}

void kernel_fault(cudaError_t code, const std::string& what) {
  fault(code, where() + ": " + what);
  if (g_block) g_block->aborting = true;
}

void abandon_thread() {
  Thread& t = *g_thread;
  t.state = State::Abandoned;
  g_block->live--;
  t.back = std::move(t.back).resume();  // the scheduler never resumes an abandoned thread
  std::abort();
}

}  // namespace loom_emu::rt

namespace loom_emu::detail {

using namespace loom_emu::rt;

const Coords* coords() { return &g_thread->coords; }

void* dynamic_shared() { return g_dynamic_shared; }

void launch(const LaunchInfo& info, ThreadFn fn, void* closure, const PointerArg* ptrs, int nptrs) {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  if (sticky() != cudaSuccess) {
    api_error(sticky());
    return;
  }
  const std::string bad = check_config(info);
  if (!bad.empty()) {
    api_error(cudaErrorInvalidConfiguration, kernel_name(info) + ": " + bad);
    return;
  }
  if (!valid_stream(info.stream)) {
    api_error(cudaErrorInvalidResourceHandle,
              kernel_name(info) + ": the stream is not a live stream of this device");
    return;
  }
  for (int k = 0; k < nptrs; k++) {
    if (ptrs[k].p && !is_device(ptrs[k].p)) {
      fault(cudaErrorIllegalAddress, kernel_name(info) + ": argument " +
                                         std::to_string(ptrs[k].index) + " is " +
                                         describe_address(reinterpret_cast<uintptr_t>(ptrs[k].p)) +
                                         ", not device memory (a host pointer, or freed memory)");
      return;
    }
  }
  const ModuleData md = module_of(reinterpret_cast<const void*>(fn));
  set_shared_range(md.data_lo, md.data_hi - md.data_lo);
  static std::vector<Thread> threads(kMaxThreads);
  Block b;
  b.info = &info;
  b.fn = fn;
  b.closure = closure;
  b.threads = &threads;
  b.nthreads = (int)(info.block.x * info.block.y * info.block.z);
  b.warps.resize((size_t)(b.nthreads + 31) / 32);
  for (size_t w = 0; w < b.warps.size(); w++)
    b.warps[w].lanes = std::min(32, b.nthreads - (int)w * 32);
  Stats& c = counters();
  c.kernels++;
  launches_by_name()[info.kernel]++;
  static uint32_t block_serial = 0;
  races_new_launch(block_serial + 1, info.grid, info.block);
  g_block = &b;
  DeviceWindow window;
  checks_on();
  for (unsigned z = 0; z < info.grid.z && !b.aborting; z++)
    for (unsigned y = 0; y < info.grid.y && !b.aborting; y++)
      for (unsigned x = 0; x < info.grid.x && !b.aborting; x++) {
        b.idx = uint3{x, y, z};
        b.live = b.nthreads;
        b.exited = b.arrived = 0;
        b.gen = 0;
        b.red[0] = b.red[1] = Reduction{};
        for (Warp& w : b.warps) w.arrived = w.exited = 0, w.gen = 0;
        shared_new_block(++block_serial);
        c.blocks++;
        c.threads += (uint64_t)b.nthreads;
        run_block(b);
        shared_end_block();
      }
  checks_off();
  g_block = nullptr;
  for (int k = 0; k < nptrs && sticky() == cudaSuccess; k++) {
    const std::string z = ptrs[k].p ? check_red_zones(ptrs[k].p) : std::string();
    if (!z.empty()) fault(cudaErrorIllegalAddress, kernel_name(info) + ": " + z);
  }
}

}  // namespace loom_emu::detail

uint64_t loom_emu::launches_of(const std::string& name) {
  std::lock_guard<std::recursive_mutex> lock(loom_emu::rt::device_lock());
  uint64_t n = 0;
  for (const auto& [kernel, count] : loom_emu::rt::launches_by_name())
    if (kernel.find(name) != std::string::npos) n += count;
  return n;
}
