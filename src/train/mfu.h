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
  // cpu measurement details for the banner
  double measured = 0;     // best sgemm FLOP/s of node-local rank 0 of rank 0's node
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

// A cpu rank's share of the measured peak: 1 when the node's ranks x threads fit its cores,
// else the cores each rank gets (cores / ranks on the node) over the cores it measured with.
double cpu_rank_share(int threads, int node_cores, int ranks_on_node);

// The peak of one device for MFU: log.peak_flops when > 0; on cuda the table entry for
// `cuda_device_name`; on cpu (collective over `world`) node-local rank 0 measures the sgemm
// peak with this rank's OpenMP threads while the node's other ranks sleep, scaled by
// cpu_rank_share() for the node's cores in the ranks' affinity masks, and averaged over ranks.
PeakFlops peak_flops_per_device(const Config& cfg, MPI_Comm world,
                                const std::string& cuda_device_name = "");

// MFU = flops_per_token * tokens_per_s / (peak_per_device * ranks); -1 when the peak is unknown.
double model_flops_utilization(double flops_per_token, double tokens_per_s,
                               double peak_per_device, int ranks);

}  // namespace loom
