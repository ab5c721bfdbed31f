// Model FLOPs utilization: the peak FLOP/s of one device (config, GPU table or measured sgemm).
#pragma once
#include <mpi.h>

#include <string>
#include <vector>

#include "config/config.h"

namespace loom {

// Where the per-device peak came from, for the banner.
struct PeakFlops {
  double per_device = 0;  // FLOP/s of one rank's device; 0: unknown (MFU is then null)
  std::string source;     // "log.peak_flops", "H100 SXM bf16/fp16 dense datasheet", "measured sgemm"
  // cpu measurement details (rank 0's node) for the banner
  double per_core = 0;        // best single-thread sgemm FLOP/s
  double cores_per_rank = 0;  // cpu_cores_per_rank()
  int threads = 0, node_cores = 0, ranks_on_node = 0;
};

// Dense peak of a GPU from its name (cudaDeviceProp::name, e.g. "NVIDIA H100 80GB HBM3") for
// train.dtype (bf16/fp16: tensor-core dense figure; fp32: plain fp32). 0 when unknown.
double cuda_peak_flops(const std::string& device_name, const std::string& dtype);

// Best FLOP/s of a row-major n x n x n sgemm on this process with its current thread count:
// one warm-up call, then repetitions until budget_s has passed (at least two); the fastest
// repetition counts (a peak, robust to other processes taking the core now and then).
double measure_sgemm_flops(int n, double budget_s);

// Physical cores (distinct package/core ids in sysfs) among the logical CPUs listed; the number
// of CPUs when the topology cannot be read.
int physical_cores(const std::vector<int>& cpus);

// Cores one cpu rank can use: its OpenMP threads, capped by its share of the node's physical
// cores (fractional when the node's ranks outnumber its cores).
double cpu_cores_per_rank(int threads, int node_cores, int ranks_on_node);

// The peak of one device for MFU: log.peak_flops when > 0; on cuda the table entry for
// `cuda_device_name`; on cpu (collective over `world`) the best single-thread sgemm of one core,
// measured by node-local rank 0 while the node's other ranks sleep, times cpu_cores_per_rank()
// for the physical cores in the union of the node's ranks' affinity masks; averaged over ranks.
PeakFlops peak_flops_per_device(const Config& cfg, MPI_Comm world,
                                const std::string& cuda_device_name = "");

// MFU = flops_per_token * tokens_per_s / (peak_per_device * ranks); -1 when the peak is unknown.
double model_flops_utilization(double flops_per_token, double tokens_per_s,
                               double peak_per_device, int ranks);

}  // namespace loom
