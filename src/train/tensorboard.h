// TensorBoard event files: TFRecord framing of Event protocol buffers holding scalar summaries,
// written by world rank 0 next to metrics.jsonl (log.tensorboard: true).
#pragma once
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace loom {

using Scalars = std::vector<std::pair<std::string, float>>;  // (tag, value)

// One TFRecord: uint64 length, masked CRC-32C of those 8 bytes, the data, masked CRC-32C of
// the data (all little-endian).
std::string tfrecord(const std::string& data);

// An Event message (event.proto): wall_time (1, double), step (2, int64) and either
// file_version (3, string) or a Summary (5) of Values with tag (1) and simple_value (2).
std::string event_file_version(double wall_time, const std::string& version);
std::string event_scalars(double wall_time, int64_t step, const Scalars& values);
// An Event with a SessionLog (7) of status START (1 = 1) at step: TensorBoard then drops the
// events of steps >= step that earlier files hold (steps logged again after a resume).
std::string event_session_start(double wall_time, int64_t step);

// The scalars of one metrics.jsonl line, tagged for TensorBoard: a train line gives
// train/{loss,lr,grad_norm,step_ms,tokens_per_s,mfu,mem_peak_bytes,loss_scale} (mfu when
// known, loss_scale when present) and time/<key> for each key of "time"; an eval line gives
// val/loss. Other lines (events such as a resume) give none.
Scalars tensorboard_scalars(const nlohmann::ordered_json& line);

class TensorBoardWriter {
 public:
  // Opens run_dir/events.out.tfevents.<unix time>.<hostname> (a ".<pid>" suffix when that name
  // is taken) and writes the file_version event. start_step 0: a new run, whose start removes
  // the event files an earlier run left in run_dir (as metrics.jsonl starts over); > 0: a run
  // resumed at that step, whose file starts with a session START at start_step + 1.
  TensorBoardWriter(const std::string& run_dir, int64_t start_step);
  // Appends one event of the line's scalars (none: nothing) and flushes it to the file.
  void write(const nlohmann::ordered_json& line);
  const std::string& path() const { return path_; }

 private:
  void append(const std::string& event);
  std::string path_;
  std::ofstream out_;
};

}  // namespace loom
