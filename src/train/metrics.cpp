// metrics.jsonl writer (flushed per line so a crash loses nothing already logged).
#include "train/metrics.h"

#include <filesystem>

#include "core/check.h"

namespace loom {

nlohmann::ordered_json train_metrics_line(const TrainMetrics& m) {
  nlohmann::ordered_json j;  // insertion order is the contract's key order
  j["step"] = m.step;
  j["loss"] = m.loss;
  j["lr"] = m.lr;
  j["grad_norm"] = m.grad_norm;
  j["tokens"] = m.tokens;
  j["step_ms"] = m.step_ms;
  j["tokens_per_s"] = m.tokens_per_s;
  if (m.mfu >= 0)
    j["mfu"] = m.mfu;
  else
    j["mfu"] = nullptr;
  j["mem_peak_bytes"] = m.mem_peak_bytes;
  if (m.loss_scale > 0) j["loss_scale"] = m.loss_scale;
  if (m.skipped) j["skipped"] = true;
  if (!m.time_ms.empty()) {
    nlohmann::ordered_json t;
    for (const auto& [k, v] : m.time_ms) t[k] = v;
    j["time"] = t;
  }
  if (!m.moe.is_null()) j["moe"] = m.moe;
  return j;
}

MetricsWriter::MetricsWriter(const std::string& run_dir, bool truncate, bool tensorboard) {
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  if (ec) throw UserError(str("run.dir: cannot create '", run_dir, "': ", ec.message()));
  path_ = run_dir + "/metrics.jsonl";
  out_.open(path_, truncate ? std::ios::trunc : std::ios::app);
  if (!out_) throw UserError(str("run.dir: cannot write '", path_, "'"));
  if (tensorboard) tb_ = std::make_unique<TensorBoardWriter>(run_dir, truncate);
}

void MetricsWriter::write(const nlohmann::ordered_json& line) {
  if (!out_.is_open()) return;
  out_ << line.dump() << "\n";
  out_.flush();
  if (tb_) tb_->write(line);
}

}  // namespace loom
