// Rank-prefixed logging; one write per line so output of concurrent ranks does not interleave.
#include "core/log.h"

#include <cstdio>

#include "core/crash_report.h"

namespace loom {
namespace {
std::string g_prefix = "[loom] ";
bool g_is_log_rank = true;
}  // namespace

void set_log_prefix(const std::string& prefix, bool is_log_rank_) {
  g_prefix = prefix;
  set_crash_prefix(prefix);
  g_is_log_rank = is_log_rank_;
}
const std::string& log_prefix() { return g_prefix; }
bool is_log_rank() { return g_is_log_rank; }

void log_line(const std::string& line, bool to_stderr) {
  std::string out = g_prefix + line + "\n";
  FILE* f = to_stderr ? stderr : stdout;
  std::fwrite(out.data(), 1, out.size(), f);
  std::fflush(f);
}

}  // namespace loom
