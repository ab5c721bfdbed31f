// Logging with a rank prefix: "[loom r3 dp1 pp0 tp1] message". info() prints on the log rank only.
#pragma once
#include <string>

#include "core/check.h"

namespace loom {

// Sets the prefix printed before every line of this process (called once the grid is known).
void set_log_prefix(const std::string& prefix, bool is_log_rank);
const std::string& log_prefix();
bool is_log_rank();

void log_line(const std::string& line, bool to_stderr);

template <typename... Args>
void info(const Args&... args) {  // rank 0 only
  if (is_log_rank()) log_line(str(args...), false);
}
template <typename... Args>
void warn(const Args&... args) {
  log_line(str("warning: ", args...), true);
}

}  // namespace loom
