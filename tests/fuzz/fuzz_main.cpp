// libFuzzer driver of one entry point (LOOM_FUZZ_ENTRY): loom::UserError is the clean refusal of
// a bad input; any other exception escapes and aborts, which libFuzzer reports as a crash.
#include <cstddef>
#include <cstdint>

#include "core/check.h"
#include "tests/fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    loom::fuzz::LOOM_FUZZ_ENTRY(data, size);
  } catch (const loom::UserError&) {
  }
  return 0;
}
