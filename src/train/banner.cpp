// Trainer's start-up banner (config, peak FLOP/s) and end-of-run summary.
#include "train/banner.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/log.h"
#include "core/process.h"
#include "model/flops.h"
#include "train/trainer.h"

namespace loom {

namespace {
std::string plural_threads(int n) {
  return std::to_string(n) + (n == 1 ? " OpenMP thread" : " OpenMP threads");
}
// Process start, for the wall time of the summary (static initialization runs before main).
const std::chrono::steady_clock::time_point g_process_start = std::chrono::steady_clock::now();

}  // namespace

bool write_resolved_config(const Config& cfg, const std::string& path, std::string* error) {
  std::error_code ec;
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  std::ofstream out(path, std::ios::trunc);
  out << "# loom: the resolved config of this run (file, --set overrides and defaults)\n"
      << to_yaml(cfg);
  out.close();
  if (!out) {
    if (error) *error = ec ? ec.message() : "cannot write";
    return false;
  }
  return true;
}

void Trainer::print_banner() {
  run_clock_.reset();
  const std::string yaml_path = cfg_.run_dir() + "/config.yaml";
  if (pc_.rank == 0) {
    std::string err;
    if (!write_resolved_config(cfg_, yaml_path, &err))
      warn("cannot write the resolved config to ", yaml_path, ": ", err);
    for (const auto& l :
         format_config_banner(cfg_, *run_, count_params(cfg_.model), flops_per_token_, yaml_path))
      info(l);
  }
  peak_ = peak_flops_per_device(cfg_, pc_.world.mpi(), be_->device_name());
  const int ranks = pc_.world.size();
  if (peak_.source == "measured sgemm") {
    char cores[32];
    std::snprintf(cores, sizeof cores, "%.3g", peak_.cores_per_rank);
    info("cpu peak (measured sgemm): ", format_flops(peak_.per_device), " per rank, ",
         format_flops(peak_.per_device * ranks), " for the job = ", format_flops(peak_.per_core),
         " per core (best 1-thread sgemm) x ", cores, " cores per rank (",
         plural_threads(peak_.threads), " each; ", peak_.node_cores,
         peak_.node_cores == 1 ? " core for " : " cores for ", peak_.ranks_on_node,
         peak_.ranks_on_node == 1 ? " rank" : " ranks", " on this node)");
  } else if (peak_.per_device > 0) {
    info("peak for MFU: ", format_flops(peak_.per_device), " per device (", peak_.source, ")");
  } else {
    info("MFU not reported: ", peak_.source);
  }
  progress_.start(start_step_ + 1, run_clock_.ms());
}

void Trainer::print_summary(int last_step) {
  double peak = double(peak_rss_bytes());
  LOOM_MPI(MPI_Allreduce(MPI_IN_PLACE, &peak, 1, MPI_DOUBLE, MPI_MAX, pc_.world.mpi()));
  if (pc_.rank != 0) return;
  RunSummary r;
  r.first_step = start_step_ + 1;
  r.last_step = last_step;
  const int steps = std::max(0, last_step - start_step_);
  r.tokens = double(steps) * cfg_.train.global_batch_size * cfg_.model.seq_len;
  r.wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - g_process_start).count();
  // Time inside train_step (the steps' own time), else the loop's wall time.
  const auto& t = timers_.totals();
  r.step_s = t.count("step") ? t.at("step") / 1000.0
                             : (run_clock_.ms() - progress_.loop_start_ms()) / 1000.0;
  if (r.step_s > 0)
    r.mfu = model_flops_utilization(flops_per_token_, r.tokens / r.step_s, peak_.per_device,
                                    pc_.world.size());
  r.logged = progress_.logged();
  r.final_loss = progress_.final_loss();
  r.min_loss = progress_.min_loss();
  r.min_loss_step = progress_.min_loss_step();
  r.peak_mem_bytes = peak;
  r.metrics_path = metrics_.path();
  r.run_dir = cfg_.run_dir();
  for (const auto& l : format_summary(r)) info(l);
}

}  // namespace loom
