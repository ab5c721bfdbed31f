// GPU datasheet peaks, a measured cpu sgemm peak, and the cores a cpu rank can use.
#include "backend/peak_flops.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <utility>

#include "core/check.h"
#include "core/timer.h"
#include "kernels/matmul.h"

namespace loom {

namespace {

// Vendor datasheet dense figures (no 2:4 sparsity). More specific names come first.
const GpuPeak kGpuPeaks[] = {
    {"h100 pcie", "H100 PCIe", 756e12, 51e12}, {"h100 nvl", "H100 NVL", 835e12, 60e12},
    {"gh200", "GH200", 989e12, 67e12},         {"h200", "H200", 989e12, 67e12},
    {"h100", "H100 SXM", 989e12, 67e12},       {"a100", "A100", 312e12, 19.5e12},
};

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

const GpuPeak* find_gpu_peak(const std::string& device_name) {
  std::string n = lower(device_name);
  for (const GpuPeak& g : kGpuPeaks)
    if (n.find(g.match) != std::string::npos) return &g;
  return nullptr;
}

double cuda_peak_flops(const std::string& device_name, const std::string& dtype) {
  const GpuPeak* g = find_gpu_peak(device_name);
  if (!g) return 0;
  return dtype == "bf16" || dtype == "fp16" ? g->half : g->fp32;
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
  Stopwatch total;
  double best_ms = 0;
  for (int reps = 0; reps < 2 || total.ms() < budget_s * 1000.0; ++reps) {
    Stopwatch sw;
    once();
    const double ms = sw.ms();
    if (reps == 0 || ms < best_ms) best_ms = ms;
  }
  return 2.0 * double(n) * n * n / (std::max(best_ms, 1e-6) / 1000.0);
}

int physical_cores(const std::vector<int>& cpus) {
  std::set<std::pair<long, long>> cores;
  for (int cpu : cpus) {
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::ifstream core(dir + "core_id"), package(dir + "physical_package_id");
    long c = -1, p = -1;
    if (!(core >> c) || !(package >> p)) return int(cpus.size());
    cores.emplace(p, c);
  }
  return int(cores.size());
}

double cpu_cores_per_rank(int threads, int node_cores, int ranks_on_node) {
  if (threads < 1) threads = 1;
  if (node_cores < 1 || ranks_on_node < 1) return threads;
  return std::min(double(threads), double(node_cores) / ranks_on_node);
}

}  // namespace loom
