// Page-locked host staging for a step's inputs on the cuda backend (Backend::make_host_staging).
#pragma once
#include <cstddef>
#include <memory>

#include "backend/backend.h"

namespace loom {

// `bytes` of page-locked host memory whose upload() is a cudaMemcpyAsync on `stream` (a
// cudaStream_t) followed by an event; wait_writable() waits for that event only.
std::unique_ptr<HostStaging> make_pinned_staging(size_t bytes, void* stream);

}  // namespace loom
