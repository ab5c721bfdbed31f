// CUDA emulator: the runtime API calls loom uses. One emulated device (sm_80); all work runs
// when it is enqueued, in issue order, so streams and events are complete once enqueued.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

#include "state.h"

namespace loom_emu::rt {
namespace {

struct Stream {
  unsigned flags;
};
struct Event {
  unsigned flags;
  bool recorded = false;
  std::chrono::steady_clock::time_point at;
};

std::set<const void*>& streams() {
  static std::set<const void*> s;
  return s;
}
std::set<const void*>& events() {
  static std::set<const void*> s;
  return s;
}

std::string hex(const void* p) {
  std::ostringstream os;
  os << p;
  return os.str();
}

// The device side of a copy or memset: [p, p + bytes) inside one live allocation.
cudaError_t check_device(const char* call, const char* what, const void* p, size_t bytes) {
  if (device_range_ok(p, bytes)) return cudaSuccess;
  return api_error(cudaErrorInvalidValue, std::string(call) + ": the " + what + " range [" +
                                              hex(p) + ", +" + std::to_string(bytes) +
                                              " bytes) is not inside one live device "
                                              "allocation (" +
                                              describe_address(reinterpret_cast<uintptr_t>(p)) +
                                              ")");
}

cudaError_t check_host(const char* call, const char* what, const void* p) {
  if (!in_arena(reinterpret_cast<uintptr_t>(p))) return cudaSuccess;
  return api_error(cudaErrorInvalidValue, std::string(call) + ": the " + what + " " + hex(p) +
                                              " is device memory, but the copy kind says host");
}

cudaError_t copy(const char* call, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                 cudaStream_t s) {
  if (sticky() != cudaSuccess) return api_error(sticky());
  if (!valid_stream(s))
    return api_error(cudaErrorInvalidResourceHandle, std::string(call) + ": invalid stream");
  if (bytes == 0) return cudaSuccess;
  if (kind == cudaMemcpyDefault) {
    const bool dd = in_arena(reinterpret_cast<uintptr_t>(dst));
    const bool sd = in_arena(reinterpret_cast<uintptr_t>(src));
    kind = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
              : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  }
  cudaError_t e = cudaSuccess;
  switch (kind) {
    case cudaMemcpyHostToHost:
      if ((e = check_host(call, "destination", dst)) == cudaSuccess)
        e = check_host(call, "source", src);
      break;
    case cudaMemcpyHostToDevice:
      if ((e = check_device(call, "destination", dst, bytes)) == cudaSuccess)
        e = check_host(call, "source", src);
      break;
    case cudaMemcpyDeviceToHost:
      if ((e = check_host(call, "destination", dst)) == cudaSuccess)
        e = check_device(call, "source", src, bytes);
      break;
    case cudaMemcpyDeviceToDevice:
      if ((e = check_device(call, "destination", dst, bytes)) == cudaSuccess)
        e = check_device(call, "source", src, bytes);
      break;
    default:
      return api_error(cudaErrorInvalidMemcpyDirection,
                       std::string(call) + ": unknown cudaMemcpyKind " + std::to_string(kind));
  }
  if (e != cudaSuccess) return e;
  if (capturing(s)) {
    // A graph's copy node reads host memory when the graph runs: it must be page-locked.
    const void* host = kind == cudaMemcpyHostToDevice   ? src
                       : kind == cudaMemcpyDeviceToHost ? dst
                                                        : nullptr;
    if (kind == cudaMemcpyHostToHost || (host && !pinned_range(host, bytes)))
      return refuse_in_capture(std::string(call) + " of pageable host memory");
    record(s, [dst, src, bytes] {
      DeviceWindow window;
      std::memmove(dst, src, bytes);
    });
    return cudaSuccess;
  }
  if (s == nullptr && any_capture()) return refuse_in_capture(call);
  DeviceWindow window;
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t set(const char* call, void* p, int value, size_t bytes, cudaStream_t s) {
  if (sticky() != cudaSuccess) return api_error(sticky());
  if (!valid_stream(s))
    return api_error(cudaErrorInvalidResourceHandle, std::string(call) + ": invalid stream");
  if (bytes == 0) return cudaSuccess;
  const cudaError_t e = check_device(call, "destination", p, bytes);
  if (e != cudaSuccess) return e;
  if (capturing(s)) {
    record(s, [p, value, bytes] {
      DeviceWindow window;
      std::memset(p, value, bytes);
    });
    return cudaSuccess;
  }
  if (s == nullptr && any_capture()) return refuse_in_capture(call);
  DeviceWindow window;
  std::memset(p, value, bytes);
  return cudaSuccess;
}

}  // namespace

bool valid_stream(cudaStream_t s) {
  return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread ||
         streams().count(s) != 0;
}

}  // namespace loom_emu::rt

using namespace loom_emu::rt;

extern "C" {

cudaError_t cudaMalloc(void** p, size_t bytes) {
  LOOM_EMU_LOCK;
  LOOM_EMU_STICKY;
  if (any_capture()) return refuse_in_capture("cudaMalloc");
  if (!p) return api_error(cudaErrorInvalidValue);
  counters().allocations++;
  cudaError_t e;
  *p = device_alloc(bytes, &e);
  return api_error(e);
}

cudaError_t cudaFree(void* p) {
  LOOM_EMU_LOCK;
  LOOM_EMU_STICKY;
  if (any_capture()) return refuse_in_capture("cudaFree");
  return p ? device_free(p) : cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  LOOM_EMU_LOCK;
  return copy("cudaMemcpy", dst, src, bytes, kind, nullptr);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s) {
  LOOM_EMU_LOCK;
  return copy("cudaMemcpyAsync", dst, src, bytes, kind, s);
}

// Row by row, each row checked and recorded (when capturing) as a 1-D copy.
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind, cudaStream_t s) {
  LOOM_EMU_LOCK;
  if (height > 0 && (width > dpitch || width > spitch))
    return api_error(cudaErrorInvalidPitchValue,
                     "cudaMemcpy2DAsync: width " + std::to_string(width) + " exceeds a pitch (" +
                         std::to_string(dpitch) + ", " + std::to_string(spitch) + ")");
  for (size_t r = 0; r < height; ++r) {
    const cudaError_t e = copy("cudaMemcpy2DAsync", static_cast<char*>(dst) + r * dpitch,
                               static_cast<const char*>(src) + r * spitch, width, kind, s);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  LOOM_EMU_LOCK;
  return set("cudaMemset", p, value, bytes, nullptr);
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s) {
  LOOM_EMU_LOCK;
  return set("cudaMemsetAsync", p, value, bytes, s);
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  LOOM_EMU_LOCK;
  LOOM_EMU_STICKY;
  *free_bytes = kTotalBytes - live_bytes();
  *total_bytes = kTotalBytes;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int d) {
  LOOM_EMU_LOCK;
  if (d != 0) return api_error(cudaErrorInvalidDevice);
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int d) {
  LOOM_EMU_LOCK;
  if (d != 0) return api_error(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof(*prop));
  // LOOM_EMU_DEVICE_NAME stands in for a real GPU's name (tests of what loom derives from it).
  const char* name = std::getenv("LOOM_EMU_DEVICE_NAME");
  std::snprintf(prop->name, sizeof(prop->name), "%s",
                name && *name ? name : "loom CUDA emulator (CPU)");
  prop->totalGlobalMem = kTotalBytes;
  prop->sharedMemPerBlock = 48 << 10;
  prop->sharedMemPerBlockOptin = 48 << 10;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->major = 8;
  prop->minor = 0;
  prop->multiProcessorCount = 1;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->unifiedAddressing = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  LOOM_EMU_LOCK;
  LOOM_EMU_STICKY;
  if (any_capture()) return refuse_in_capture("cudaDeviceSynchronize");
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  LOOM_EMU_LOCK;
  LOOM_EMU_STICKY;
  std::memset(a, 0, sizeof(*a));
  a->device = 0;
  if (is_device(p)) {
    a->type = cudaMemoryTypeDevice;
    a->devicePointer = const_cast<void*>(p);
  } else if (pinned_range(p, 1)) {
    a->type = cudaMemoryTypeHost;
    a->hostPointer = a->devicePointer = const_cast<void*>(p);
  } else {
    a->type = cudaMemoryTypeUnregistered;
    a->device = -2;
  }
  return cudaSuccess;
}

// ---- streams and events ----------------------------------------------------------------------
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  LOOM_EMU_LOCK;
  LOOM_EMU_STICKY;
  auto* st = new Stream{flags};
  streams().insert(st);
  *s = reinterpret_cast<cudaStream_t>(st);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  LOOM_EMU_LOCK;
  LOOM_EMU_STICKY;
  if (!s || !streams().erase(s))
    return api_error(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: not a live stream");
  delete reinterpret_cast<Stream*>(s);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  LOOM_EMU_LOCK;
  LOOM_EMU_STICKY;
  if (any_capture()) return refuse_in_capture("cudaStreamSynchronize");
  if (!valid_stream(s))
    return api_error(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: not a live stream");
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s) { return cudaStreamSynchronize(s); }

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  LOOM_EMU_LOCK;
  LOOM_EMU_STICKY;
  if (!valid_stream(s) || !events().count(e))
    return api_error(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: bad stream or event");
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
  LOOM_EMU_LOCK;
  LOOM_EMU_STICKY;
  auto* ev = new Event();
  ev->flags = flags;
  events().insert(ev);
  *e = reinterpret_cast<cudaEvent_t>(ev);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  LOOM_EMU_LOCK;
  LOOM_EMU_STICKY;
  if (!events().erase(e))
    return api_error(cudaErrorInvalidResourceHandle, "cudaEventDestroy: not a live event");
  delete reinterpret_cast<Event*>(e);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  LOOM_EMU_LOCK;
  LOOM_EMU_STICKY;
  if (!events().count(e) || !valid_stream(s))
    return api_error(cudaErrorInvalidResourceHandle, "cudaEventRecord: bad event or stream");
  auto* ev = reinterpret_cast<Event*>(e);
  auto mark = [ev] {
    ev->recorded = true;
    ev->at = std::chrono::steady_clock::now();
  };
  if (capturing(s)) {
    record(s, mark);
    return cudaSuccess;
  }
  mark();
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
  LOOM_EMU_LOCK;
  LOOM_EMU_STICKY;
  if (any_capture()) return refuse_in_capture("cudaEventQuery/cudaEventSynchronize");
  if (!events().count(e)) return api_error(cudaErrorInvalidResourceHandle);
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) { return cudaEventQuery(e); }

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  LOOM_EMU_LOCK;
  LOOM_EMU_STICKY;
  if (any_capture()) return refuse_in_capture("cudaEventElapsedTime");
  if (!events().count(start) || !events().count(end))
    return api_error(cudaErrorInvalidResourceHandle);
  auto* a = reinterpret_cast<Event*>(start);
  auto* b = reinterpret_cast<Event*>(end);
  if (!a->recorded || !b->recorded || (a->flags & cudaEventDisableTiming) ||
      (b->flags & cudaEventDisableTiming))
    return api_error(cudaErrorInvalidResourceHandle,
                     "cudaEventElapsedTime: an event was not recorded or has timing disabled");
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return cudaSuccess;
}

}  // extern "C"
