// Per-device peak FLOP/s (config, a GPU table by name, or a measured cpu sgemm) and MFU.
#include "train/mfu.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/timer.h"
#include "kernels/matmul.h"

namespace loom {

namespace {

struct GpuPeak {
  const char* match;  // lower-case substring of the device name; first match wins
  const char* label;
  double half;        // bf16/fp16 tensor-core dense FLOP/s
  double fp32;        // plain fp32 FLOP/s
};

// Vendor datasheet dense figures (no 2:4 sparsity). More specific names come first.
const GpuPeak kGpuPeaks[] = {
    {"h100 pcie", "H100 PCIe", 756e12, 51e12},
    {"h100 nvl", "H100 NVL", 835e12, 60e12},
    {"gh200", "GH200", 989e12, 67e12},
    {"h200", "H200", 989e12, 67e12},
    {"h100", "H100 SXM", 989e12, 67e12},
    {"a100", "A100", 312e12, 19.5e12},
};

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

const GpuPeak* find_gpu(const std::string& device_name) {
  std::string n = lower(device_name);
  for (const GpuPeak& g : kGpuPeaks)
    if (n.find(g.match) != std::string::npos) return &g;
  return nullptr;
}

bool half_precision(const std::string& dtype) { return dtype == "bf16" || dtype == "fp16"; }

}  // namespace

double cuda_peak_flops(const std::string& device_name, const std::string& dtype) {
  const GpuPeak* g = find_gpu(device_name);
  if (!g) return 0;
  return half_precision(dtype) ? g->half : g->fp32;
}

double measure_sgemm_flops(int n, double budget_s) {
  LOOM_CHECK(n >= 16, "sgemm size ", n);
  const size_t elems = size_t(n) * size_t(n);
  std::vector<float> a(elems), b(elems), c(elems);
  for (size_t i = 0; i < elems; ++i) {
    a[i] = float(int(i * 7919 % 1000)) * 1e-3f - 0.5f;
    b[i] = float(int(i * 104729 % 1000)) * 1e-3f - 0.5f;
  }
  auto once = [&] {
    cpu::gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  };
  once();  // warm-up: thread pool start, page faults
  Stopwatch sw;
  int reps = 0;
  do {
    once();
    ++reps;
  } while (sw.ms() < budget_s * 1000.0);
  return 2.0 * double(n) * n * n * reps / (sw.ms() / 1000.0);
}

PeakFlops peak_flops_per_device(const Config& cfg, MPI_Comm world,
                                const std::string& cuda_device_name) {
  PeakFlops p;
  if (cfg.log.peak_flops > 0) {
    p.per_device = cfg.log.peak_flops;
    p.source = "log.peak_flops";
    return p;
  }
  if (cfg.device == "cuda") {
    const GpuPeak* g = find_gpu(cuda_device_name);
    if (!g) {
      p.source = cuda_device_name.empty()
                     ? "unknown GPU (set log.peak_flops)"
                     : "GPU '" + cuda_device_name + "' not in the table (set log.peak_flops)";
      return p;
    }
    const bool half = half_precision(cfg.train.dtype);
    p.per_device = half ? g->half : g->fp32;
    p.source = str(g->label, half ? " bf16/fp16 dense" : " fp32", " datasheet");
    return p;
  }
  // cpu: every rank measures at the same time, so ranks that share cores (oversubscription,
  // hyper-threads) each see their share and the mean over ranks times ranks is the machine's.
  MPI_Barrier(world);
  double mine = measure_sgemm_flops(512, 0.1), sum = 0;
  int ranks = 1;
  MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, world);
  MPI_Comm_size(world, &ranks);
  p.per_device = sum / ranks;
  p.source = "measured sgemm";
  return p;
}

double model_flops_utilization(double flops_per_token, double tokens_per_s,
                               double peak_per_device, int ranks) {
  if (!(peak_per_device > 0) || ranks < 1) return -1;
  return flops_per_token * tokens_per_s / (peak_per_device * ranks);
}

}  // namespace loom
