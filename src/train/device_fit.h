// Device-memory estimate of one rank of a cuda run, and the fit check made before allocating.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "layout/rank_memory.h"
#include "layout/run_layout.h"

namespace loom {

// Memory a cuda run needs outside loom's own buffers (assumptions, stated in docs/gpu.md).
struct DeviceReserve {
  uint64_t workspace = uint64_t(32) << 20;  // cuBLASLt workspace of the GemmHandle (32 MiB)
  // NCCL communicators and buffers, CUDA runtime and library allocations made after the free
  // memory was read (module loading, cuBLASLt), allocator rounding and fragmentation.
  uint64_t runtime = uint64_t(1) << 30;  // 1 GiB
};

// Bytes one rank of a cuda run holds, by part: the memory model that the optimizer, the stage
// and the executor allocate from (layout/rank_memory.h) for the cuda device in train.dtype, plus
// what lives outside loom's buffers.
struct DeviceEstimate : RankMemory {
  uint64_t workspace = 0;  // DeviceReserve::workspace
  uint64_t runtime = 0;    // DeviceReserve::runtime

  // What the estimate was made for (for messages).
  std::string dtype;           // train.dtype
  int act_bytes = 4;           // bytes per activation / compute weight
  int stage = 0, dp_rank = 0;  // the rank's pipeline stage and data-parallel index
  int slots = 1;               // micro-batches in flight on the stage
  int microbatches = 1;        // per optimizer step per data-parallel rank
  uint64_t stage_params = 0;   // elements of the stage's flat parameter buffer (one TP rank)

  uint64_t total() const;
  // (label, bytes) of every part, loom's buffers then the reserve, for messages and tests.
  std::vector<std::pair<std::string, uint64_t>> parts() const;
};

// The estimate for the rank that `run` resolves, on the cuda backend in run.dtype().
DeviceEstimate estimate_device_memory(const RunLayout& run, const DeviceReserve& reserve = {});

// Checks that the rank of `run` (world rank `rank`) fits in the device memory reported by
// cudaMemGetInfo before anything is allocated: throws UserError when estimate.total() >
// free_bytes, naming each part, the device, its free and total memory, the shortfall and the
// config changes that would fit (with their estimates). Returns the estimate when it fits.
DeviceEstimate check_device_fit(const Config& cfg, const RunLayout& run, int rank,
                                size_t free_bytes, size_t total_bytes,
                                const std::string& device_name, const DeviceReserve& reserve = {});

}  // namespace loom
