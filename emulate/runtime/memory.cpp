// CUDA emulator: device memory in one reserved arena, with red zones and a shadow of what is
// addressable, so that kernel accesses outside an allocation are caught at the access.
#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <sstream>

#include "state.h"

namespace loom_emu::rt {
namespace {

// Between device work the arena is inaccessible to the host (PROT_NONE): host code that
// dereferences a device pointer crashes here as it does next to a GPU, with a message.
// Shadow byte per 8-byte granule: 0 never allocated (red zones are never allocated), 1..7 the
// first k bytes addressable (the tail of an allocation), 8 all addressable, kFreed freed.
constexpr size_t kArenaBytes = size_t(64) << 30;  // address space only (MAP_NORESERVE)
constexpr size_t kAlign = 256;                    // cudaMalloc's alignment guarantee
constexpr size_t kRedZone = 256;
constexpr uint8_t kFill = 0xff;  // NaN in fp32, bf16 and fp16; -1 as an integer
constexpr uint8_t kFreed = 0xfd;

struct Allocation {
  size_t bytes;
  uint64_t serial;  // n-th cudaMalloc of the process
};

struct Arena {
  uintptr_t lo = 0;
  uint8_t* shadow = nullptr;
  uintptr_t next = 0;  // first free address (bump; addresses are never reused)
  size_t live = 0;
  uint64_t serial = 0;
  std::map<uintptr_t, Allocation> live_allocs;   // base -> allocation
  std::map<uintptr_t, Allocation> freed_allocs;  // for "use after free" reports

  Arena() {
    void* p =
        mmap(nullptr, kArenaBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void* s = mmap(nullptr, kArenaBytes / 8, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED || s == MAP_FAILED) {
      std::fprintf(stderr, "loom CUDA emulator: cannot reserve %zu GiB of address space\n",
                   kArenaBytes >> 30);
      std::abort();
    }
    lo = reinterpret_cast<uintptr_t>(p);
    shadow = static_cast<uint8_t*>(s);
    next = lo + kRedZone;
    install_segv_handler();
  }
  static void install_segv_handler();
};

Arena& arena() {
  static Arena a;
  return a;
}

uintptr_t align_up(uintptr_t x, size_t a) { return (x + a - 1) / a * a; }

// Device work opens the arena lazily: its first touch of an allocation faults, and the handler
// makes that allocation (with its red zones) accessible until the work ends. Only what device
// work touches is ever toggled.
int g_window = 0;   // nesting depth of DeviceWindow
long g_device_tid;  // the thread doing the device work
struct Opened {
  uintptr_t b, e;
};
Opened g_opened[4096];
int g_nopened = 0;

// The live allocation holding a (or ending exactly at a), nullptr if none.
const std::pair<const uintptr_t, Allocation>* live_at(uintptr_t a) {
  Arena& ar = arena();
  auto it = ar.live_allocs.upper_bound(a);
  if (it == ar.live_allocs.begin()) return nullptr;
  --it;
  return a <= it->first + it->second.bytes ? &*it : nullptr;
}

void on_segv(int sig, siginfo_t* info, void*) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(info->si_addr);
  if (in_arena(a) && g_window > 0 && syscall(SYS_gettid) == g_device_tid &&
      g_nopened < (int)(sizeof(g_opened) / sizeof(g_opened[0]))) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t b = a / page * page, e = b + page;
    if (const auto* al = live_at(a)) {  // the whole allocation and its red zones
      b = (al->first - kRedZone) / page * page;
      e = align_up(align_up(al->first + al->second.bytes, kAlign) + kRedZone, page);
    }
    mprotect(reinterpret_cast<void*>(b), e - b, PROT_READ | PROT_WRITE);
    g_opened[g_nopened++] = Opened{b, e};
    return;  // the access is retried
  }
  if (in_arena(a)) {
    static const char msg[] =
        "loom CUDA emulator: host code dereferenced device memory (a device pointer used on the "
        "host, which faults next to a GPU too); host stack:\n";
    (void)!write(2, msg, sizeof(msg) - 1);
    void* frames[32];
    backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
  }
  signal(sig, SIG_DFL);  // re-raised by returning: the default action ends the process
}

void Arena::install_segv_handler() {
  struct sigaction sa {};
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, nullptr);
}

void set_shadow(uintptr_t base, size_t bytes, bool addressable) {
  Arena& ar = arena();
  uint8_t* s = ar.shadow + (base - ar.lo) / 8;
  const size_t full = bytes / 8;
  std::memset(s, addressable ? 8 : kFreed, full);
  if (bytes % 8) s[full] = addressable ? (uint8_t)(bytes % 8) : kFreed;
}

}  // namespace

bool in_arena(uintptr_t a) { return a - arena().lo < kArenaBytes; }
uintptr_t arena_lo() { return arena().lo; }
size_t arena_bytes() { return kArenaBytes; }

DeviceWindow::DeviceWindow() {
  if (g_window++ == 0) g_device_tid = syscall(SYS_gettid);
}
DeviceWindow::~DeviceWindow() {
  if (--g_window != 0) return;
  for (int i = 0; i < g_nopened; i++)
    mprotect(reinterpret_cast<void*>(g_opened[i].b), g_opened[i].e - g_opened[i].b, PROT_NONE);
  g_nopened = 0;
}

const uint8_t* shadow_of(uintptr_t a) { return arena().shadow + (a - arena().lo) / 8; }

size_t live_bytes() { return arena().live; }

