// Readings of this process that are not loom's own counters.
#pragma once
#include <cstdint>

namespace loom {

// Peak resident set size of this process in bytes (getrusage).
uint64_t peak_rss_bytes();

}  // namespace loom
