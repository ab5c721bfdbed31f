// CUDA emulator: page-locked host memory (cudaMallocHost, cudaFreeHost), which copies recorded in
// a stream capture may read when the graph runs.
#include <cstdlib>
#include <map>

#include "state.h"

namespace loom_emu::rt {
namespace {

// Page-locked host allocations: base -> bytes.
std::map<const void*, size_t>& pinned() {
  static std::map<const void*, size_t> s;
  return s;
}
}  // namespace

bool pinned_range(const void* p, size_t bytes) {
  auto it = pinned().upper_bound(p);
  if (it == pinned().begin()) return false;
  --it;
  const auto* base = static_cast<const char*>(it->first);
  const auto* q = static_cast<const char*>(p);
  return q + bytes <= base + it->second;
}

}  // namespace loom_emu::rt

using namespace loom_emu::rt;


extern "C" {

cudaError_t cudaMallocHost(void** p, size_t bytes) {
  LOOM_EMU_LOCK;
  LOOM_EMU_STICKY;
  if (any_capture()) return refuse_in_capture("cudaMallocHost");
  *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!*p) return api_error(cudaErrorMemoryAllocation);
  pinned()[*p] = bytes;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* p) {
  LOOM_EMU_LOCK;
  LOOM_EMU_STICKY;
  if (any_capture()) return refuse_in_capture("cudaFreeHost");
  if (!p) return cudaSuccess;
  if (!pinned().erase(p)) return api_error(cudaErrorInvalidValue, "cudaFreeHost: not pinned");
  std::free(p);
  return cudaSuccess;
}

}  // extern "C"
