// Per-device peak FLOP/s (config, a GPU table by name, or a measured cpu sgemm) and MFU.
#include "train/mfu.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <set>
#include <thread>
#include <vector>

#include <omp.h>
#include <sched.h>

#include "core/check.h"
#include "core/exec_ctx.h"
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

namespace {

// Node-local rank 0 runs f while the node's other ranks sleep (a spinning MPI wait would take
// the cores away from the measurement); then all of them go on.
void one_per_node_quietly(MPI_Comm node, const std::function<void()>& f) {
  int local = 0;
  MPI_Comm_rank(node, &local);
  if (local == 0) f();
  MPI_Request req;
  MPI_Ibarrier(node, &req);
  for (int done = 0;;) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// The node's logical CPUs available to the job: the union of its ranks' affinity masks.
std::vector<int> node_cpus(MPI_Comm node) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) {
    for (int i = 0, n = int(std::thread::hardware_concurrency()); i < n; ++i) CPU_SET(i, &set);
  }
  constexpr int kWords = CPU_SETSIZE / 64;
  uint64_t mine[kWords] = {}, all[kWords] = {};
  for (int i = 0; i < CPU_SETSIZE; ++i)
    if (CPU_ISSET(i, &set)) mine[i / 64] |= uint64_t(1) << (i % 64);
  MPI_Allreduce(mine, all, kWords, MPI_UINT64_T, MPI_BOR, node);
  std::vector<int> cpus;
  for (int i = 0; i < CPU_SETSIZE; ++i)
    if (all[i / 64] >> (i % 64) & 1) cpus.push_back(i);
  return cpus;
}

}  // namespace

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
  // cpu: one core's sgemm peak, measured once per node, times the cores each rank can use.
  MPI_Comm node;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  p.threads = omp_get_max_threads();
  MPI_Comm_size(node, &p.ranks_on_node);
  p.node_cores = physical_cores(node_cpus(node));
  one_per_node_quietly(node, [&] {
    configure_cpu_threads(1);
    p.per_core = measure_sgemm_flops(512, 0.15);
    configure_cpu_threads(p.threads);
  });
  MPI_Bcast(&p.per_core, 1, MPI_DOUBLE, 0, node);
  MPI_Comm_free(&node);
  p.cores_per_rank = cpu_cores_per_rank(p.threads, p.node_cores, p.ranks_on_node);
  double mine = p.per_core * p.cores_per_rank, sum = 0;
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
