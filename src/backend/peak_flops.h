// Peak FLOP/s of the devices loom runs on: a datasheet table of GPUs, a measured cpu sgemm, and
// the cores a cpu rank can use.
#pragma once
#include <string>
#include <vector>

namespace loom {

// A GPU's dense datasheet figures (no 2:4 sparsity).
struct GpuPeak {
  const char* match;  // lower-case substring of the device name; first match wins
  const char* label;  // "H100 SXM"
  double half;        // bf16/fp16 tensor-core dense FLOP/s
  double fp32;        // plain fp32 FLOP/s
};

// The table entry for a device name (cudaDeviceProp::name, e.g. "NVIDIA H100 80GB HBM3",
// case-insensitive); nullptr when unknown.
const GpuPeak* find_gpu_peak(const std::string& device_name);

// Dense peak of a GPU by name for a compute dtype (bf16/fp16: tensor cores; fp32: plain fp32).
// 0 when the GPU is unknown.
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

}  // namespace loom