void* device_alloc(size_t bytes, cudaError_t* err) {
  Arena& ar = arena();
  *err = cudaSuccess;
  if (bytes == 0) return nullptr;
  if (bytes > kTotalBytes - ar.live) {
    *err = cudaErrorMemoryAllocation;
    return nullptr;
  }
  const uintptr_t base = align_up(ar.next, kAlign);
  const uintptr_t next = align_up(base + bytes, kAlign) + kRedZone;
  if (next - ar.lo > kArenaBytes) {  // the arena's address space is used up
    *err = cudaErrorMemoryAllocation;
    return nullptr;
  }
  ar.next = next;
  ar.live_allocs[base] = Allocation{bytes, ++ar.serial};
  ar.live += bytes;
  DeviceWindow window;
  // Contents start as 0xff (like uninitialized device memory they must not be relied on; as
  // NaN they show up in any result that reads them); the red zone after it too.
  std::memset(reinterpret_cast<void*>(base), kFill, next - base);
  set_shadow(base, bytes, true);
  return reinterpret_cast<void*>(base);
}

std::string check_red_zones(const void* p) {
  const auto* a = live_at(reinterpret_cast<uintptr_t>(p));
  if (!a) return std::string();
  DeviceWindow window;
  const uintptr_t end = a->first + a->second.bytes;
  const uintptr_t zone_end = align_up(end, kAlign) + kRedZone;
  const auto* z = reinterpret_cast<const uint8_t*>(end);
  for (uintptr_t i = 0; i < zone_end - end; i++) {
    if (z[i] != kFill) {
      std::ostringstream os;
      os << "the red zone after the " << a->second.bytes << "-byte allocation at 0x" << std::hex
         << a->first << std::dec << " was written at +" << i
         << " bytes past its end (an out-of-bounds write)";
      return os.str();
    }
  }
  return std::string();
}

void restore_red_zones() {
  DeviceWindow window;
  for (const auto& [base, a] : arena().live_allocs) {
    const uintptr_t end = base + a.bytes;
    std::memset(reinterpret_cast<void*>(end), kFill, align_up(end, kAlign) + kRedZone - end);
  }
}

cudaError_t device_free(void* p) {
  Arena& ar = arena();
  const uintptr_t base = reinterpret_cast<uintptr_t>(p);
  auto it = ar.live_allocs.find(base);
  if (it == ar.live_allocs.end()) {
    const bool freed = ar.freed_allocs.count(base) != 0;
    std::ostringstream os;
    os << "cudaFree(0x" << std::hex << base << std::dec
       << "): " << (freed ? "already freed" : "not the start of a live cudaMalloc allocation");
    return api_error(cudaErrorInvalidValue, os.str());
  }
  const std::string zone = check_red_zones(p);
  if (!zone.empty()) fault(cudaErrorIllegalAddress, "at cudaFree: " + zone);
  const size_t bytes = it->second.bytes;
  set_shadow(base, bytes, false);
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  const uintptr_t b = align_up(base, page), e = (base + bytes) / page * page;
  if (e > b) {
    madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);  // hand the pages back
  }
  ar.freed_allocs[base] = it->second;
  ar.live -= bytes;
  ar.live_allocs.erase(it);
  return cudaSuccess;
}

bool device_range_ok(const void* p, size_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const auto* al = live_at(a);
  return al && a + bytes <= al->first + al->second.bytes && a + bytes >= a;
}

bool is_device(const void* p) { return live_at(reinterpret_cast<uintptr_t>(p)) != nullptr; }

std::string describe_address(uintptr_t a) {
  Arena& ar = arena();
  std::ostringstream os;
  os << "0x" << std::hex << a << std::dec;
  if (!in_arena(a)) {
    os << " (not device memory)";
    return os.str();
  }
  // The nearest allocation below and above, live or freed.
  auto nearest = [&](const std::map<uintptr_t, Allocation>& m,
                     bool below) -> const std::pair<const uintptr_t, Allocation>* {
    auto it = m.upper_bound(a);
    if (below) return it == m.begin() ? nullptr : &*std::prev(it);
    return it == m.end() ? nullptr : &*it;
  };
  const auto* lb = nearest(ar.live_allocs, true);
  const auto* fb = nearest(ar.freed_allocs, true);
  if (fb && a < fb->first + fb->second.bytes && (!lb || fb->first > lb->first)) {
    os << ": " << a - fb->first << " bytes into the freed " << fb->second.bytes
       << "-byte allocation #" << fb->second.serial << " (use after cudaFree)";
    return os.str();
  }
  if (lb && a < lb->first + lb->second.bytes) {
    os << ": byte " << a - lb->first << " of the " << lb->second.bytes << "-byte allocation #"
       << lb->second.serial;
    return os.str();
  }
  const auto* la = nearest(ar.live_allocs, false);
  if (lb && (!la || a - (lb->first + lb->second.bytes) <= la->first - a)) {
    os << ": " << a - (lb->first + lb->second.bytes) << " bytes after the end of the "
       << lb->second.bytes << "-byte allocation #" << lb->second.serial << " at 0x" << std::hex
       << lb->first << std::dec;
  } else if (la) {
    os << ": " << la->first - a << " bytes before the start of the " << la->second.bytes
       << "-byte allocation #" << la->second.serial << " at 0x" << std::hex << la->first
       << std::dec;
  } else {
    os << ": in no allocation";
  }
  return os.str();
}

}  // namespace loom_emu::rt
