// What the CUDA emulator exposes beyond the CUDA API: its fault report and counters (for tests).
#pragma once
#include <cstdint>
#include <string>

namespace loom_emu {

// The first fault recorded since the last clear_fault(), empty when there is none: the kernel
// (as written at its launch, with file:line), the block and thread, and what was wrong (an
// access outside an allocation, a misaligned access, a shared-memory race, a barrier or warp
// intrinsic not reached by every thread, an invalid cuBLASLt call...).
std::string fault_report();

// Clears the sticky fault and the last error, so later calls succeed again (allocations stay;
// their red zones are refilled).
void clear_fault();

// With false, the emulated cuBLASLt finds no algorithm for any epilogue but the default (as a
// real cuBLASLt may for some shapes and types), so callers' fallback paths run. Default true.
void set_cublaslt_epilogues(bool on);

struct Stats {
  uint64_t kernels = 0, blocks = 0, threads = 0;
  uint64_t barriers = 0, warp_exchanges = 0;
  uint64_t device_accesses = 0, shared_accesses = 0;  // checked by the access hooks
  uint64_t gemms = 0;
  // cuBLASLt plan building (cublasLtMatmulAlgoGetHeuristic, cublasLtMatmulDescCreate,
  // cublasLtMatrixLayoutCreate calls) and cudaMalloc calls, so tests can tell a step that
  // reuses its plans and memory from one that builds or allocates again.
  uint64_t lt_heuristics = 0, lt_descs = 0, lt_layouts = 0;
  uint64_t allocations = 0;
  uint64_t graph_launches = 0;  // cudaGraphLaunch calls
};
Stats stats();

// Launches so far of kernels whose name, as written at the launch ("attention_kernel<64>"),
// contains `name`: lets a test check which kernel a host function chose.
uint64_t launches_of(const std::string& name);

}  // namespace loom_emu
