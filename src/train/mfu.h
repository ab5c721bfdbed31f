// Model FLOPs utilization: the peak FLOP/s of one device (config, GPU table or measured sgemm,
// backend/peak_flops.h) and MFU.
#pragma once
#include <mpi.h>

#include <string>
#include <vector>

#include "config/config.h"

namespace loom {

// Where the per-device peak came from, for the banner.
struct PeakFlops {
  double per_device = 0;  // FLOP/s of one rank's device; 0: unknown (MFU is then null)
  std::string source;  // "log.peak_flops", "H100 SXM bf16/fp16 dense datasheet", "measured sgemm"
  // cpu measurement details (rank 0's node) for the banner
  double per_core = 0;        // best single-thread sgemm FLOP/s
  double cores_per_rank = 0;  // cpu_cores_per_rank()
  int threads = 0, node_cores = 0, ranks_on_node = 0;
};

// The peak of one device for MFU: log.peak_flops when > 0; on cuda the table entry for
// `device_name` (the backend's: Backend::device_name()); on cpu (collective over `world`) the best
// single-thread sgemm of one core, measured by node-local rank 0 while the node's other ranks
// sleep, times cpu_cores_per_rank() for the physical cores in the union of the node's ranks'
// affinity masks; averaged over ranks.
PeakFlops peak_flops_per_device(const Config& cfg, MPI_Comm world, const std::string& device_name);

// MFU = flops_per_token * tokens_per_s / (peak_per_device * ranks); -1 when the peak is unknown.
double model_flops_utilization(double flops_per_token, double tokens_per_s, double peak_per_device,
                               int ranks);

}  // namespace loom
