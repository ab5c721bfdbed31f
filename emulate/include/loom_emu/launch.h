// Kernel launches in the CUDA emulator: LOOM_EMU_LAUNCH runs a grid on the host, block by block.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include "loom_emu/device_api.h"

namespace loom_emu {
namespace detail {

struct LaunchInfo {
  const char* kernel;  // the kernel expression as written at the launch ("map2_kernel<kV>")
  const char* file;
  int line;
  dim3 grid, block;
  size_t smem;  // dynamic shared memory bytes
  cudaStream_t stream;
};

// One kernel argument that is a pointer (checked to be device memory or null at launch).
struct PointerArg {
  const void* p;
  int index;
};

using ThreadFn = void (*)(void* closure);
// Checks the configuration (a bad one is a launch error for cudaGetLastError, as in CUDA) and
// the pointer arguments, then runs every block: fn(closure) is one thread's kernel call.
void launch(const LaunchInfo& info, ThreadFn fn, void* closure, const PointerArg* ptrs, int nptrs);
// Stream capture (runtime/graph.cpp): while `stream` captures, a launch is recorded (with copies
// of its arguments) and runs when the graph is launched.
bool capturing(cudaStream_t stream);
void record(cudaStream_t stream, std::function<void()> op);

}  // namespace detail

// Launch(...)(args...) is kernel<<<grid, block, smem, stream>>>(args...): the arguments are
// copied once at launch (as CUDA copies kernel parameters) and every thread gets its own copy.
template <typename Body>
class Launch {
 public:
  Launch(const char* kernel, const char* file, int line, dim3 grid, dim3 block, size_t smem,
         cudaStream_t stream, Body body)
      : info_{kernel, file, line, grid, block, smem, stream}, body_(body) {}

  template <typename... A>
  void operator()(A&&... a) {
    using Args = std::tuple<std::decay_t<A>...>;
    if (detail::capturing(info_.stream)) {  // run later, on copies (as a graph node keeps them)
      auto args = std::make_shared<Args>(std::forward<A>(a)...);
      auto body = std::make_shared<Body>(body_);
      const detail::LaunchInfo info = info_;
      detail::record(info_.stream, [info, body, args] { run(info, *body, *args); });
      return;
    }
    Args args(std::forward<A>(a)...);
    run(info_, body_, args);
  }

 private:
  template <typename Args>
  static void run(const detail::LaunchInfo& info, Body& body, Args& args) {
    detail::PointerArg ptrs[std::tuple_size_v<Args> + 1];
    int n = 0;
    collect(args, ptrs, n, std::make_index_sequence<std::tuple_size_v<Args>>{});
    struct Closure {
      Body* body;
      Args* args;
    } c{&body, &args};
    detail::launch(
        info,
        [](void* p) {
          auto* cl = static_cast<Closure*>(p);
          std::apply(*cl->body, *cl->args);
        },
        &c, ptrs, n);
  }

  template <typename Tuple, size_t... I>
  static void collect(const Tuple& t, detail::PointerArg* out, int& n, std::index_sequence<I...>) {
    (add(std::get<I>(t), (int)I, out, n), ...);
  }
  template <typename T>
  static void add(const T& v, int index, detail::PointerArg* out, int& n) {
    if constexpr (std::is_pointer_v<T>) out[n++] = detail::PointerArg{(const void*)v, index};
  }

  detail::LaunchInfo info_;
  Body body_;
};

}  // namespace loom_emu

// kernel<<<grid, block, smem, stream>>> for the emulator: a generic lambda calls the kernel so
// that its template arguments are deduced from the launch arguments, as with <<<>>>.
#define LOOM_EMU_LAUNCH(kernel, grid, block, smem, stream)                   \
  ::loom_emu::Launch(#kernel, __FILE__, __LINE__, grid, block, smem, stream, \
                     [](auto... loom_emu_args_) { kernel(loom_emu_args_...); })
