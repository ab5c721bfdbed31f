// loom plan: reads the config and the cluster, runs the planner, prints text or JSON.
#include "cli/plan_command.h"

#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "backend/cpu_threads.h"
#include "backend/peak_flops.h"
#include "config/config.h"
#include "core/check.h"
#include "parallel/collective.h"
#include "plan/cluster.h"
#include "plan/planner.h"
#include "plan/report.h"

namespace loom::cli {

namespace {

// Available memory of this machine in bytes (MemAvailable), 0 when unknown.
double available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  double kib = 0;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024.0;
  return double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
}

// This machine as a cluster: one node, one cpu rank per physical core, its share of the
// available memory, the measured single-core sgemm peak, shared-memory MPI links.
plan::ClusterSpec local_cluster() {
  std::vector<int> cpus;
  for (unsigned i = 0; i < std::max(1u, std::thread::hardware_concurrency()); ++i)
    cpus.push_back(int(i));
  const int cores = std::max(1, physical_cores(cpus));
  std::ostringstream yaml;
  configure_cpu_threads(1);
  yaml << "name: this machine\ndevice: cpu\nnodes: 1\ngpus_per_node: " << cores
       << "\ngpu_memory_gib: " << available_memory() / cores / 1073741824.0
       << "\npeak_flops: " << measure_sgemm_flops(512, 0.3)
       << "\nefficiency: 0.35\nintra_node: {bandwidth_gbps: 40, latency_us: 1}"
       << "\ninter_node: {bandwidth_gbps: 10, latency_us: 20}\n";
  return plan::parse_cluster(yaml.str(), "(this machine: no --cluster given)");
}

}  // namespace

int cmd_plan(const Args& a) {
  if (a.operands.size() != 1)
    throw UserError(
        "loom plan needs one config file: loom plan CONFIG.yaml [--cluster "
        "CLUSTER.yaml] [--json] [--set key.path=value]...");
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) return 0;  // planning is one process's work; other ranks stay quiet

  const Config cfg = load_config(a.operands[0], a.overrides);
  const std::vector<std::string> errors = plan::config_errors(cfg);
  if (!errors.empty()) {
    std::string out;
    for (const auto& e : errors) out += "loom: error: " + a.operands[0] + ": " + e + "\n";
    std::fputs(out.c_str(), stderr);
    throw ReportedError{};
  }
  const std::string cluster_path = option(a, "--cluster", "");
  const plan::ClusterSpec cluster =
      cluster_path.empty() ? local_cluster() : plan::load_cluster(cluster_path);

  plan::ReportOptions ro;
  ro.config_path = a.operands[0];
  const plan::PlanModel pm = plan::plan_model(cfg, cluster, &ro.note);
  const plan::Plan p = plan::make_plan(pm, cluster);
  const bool json = a.options.count("--json") > 0;
  const std::string text = json ? plan::format_json(p, ro) : plan::format_text(p, ro);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  const std::string shortage = plan::no_fit_message(p);
  if (!shortage.empty()) throw UserError(shortage);
  return 0;
}

}  // namespace loom::cli
