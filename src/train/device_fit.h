// Device-memory estimate of one rank of a cuda run, and the fit check made before allocating.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "parallel/grid.h"

namespace loom {

// Memory a cuda run needs outside loom's own buffers (assumptions, stated in docs/gpu.md).
struct DeviceReserve {
  uint64_t workspace = uint64_t(32) << 20;  // cuBLASLt workspace of the GemmHandle (32 MiB)
  // NCCL communicators and buffers, CUDA runtime and library allocations made after the free
  // memory was read (module loading, cuBLASLt), allocator rounding and fragmentation.
  uint64_t runtime = uint64_t(1) << 30;  // 1 GiB
};

// Bytes one rank of a cuda run holds, by part. The model of the cuda backend by its definition
// (src/backend/backend.h): fp32 master parameters, gradients and AdamW moments sharded by ZeRO
// exactly as on cpu; a copy of the weights in the compute dtype when it is bf16/fp16;
// activations in the compute dtype with per-row statistics in fp32; flash attention keeps the
// (B, heads, T) row log-sum-exp instead of the (B, heads, T, T) probabilities. Tensors are
// counted without alignment padding.
struct DeviceEstimate {
  uint64_t master_params = 0;  // fp32 parameter buffer (ZeRO padding; ZeRO-3: the shard)
  uint64_t compute_weights =
      0;                      // bf16/fp16 copy the kernels read (ZeRO-3: of the shard); 0 in fp32
  uint64_t param_gather = 0;  // ZeRO-3: one layer + the non-layer tensors, compute dtype
  uint64_t grads = 0;         // fp32 gradients (ZeRO >= 2: the shard)
  uint64_t grad_buckets = 0;  // ZeRO >= 2: one layer + the non-layer tensors, fp32
  uint64_t optimizer = 0;     // AdamW m and v, fp32 (ZeRO >= 1: this rank's shard)
  uint64_t activations = 0;   // kept for backward: slots x per micro-batch + recompute buffer
  uint64_t scratch = 0;       // backward scratch, ping-pong gradients, the head's buffers
  uint64_t logits = 0;        // last stage: (B*T, padded vocab / tp) in the compute dtype
  uint64_t pipeline = 0;      // p2p buffers: gradients sent back and the received one
  uint64_t workspace = 0;     // DeviceReserve::workspace
  uint64_t runtime = 0;       // DeviceReserve::runtime

  // What the estimate was made for (for messages).
  std::string dtype;           // train.dtype
  int act_bytes = 4;           // bytes per activation / compute weight
  int stage = 0, dp_rank = 0;  // the rank's pipeline stage and data-parallel index
  int slots = 1;               // micro-batches in flight on the stage
  int microbatches = 1;        // per optimizer step per data-parallel rank
  uint64_t stage_params = 0;   // elements of the stage's flat parameter buffer (one TP rank)

  uint64_t total() const;
  // (label, bytes) of every part, in the order above, for messages and tests.
  std::vector<std::pair<std::string, uint64_t>> parts() const;
};

// The estimate for world rank `rank` of `grid` running `cfg` on the cuda backend in
// cfg.train.dtype. Layers are split as the trainer splits them (parallel.stage_layers or even).
// The config must be valid (validate()) for the grid.
DeviceEstimate estimate_device_memory(const Config& cfg, const Grid& grid, int rank,
                                      const DeviceReserve& reserve = {});

// Checks that rank `rank` fits in the device memory reported by cudaMemGetInfo before anything
// is allocated: throws UserError when estimate.total() > free_bytes, naming each part, the
// device, its free and total memory, the shortfall and the config changes that would fit (with
// their estimates). Returns the estimate when it fits (for the banner).
DeviceEstimate check_device_fit(const Config& cfg, const Grid& grid, int rank, size_t free_bytes,
                                size_t total_bytes, const std::string& device_name,
                                const DeviceReserve& reserve = {});

}  // namespace loom
