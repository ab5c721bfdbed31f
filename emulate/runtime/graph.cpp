// CUDA emulator: stream capture and graphs. While a stream captures, the work enqueued on it
// (launches, copies, memsets, cuBLASLt calls, event records) is recorded instead of run, and a
// graph launch replays the records in order. As under cudaStreamCaptureModeGlobal, a call that
// could wait for the device or allocate is refused during a capture and invalidates it, so a
// captured region is proven free of them.
#include <memory>
#include <string>
#include <vector>

#include "state.h"

namespace loom_emu::rt {
namespace {

struct Capture {
  cudaStream_t stream = nullptr;
  std::vector<std::function<void()>> ops;
  std::string invalid;  // why the capture was invalidated (empty: valid)
};
struct Graph {
  std::vector<std::function<void()>> ops;
};
struct GraphExec {
  std::shared_ptr<const Graph> graph;
};

std::unique_ptr<Capture>& active() {
  static std::unique_ptr<Capture> c;
  return c;
}

}  // namespace

bool capturing(cudaStream_t s) { return active() && active()->stream == s && s != nullptr; }
bool any_capture() { return active() != nullptr; }

void record(cudaStream_t s, std::function<void()> op) {
  if (capturing(s)) active()->ops.push_back(std::move(op));
}

cudaError_t refuse_in_capture(const std::string& call) {
  if (!active()) return cudaSuccess;
  const std::string why = call +
                          " during the capture of a stream (it could wait for the device "
                          "or allocate; a captured region must not)";
  if (active()->invalid.empty()) active()->invalid = why;
  return api_error(cudaErrorStreamCaptureUnsupported, why);
}

}  // namespace loom_emu::rt

namespace loom_emu::detail {
bool capturing(cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(rt::device_lock());
  return rt::capturing(s);
}
void record(cudaStream_t s, std::function<void()> op) {
  std::lock_guard<std::recursive_mutex> lock(rt::device_lock());
  rt::record(s, std::move(op));
}
}  // namespace loom_emu::detail

using namespace loom_emu::rt;

extern "C" {

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  if (sticky() != cudaSuccess) return api_error(sticky());
  if (s == nullptr || s == cudaStreamLegacy || !valid_stream(s))
    return api_error(cudaErrorStreamCaptureUnsupported,
                     "cudaStreamBeginCapture: the legacy default stream or a dead stream");
  if (mode != cudaStreamCaptureModeGlobal)
    return api_error(
        cudaErrorInvalidValue,
        "cudaStreamBeginCapture: the emulator models cudaStreamCaptureModeGlobal only");
  if (active())
    return api_error(cudaErrorIllegalState,
                     "cudaStreamBeginCapture: a capture is already running (one at a time here)");
  active() = std::make_unique<Capture>();
  active()->stream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  if (!capturing(s))
    return api_error(cudaErrorIllegalState, "cudaStreamEndCapture: the stream is not capturing");
  std::unique_ptr<Capture> c = std::move(active());
  *graph = nullptr;
  if (!c->invalid.empty())
    return api_error(cudaErrorStreamCaptureInvalidated,
                     "cudaStreamEndCapture: the capture was invalidated by " + c->invalid);
  auto* g = new Graph{std::move(c->ops)};
  *graph = reinterpret_cast<cudaGraph_t>(g);
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  *status = capturing(s) ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long flags) {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  if (!graph) return api_error(cudaErrorInvalidValue, "cudaGraphInstantiate: no graph");
  // The exec keeps its own copy: destroying the graph afterwards is allowed, as in CUDA.
  auto copy = std::make_shared<const Graph>(*reinterpret_cast<Graph*>(graph));
  *exec = reinterpret_cast<cudaGraphExec_t>(new GraphExec{copy});
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  if (sticky() != cudaSuccess) return api_error(sticky());
  if (!exec || !valid_stream(s))
    return api_error(cudaErrorInvalidResourceHandle, "cudaGraphLaunch: bad graph or stream");
  if (any_capture())
    return api_error(cudaErrorStreamCaptureUnsupported,
                     "cudaGraphLaunch during a capture (not modelled by the emulator)");
  counters().graph_launches++;
  for (const auto& op : reinterpret_cast<GraphExec*>(exec)->graph->ops) {
    if (sticky() != cudaSuccess) break;  // a fault stops the device work, as on a GPU
    op();
  }
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  delete reinterpret_cast<GraphExec*>(exec);
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  delete reinterpret_cast<Graph*>(graph);
  return cudaSuccess;
}

}  // extern "C"
