// Builds the message of a failed LOOM_CHECK.
#include "core/check.h"

namespace loom::detail {

void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::string full = str(file, ":", line, ": check '", cond, "' failed");
  if (!msg.empty()) full += ": " + msg;
  throw InternalError(full);
}

}  // namespace loom::detail
