// loom plan: the planner's ranked layouts (text or JSON), or with --kernels one GPU's step kernels.
#include "cli/plan_command.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
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
#include "plan/kernel_model.h"
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

// This machine as a cluster: one node, one cpu rank per physical core (or `ranks` ranks when
// > 0), each rank's share of the available memory, the measured single-core sgemm peak,
// shared-memory MPI links.
plan::ClusterSpec local_cluster(int ranks) {
  std::vector<int> cpus;
  for (unsigned i = 0; i < std::max(1u, std::thread::hardware_concurrency()); ++i)
    cpus.push_back(int(i));
  const int cores = ranks > 0 ? ranks : std::max(1, physical_cores(cpus));
  std::ostringstream yaml;
  configure_cpu_threads(1);
  yaml << "name: this machine\ndevice: cpu\nnodes: 1\ngpus_per_node: " << cores
       << "\ngpu_memory_gib: " << available_memory() / cores / 1073741824.0
       << "\npeak_flops: " << measure_sgemm_flops(512, 0.3)
       << "\nefficiency: 0.35\nintra_node: {bandwidth_gbps: 40, latency_us: 1}"
       << "\ninter_node: {bandwidth_gbps: 10, latency_us: 20}\n";
  return plan::parse_cluster(yaml.str(), "(this machine: no --cluster given)");
}

// A positive number from --name (the default when absent), or one error naming the option.
double positive_option(const Args& a, const std::string& name, double fallback) {
  const double x = option_double(a, name, fallback);
  if (!(x > 0))
    throw UserError(str(name, ": expected a number > 0, got '", option(a, name, ""), "'"));
  return x;
}

// loom plan --kernels: one rank's kernels of one step at the config's micro-batch and tp.
int plan_kernels(const Args& a, const Config& cfg) {
  const std::string& path = a.operands[0];
  for (const char* other : {"--cluster", "--json", "--ranks", "--layout-args"})
    if (a.options.count(other))
      throw UserError(
          str("loom plan --kernels models one GPU from --gpu-flops, --gpu-bandwidth "
              "and --launch-us and prints text; drop ",
              other));
  if (cfg.parallel.pp != 1 || cfg.parallel.dp > 1 || cfg.parallel.cp != 1)
    throw UserError(str(path,
                        ": loom plan --kernels models one pipeline stage of one "
                        "data-parallel replica holding whole sequences: parallel.pp is ",
                        cfg.parallel.pp, ", parallel.dp ", cfg.parallel.dp, " and parallel.cp ",
                        cfg.parallel.cp,
                        "; use --set parallel.pp=1 --set parallel.dp=1 --set parallel.cp=1"));
  const int mb = cfg.parallel.micro_batch_size, gb = cfg.train.global_batch_size;
  if (mb < 1 || gb < mb || gb % mb != 0)
    throw UserError(str(path, ": train.global_batch_size ", gb,
                        " must be a multiple of parallel.micro_batch_size ", mb,
                        " (the micro-batches of one step); e.g. --set train.global_batch_size=",
                        std::max(mb, 1) * 4));
  plan::KernelShape s;
  s.model = cfg.model;
  s.micro_batch = mb;
  s.micro_batches = gb / mb;
  s.tp = cfg.parallel.tp;
  // A cpu config is modelled as the GPU run it would be: bf16 (as loom plan does).
  s.act_bytes = cfg.device == "cpu" || cfg.train.dtype != "fp32" ? 2 : 4;
  plan::GpuRoof g;
  g.tensor_flops = positive_option(a, "--gpu-flops", g.tensor_flops);
  if (a.options.count("--attention-flops"))  // else as loom's attention kernels run (GpuRoof)
    g.attention_flops = positive_option(a, "--attention-flops", g.tensor_flops);
  g.vector_flops = positive_option(a, "--vector-flops", g.vector_flops);
  g.bandwidth = positive_option(a, "--gpu-bandwidth", g.bandwidth);
  g.launch_s = option_double(a, "--launch-us", g.launch_s * 1e6) * 1e-6;
  const std::vector<std::string> errors = plan::kernel_shape_errors(s, g);
  if (!errors.empty()) throw UserError(str(path, ": ", errors.front()));
  const std::string text = plan::format_kernel_step(plan::kernel_step(s, g), s, g, path);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  return 0;
}

