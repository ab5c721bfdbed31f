// Per-device peak FLOP/s (config, a GPU table by name, or a measured cpu sgemm) and MFU.
#include "train/mfu.h"

#include <omp.h>
#include <sched.h>

#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "backend/cpu_threads.h"
#include "backend/peak_flops.h"
#include "core/check.h"

namespace loom {

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

PeakFlops peak_flops_per_device(const Config& cfg, MPI_Comm world, const std::string& device_name) {
  PeakFlops p;
  if (cfg.log.peak_flops > 0) {
    p.per_device = cfg.log.peak_flops;
    p.source = "log.peak_flops";
    return p;
  }
  if (cfg.device == "cuda") {
    const GpuPeak* g = find_gpu_peak(device_name);
    if (!g) {
      p.source = device_name.empty()
                     ? "unknown GPU (set log.peak_flops)"
                     : "GPU '" + device_name + "' not in the table (set log.peak_flops)";
      return p;
    }
    const bool half = cfg.train.dtype == "bf16" || cfg.train.dtype == "fp16";
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

double model_flops_utilization(double flops_per_token, double tokens_per_s, double peak_per_device,
                               int ranks) {
  if (!(peak_per_device > 0) || ranks < 1) return -1;
  return flops_per_token * tokens_per_s / (peak_per_device * ranks);
}

}  // namespace loom
