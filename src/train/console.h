// Operator console: pure functions that format rank 0's banner, step lines and run summary.
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "layout/run_layout.h"

namespace loom {

// Human units: "42s" "3m05s" "1h02m" "2d03h"; "950" "12.3k" "1.23M"; "151 MiB" "1.25 GiB";
// "0.42%" "12.3%" (fraction in, "n/a" when negative); "812 ms" "12.3 s"; "156 GFLOP/s".
std::string format_duration(double seconds);
std::string format_count(double x);
std::string format_bytes(double bytes);
std::string format_percent(double fraction);
std::string format_ms(double ms);
std::string format_flops(double flops_per_s);  // "156 GFLOP/s", "989 TFLOP/s"

// One logged step on the console.
struct StepLine {
  int step = 0, total_steps = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  double tokens_per_s = 0;
  double mfu = -1;      // fraction; < 0: unknown
  double step_ms = 0;
  double mem_peak_bytes = 0;
  double eta_s = -1;    // < 0: unknown
};
// "step  10/30 | loss 9.7543 | lr 5.00e-04 | grad norm 2.273 | 479 tok/s | MFU 1.23% |
//  1068 ms/step | mem 131 MiB (r0 peak) | ETA 21s"
std::string format_step_line(const StepLine& s);

// Rank 0's record of the logged steps: recent mean step time for the ETA, final and min loss.
class Progress {
 public:
  // The loop starts at `first_step` at time `now_ms` (any monotonic clock in ms).
  void start(int first_step, double now_ms);
  // A logged step ends at now_ms; returns the mean wall time per step over the recent log
  // points (up to `window` intervals back, the loop start included).
  double on_log(int step, double now_ms, double loss);
  // Seconds left at `mean_step_ms` per step after `step` of `total`.
  static double eta_s(int step, int total, double mean_step_ms);

  int first_step() const { return first_step_; }
  double loop_start_ms() const { return start_ms_; }
  int logged() const { return logged_; }
  double final_loss() const { return final_loss_; }
  double min_loss() const { return min_loss_; }
  int min_loss_step() const { return min_step_; }

 private:
  static constexpr size_t window = 3;
  std::deque<std::pair<int, double>> points_;  // (step completed, time) oldest first
  int first_step_ = 1, logged_ = 0, min_step_ = 0;
  double start_ms_ = 0, final_loss_ = 0, min_loss_ = 0;
};

// The resolved config in a few lines (key values; the full YAML goes to yaml_path); the grid,
// micro-batches and schedule as the run layout resolved them.
std::vector<std::string> format_config_banner(const Config& cfg, const RunLayout& run,
                                              int64_t params, double flops_per_token,
                                              const std::string& yaml_path);

// End-of-run summary.
struct RunSummary {
  int first_step = 1, last_step = 0;
  double tokens = 0;            // processed in this run
  double step_s = 0;            // time inside the steps (no eval, checkpoints, start-up)
  double wall_s = 0;            // since the process started
  double mfu = -1;              // of the mean tokens/s over step_s; < 0: unknown
  int logged = 0;               // logged steps (the losses below are theirs)
  double final_loss = 0, min_loss = 0;
  int min_loss_step = 0;
  double peak_mem_bytes = 0;    // largest rank's peak resident memory
  std::string metrics_path;
  std::string run_dir;          // for the plot command
};
std::vector<std::string> format_summary(const RunSummary& s);

}  // namespace loom
