// Peak resident set size from getrusage.
#include "core/process.h"

#include <sys/resource.h>

namespace loom {

uint64_t peak_rss_bytes() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return uint64_t(ru.ru_maxrss) * 1024;
}

}  // namespace loom
