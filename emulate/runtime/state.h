// Internal to the CUDA emulator runtime: faults, device memory, the running block, the checks.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "loom_emu/emulator.h"
#include "loom_emu/launch.h"

namespace loom_emu::rt {

// Every API call and launch runs under this lock: the emulated device executes one thing at a time.
std::recursive_mutex& device_lock();
// An API entry point's first lines: the lock, then the sticky fault of earlier device work.
#define LOOM_EMU_LOCK \
  std::lock_guard<std::recursive_mutex> loom_emu_lock_(::loom_emu::rt::device_lock())
#define LOOM_EMU_STICKY \
  if (::loom_emu::rt::sticky() != cudaSuccess) return ::loom_emu::rt::api_error(::loom_emu::rt::sticky())

// ---- errors ----------------------------------------------------------------------------------
// A fault in device work (kernel, GEMM): sticky as in CUDA (every later call returns it until
// clear_fault), printed once to stderr with its report; the first one is kept.
void fault(cudaError_t code, const std::string& report);
cudaError_t sticky();
// An API error: returned by the call and remembered for cudaGetLastError (not sticky). The
// report, when given, is printed to stderr (the error code alone would not say what was wrong).
cudaError_t api_error(cudaError_t code, const std::string& report = std::string());
cudaError_t take_last_error();
cudaError_t peek_last_error();
Stats& counters();

// ---- device memory ---------------------------------------------------------------------------
// One reserved arena: allocations are 256-byte aligned, never reuse an address, and are
// separated by red zones of at least 256 bytes (filled with 0xff: NaN as float, bf16, fp16).
// A shadow byte per 8 bytes says what is addressable (see memory.cpp).
constexpr size_t kTotalBytes = size_t(16) << 30;  // what cudaMemGetInfo reports
void* device_alloc(size_t bytes, cudaError_t* err);
// While one exists (nested ones allowed), device memory is accessible: device work only.
struct DeviceWindow {
  DeviceWindow();
  ~DeviceWindow();
  DeviceWindow(const DeviceWindow&) = delete;
  DeviceWindow& operator=(const DeviceWindow&) = delete;
};
cudaError_t device_free(void* p);
bool in_arena(uintptr_t a);
uintptr_t arena_lo();
size_t arena_bytes();
size_t live_bytes();
// [p, p + bytes) lies inside one live allocation.
bool device_range_ok(const void* p, size_t bytes);
// True when p is inside (or one past) a live allocation.
bool is_device(const void* p);
// "8 bytes after the end of the 1024-byte allocation at 0x...", for reports.
std::string describe_address(uintptr_t a);
// The access [a, a + size) by kernel code: 0 when addressable, else a description.
const uint8_t* shadow_of(uintptr_t a);
// Red zones of the allocation holding p still hold their fill (no stray write); else a report.
std::string check_red_zones(const void* p);
// Refills every red zone (after a reported fault has been cleared).
void restore_red_zones();

// [p, p + bytes) inside one cudaMallocHost allocation (host_memory.cpp).
bool pinned_range(const void* p, size_t bytes);

// The null stream, or a stream created and not yet destroyed (runtime_api.cpp).
bool valid_stream(cudaStream_t s);

// ---- stream capture (graph.cpp) --------------------------------------------------------------
// True while stream s captures: work enqueued on it is record()ed, not run.
bool capturing(cudaStream_t s);
bool any_capture();
void record(cudaStream_t s, std::function<void()> op);
// cudaSuccess outside a capture; during one, invalidates it and returns (reports) the error
// that CUDA's global capture mode gives a call that could synchronize or allocate.
cudaError_t refuse_in_capture(const std::string& call);

// ---- the running kernel ----------------------------------------------------------------------
struct Block;
// The block being executed (nullptr outside kernels), its thread, for the access checks.
Block* running_block();
// "kernel map2_kernel<kV> (kernels/cuda_common.cuh:190), block (3,0,0), thread (17,0,0)".
std::string where();
// Records a fault of the running kernel (kept, printed, sticky), and stops the kernel at the
// threads' next barrier or warp intrinsic.
void kernel_fault(cudaError_t code, const std::string& what);
// The same for a fault found on behalf of thread `linear` of the running block.
void kernel_fault_by(int linear, cudaError_t code, const std::string& what);
// Stops the running thread for good before the faulting access it was called for executes
// (from the access hooks, where exceptions cannot pass).
[[noreturn]] void abandon_thread();

// The linear index of the running thread in its block (-1 outside kernels).
int running_thread();

// ---- access checks (access.cpp) ------------------------------------------------------------
// Kernel accesses are checked between checks_on() and checks_off() (one launch).
void checks_on();
void checks_off();
// The writable data of the module holding the running kernel: __shared__ variables live there.
void set_shared_range(uintptr_t lo, size_t bytes);
// New block: shared words not written by it read as uninitialized; new barrier interval.
void shared_new_block(uint32_t block_serial);
void shared_new_epoch();
void shared_end_block();
// __syncwarp of warp `warp` of the running block completed: that warp's shared accesses before
// it are ordered against its accesses after it (other warps still need __syncthreads).
void shared_warp_sync(int warp);

// ---- global-memory races (global_races.cpp) ------------------------------------------------
// A launch's blocks get serials first_block_serial, first_block_serial + 1, ... in grid order.
void races_new_launch(uint32_t first_block_serial, dim3 grid, dim3 block);
void races_new_block(uint32_t serial);
void races_new_epoch();
// A plain (non-atomic) access by the running thread to addressable device memory.
void global_access(uintptr_t a, size_t size, bool write);

}  // namespace loom_emu::rt
