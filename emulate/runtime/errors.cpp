// CUDA emulator: sticky faults and their reports, the last error, and cudaGetErrorName/String.
#include <cstdio>
#include <map>
#include <string>

#include "state.h"

namespace loom_emu::rt {
namespace {

struct ErrorState {
  cudaError_t sticky = cudaSuccess;
  std::string report;  // of the first fault since the last clear
  cudaError_t last = cudaSuccess;
  Stats stats;
};

ErrorState& st() {
  static ErrorState s;
  return s;
}

}  // namespace

std::recursive_mutex& device_lock() {
  static std::recursive_mutex m;
  return m;
}

void fault(cudaError_t code, const std::string& report) {
  ErrorState& s = st();
  if (s.sticky != cudaSuccess) return;  // the first fault is the one reported
  s.sticky = code;
  s.last = code;
  s.report = report;
  std::fprintf(stderr, "loom CUDA emulator: %s\n", report.c_str());
}

cudaError_t sticky() { return st().sticky; }

cudaError_t api_error(cudaError_t code, const std::string& report) {
  if (code != cudaSuccess) {
    st().last = code;
    if (!report.empty()) std::fprintf(stderr, "loom CUDA emulator: %s\n", report.c_str());
  }
  return code;
}

cudaError_t take_last_error() {
  ErrorState& s = st();
  const cudaError_t e = s.last;
  if (s.sticky == cudaSuccess) s.last = cudaSuccess;  // a sticky fault stays
  return e;
}

cudaError_t peek_last_error() { return st().last; }

Stats& counters() { return st().stats; }

}  // namespace loom_emu::rt

namespace loom_emu {

std::string fault_report() {
  std::lock_guard<std::recursive_mutex> lock(rt::device_lock());
  return rt::st().report;
}

void clear_fault() {
  std::lock_guard<std::recursive_mutex> lock(rt::device_lock());
  rt::st().sticky = cudaSuccess;
  rt::st().report.clear();
  rt::st().last = cudaSuccess;
  rt::restore_red_zones();  // a reported out-of-bounds write is not reported again at cudaFree
}

Stats stats() {
  std::lock_guard<std::recursive_mutex> lock(rt::device_lock());
  return rt::st().stats;
}

}  // namespace loom_emu

namespace {

struct ErrorText {
  const char* name;
  const char* text;
};

const std::map<int, ErrorText>& error_table() {
  static const std::map<int, ErrorText> t = {
      {cudaSuccess, {"cudaSuccess", "no error"}},
      {cudaErrorInvalidValue, {"cudaErrorInvalidValue", "invalid argument"}},
      {cudaErrorMemoryAllocation, {"cudaErrorMemoryAllocation", "out of memory"}},
      {cudaErrorInitializationError, {"cudaErrorInitializationError", "initialization error"}},
      {cudaErrorInvalidConfiguration,
       {"cudaErrorInvalidConfiguration", "invalid configuration argument"}},
      {cudaErrorInvalidDevicePointer, {"cudaErrorInvalidDevicePointer", "invalid device pointer"}},
      {cudaErrorInvalidMemcpyDirection,
       {"cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"}},
      {cudaErrorStubLibrary, {"cudaErrorStubLibrary", "CUDA driver is a stub library"}},
      {cudaErrorInsufficientDriver,
       {"cudaErrorInsufficientDriver",
        "CUDA driver version is insufficient for CUDA runtime version"}},
      {cudaErrorNoDevice, {"cudaErrorNoDevice", "no CUDA-capable device is detected"}},
      {cudaErrorInvalidDevice, {"cudaErrorInvalidDevice", "invalid device ordinal"}},
      {cudaErrorInvalidResourceHandle,
       {"cudaErrorInvalidResourceHandle", "invalid resource handle"}},
      {cudaErrorNotReady, {"cudaErrorNotReady", "device not ready"}},
      {cudaErrorIllegalAddress,
       {"cudaErrorIllegalAddress", "an illegal memory access was encountered"}},
      {cudaErrorMisalignedAddress, {"cudaErrorMisalignedAddress", "misaligned address"}},
      {cudaErrorLaunchFailure, {"cudaErrorLaunchFailure", "unspecified launch failure"}},
      {cudaErrorNotSupported, {"cudaErrorNotSupported", "operation not supported"}},
  };
  return t;
}

}  // namespace

extern "C" {

cudaError_t cudaGetLastError(void) {
  std::lock_guard<std::recursive_mutex> lock(loom_emu::rt::device_lock());
  return loom_emu::rt::take_last_error();
}

cudaError_t cudaPeekAtLastError(void) {
  std::lock_guard<std::recursive_mutex> lock(loom_emu::rt::device_lock());
  return loom_emu::rt::peek_last_error();
}

const char* cudaGetErrorName(cudaError_t e) {
  const auto& t = error_table();
  const auto it = t.find((int)e);
  return it == t.end() ? "cudaErrorUnknown" : it->second.name;
}

// For the current sticky fault the text carries the emulator's report (kernel, block, thread,
// address), so that every "CUDA call failed" message names what went wrong.
const char* cudaGetErrorString(cudaError_t e) {
  static std::map<int, std::string> detailed;
  std::lock_guard<std::recursive_mutex> lock(loom_emu::rt::device_lock());
  const auto& t = error_table();
  const auto it = t.find((int)e);
  const char* text = it == t.end() ? "unrecognized error code" : it->second.text;
  const std::string report = loom_emu::fault_report();
  if (e != cudaSuccess && e == loom_emu::rt::sticky() && !report.empty()) {
    std::string& s = detailed[(int)e];
    const std::string want = std::string(text) + " [loom CUDA emulator: " + report + "]";
    if (s != want) s = want;  // pointers handed out earlier stay valid while the fault stays
    return s.c_str();
  }
  return text;
}

}  // extern "C"
