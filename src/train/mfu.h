// Model FLOPs utilization: the peak FLOP/s of one device (config, GPU table or measured sgemm).
#pragma once
#include <mpi.h>

#include <string>

#include "config/config.h"

namespace loom {

// Where the per-device peak came from, for the banner.
struct PeakFlops {
  double per_device = 0;  // FLOP/s of one rank's device; 0: unknown (MFU is then null)
  std::string source;     // e.g. "log.peak_flops", "NVIDIA H100 80GB HBM3, bf16 dense", ...
};

// Dense peak of a GPU from its name (cudaDeviceProp::name, e.g. "NVIDIA H100 80GB HBM3") for
// train.dtype (bf16/fp16: tensor-core dense figure; fp32: plain fp32). 0 when unknown.
double cuda_peak_flops(const std::string& device_name, const std::string& dtype);

// FLOP/s of a row-major n x n x n sgemm on this process with its current thread count: one
// warm-up call, then repetitions until budget_s has passed (at least one).
double measure_sgemm_flops(int n, double budget_s);

// The peak of one device for MFU: log.peak_flops when > 0; on cuda the table entry for
// `cuda_device_name`; on cpu the sgemm measured on every rank of `world` at once (collective:
// ranks sharing cores measure their fair share) and averaged over ranks.
PeakFlops peak_flops_per_device(const Config& cfg, MPI_Comm world,
                                const std::string& cuda_device_name = "");

// MFU = flops_per_token * tokens_per_s / (peak_per_device * ranks); -1 when the peak is unknown.
double model_flops_utilization(double flops_per_token, double tokens_per_s,
                               double peak_per_device, int ranks);

}  // namespace loom
