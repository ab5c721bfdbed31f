// metrics.jsonl writer (flushed per line so a crash loses nothing already logged).
#include "train/metrics.h"

#include <filesystem>

#include "ckpt/file_util.h"
#include "core/check.h"
#include "core/log.h"

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

int rewind_metrics(const std::string& path, int step) {
  std::ifstream in(path);
  if (!in) return 0;
  std::string kept, line;
  int dropped = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const bool later = j.is_object() && j.contains("step") && j["step"].is_number() &&
                       j["step"].get<double>() > step;
    if (j.is_discarded() || later) {
      ++dropped;
      continue;
    }
    kept += line + "\n";
  }
  in.close();
  if (dropped > 0) write_text_file_atomic(path, kept);
  return dropped;
}

MetricsWriter::MetricsWriter(const std::string& run_dir, int start_step, bool tensorboard) {
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  if (ec) throw UserError(str("run.dir: cannot create '", run_dir, "': ", ec.message()));
  path_ = run_dir + "/metrics.jsonl";
  if (start_step > 0) {
    const int dropped = rewind_metrics(path_, start_step);
    if (dropped > 0)
      info(path_, ": dropped ", dropped, " line(s) after step ", start_step,
           " (logged after the checkpoint this run resumes from)");
  }
  out_.open(path_, start_step == 0 ? std::ios::trunc : std::ios::app);
  if (!out_) throw UserError(str("run.dir: cannot write '", path_, "'"));
  if (tensorboard) tb_ = std::make_unique<TensorBoardWriter>(run_dir, start_step);
}

void MetricsWriter::write(const nlohmann::ordered_json& line) {
  if (!out_.is_open()) return;
  out_ << line.dump() << "\n";
  out_.flush();
  if (tb_) tb_->write(line);
}

}  // namespace loom
