// MetricsWriter: rank 0 appends one JSON object per line to <run.dir>/metrics.jsonl.
#pragma once
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace loom {

class MetricsWriter {
 public:
  MetricsWriter() = default;
  // truncate: start a new file (fresh run) instead of appending (resumed run).
  MetricsWriter(const std::string& run_dir, bool truncate);
  void write(const nlohmann::ordered_json& line);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace loom