// The cluster cut to `ranks` devices: whole nodes of its gpus_per_node, or one node of fewer.
// False when `ranks` is neither (e.g. 6 on nodes of 4). The local cluster is one node of any size.
bool cut_cluster(plan::ClusterSpec& c, int ranks) {
  if (ranks % c.gpus_per_node == 0) {
    c.nodes = ranks / c.gpus_per_node;
    return true;
  }
  if (ranks > c.gpus_per_node) return false;
  c.nodes = 1, c.gpus_per_node = ranks;
  return true;
}

// The fastest layout as loom train's --set arguments (every key the plan searches).
std::string layout_args(const plan::Candidate& c) {
  return str("--set parallel.dp=", c.dp, " --set parallel.pp=", c.pp, " --set parallel.tp=", c.tp,
             " --set parallel.cp=", c.cp, " --set parallel.virtual_stages=", c.v,
             " --set parallel.micro_batch_size=", c.micro_batch,
             " --set parallel.sequence_parallel=", c.sp ? "true" : "false",
             " --set parallel.ep=", c.ep, " --set optimizer.zero_stage=", c.zero,
             " --set train.recompute=", plan::recompute_name(c.recompute));
}

// loom plan --ranks N --layout-args: the largest world of at most N ranks with a layout that
// fits, printed as one line "W --set parallel.dp=.. ..." (scripts/elastic.sh reads it).
int plan_layout_args(const Args& a, const Config& cfg, const std::string& cluster_path, int most) {
  const plan::ClusterSpec base =
      cluster_path.empty() ? local_cluster(most) : plan::load_cluster(cluster_path);
  std::string first_shortage;
  for (int w = most; w >= 1; --w) {
    plan::ClusterSpec cl = base;
    if (!cut_cluster(cl, w)) continue;
    const plan::Plan p = plan::make_plan(plan::plan_model(cfg, cl), cl);
    if (p.valid.empty()) {
      if (first_shortage.empty()) first_shortage = plan::no_fit_message(p);
      continue;
    }
    const std::string line = str(w, " ", layout_args(p.valid.front().c), "\n");
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
    return 0;
  }
  throw UserError(str(a.operands[0], ": no layout of ", most, " or fewer ranks",
                      cluster_path.empty() ? "" : str(" (whole nodes of ", cluster_path, ")"),
                      " can run this model and batch; with ", most, " ranks: ", first_shortage));
}

}  // namespace

int cmd_plan(const Args& a) {
  if (a.operands.size() != 1)
    throw UserError(
        "loom plan needs one config file: loom plan CONFIG.yaml [--cluster "
        "CLUSTER.yaml] [--ranks N] [--json | --layout-args] [--set key.path=value]..., or loom "
        "plan CONFIG.yaml --kernels "
        "[--gpu-flops F] [--attention-flops F] [--vector-flops F] [--gpu-bandwidth B] "
        "[--launch-us U] [--set key.path=value]...");
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
  if (a.options.count("--kernels")) return plan_kernels(a, cfg);
  const std::string cluster_path = option(a, "--cluster", "");
  const int ranks = option_int(a, "--ranks", 0);
  if (a.options.count("--ranks") && ranks < 1)
    throw UserError(str("--ranks: expected a whole number >= 1, got '", option(a, "--ranks", ""),
                        "'; e.g. --ranks 4"));
  if (a.options.count("--layout-args")) {
    if (ranks < 1 || a.options.count("--json"))
      throw UserError(
          "loom plan --layout-args prints the fastest layout of at most --ranks N "
          "ranks as --set arguments: give --ranks N and drop --json");
    return plan_layout_args(a, cfg, cluster_path, ranks);
  }
  plan::ClusterSpec cluster =
      cluster_path.empty() ? local_cluster(ranks) : plan::load_cluster(cluster_path);
  if (ranks > 0 && !cut_cluster(cluster, ranks))
    throw UserError(str("--ranks ", ranks, ": ", cluster_path, " has nodes of ",
                        cluster.gpus_per_node, " devices; give a multiple of ",
                        cluster.gpus_per_node, " or at most ", cluster.gpus_per_node));

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
