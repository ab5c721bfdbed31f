// MetricsWriter: rank 0 appends one JSON object per line to <run.dir>/metrics.jsonl (and, with
// log.tensorboard, the same scalars to a TensorBoard event file beside it).
#pragma once
#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "train/tensorboard.h"

namespace loom {

// One train line of the metrics contract.
struct TrainMetrics {
  int step = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  int64_t tokens = 0;  // cumulative
  double step_ms = 0, tokens_per_s = 0;
  double mfu = -1;  // fraction; < 0 (peak unknown) is written as null
  uint64_t mem_peak_bytes = 0;
  // Optional, after the contract keys: "loss_scale" when loss scaling is on (> 0), and
  // "skipped": true on a step whose overflowing gradients were not applied.
  double loss_scale = 0;
  bool skipped = false;
  // Optional per-step time breakdown of this rank (log.timers), written as "time": {...} after
  // the contract keys, in milliseconds: forward, backward, optimizer, tp_comm, pp_wait,
  // dp_comm, cp_comm (with context parallelism only), other (norm/loss reductions and
  // everything else).
  std::vector<std::pair<std::string, double>> time_ms;
  // Mixture of Experts only: "moe": {aux_loss, z_loss, tokens_per_expert, dropped}.
  nlohmann::ordered_json moe;
};
// {"step","loss","lr","grad_norm","tokens","step_ms","tokens_per_s","mfu","mem_peak_bytes"}
// in exactly this order.
nlohmann::ordered_json train_metrics_line(const TrainMetrics& m);

// Rewrites the metrics file at path (write_text_file_atomic) without the lines of steps after
// step: those of an attempt that ended (killed, or out of time) after its last checkpoint,
// which the resumed run logs again. Lines with no "step" stay; a line that is not JSON (cut
// short by a kill) goes. Returns how many lines were dropped; a missing file is no error.
int rewind_metrics(const std::string& path, int step);

class MetricsWriter {
 public:
  MetricsWriter() = default;
  // start_step 0: a fresh run, which starts a new file. start_step > 0: a run resumed from that
  // step's checkpoint, which appends after rewinding the file to it (rewind_metrics), so a
  // step an earlier attempt logged after its last checkpoint is not logged twice. tensorboard:
  // also write every line's scalars to an event file (train/tensorboard.h).
  MetricsWriter(const std::string& run_dir, int start_step, bool tensorboard = false);
  void write(const nlohmann::ordered_json& line);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
  std::unique_ptr<TensorBoardWriter> tb_;  // log.tensorboard
};

}  // namespace loom
