// metrics.jsonl writer (flushed per line so a crash loses nothing already logged).
#include "train/metrics.h"

#include <filesystem>

#include "core/check.h"

namespace loom {

MetricsWriter::MetricsWriter(const std::string& run_dir, bool truncate) {
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  if (ec) throw UserError(str("run.dir: cannot create '", run_dir, "': ", ec.message()));
  path_ = run_dir + "/metrics.jsonl";
  out_.open(path_, truncate ? std::ios::trunc : std::ios::app);
  if (!out_) throw UserError(str("run.dir: cannot write '", path_, "'"));
}

void MetricsWriter::write(const nlohmann::ordered_json& line) {
  if (!out_.is_open()) return;
  out_ << line.dump() << "\n";
  out_.flush();
}

}  // namespace loom
