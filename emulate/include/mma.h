// <mma.h> of the CPU emulation build: nvcuda::wmma with 16x16x16 fragments (__half or
// __nv_bfloat16 inputs, float accumulators), warp-collective *_sync calls and an opaque layout.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "loom_emu/wmma_api.h"

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

// A 16x16 tile spread over the 32 lanes of a warp, num_elements per lane in x[] (which element
// of the tile each one is: loom_emu::detail::wmma_element, deliberately not CUDA's layout).
template <typename Use, int M, int N, int K, typename T, typename Layout = void>
class fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator implements m16n16k16 only");
  static_assert(std::is_same_v<Use, accumulator>
                    ? std::is_same_v<T, float> && std::is_void_v<Layout>
                    : (std::is_same_v<T, __half> ||
                       std::is_same_v<T, __nv_bfloat16>)&&(std::is_same_v<Layout, row_major> ||
                                                           std::is_same_v<Layout, col_major>),
                "emulated fragments: matrix_a/matrix_b of __half or __nv_bfloat16 with row_major "
                "or col_major, accumulator of float without a layout");

 public:
  enum { num_elements = loom_emu::detail::kWmmaElems };
  T x[num_elements];
};

namespace detail {

template <typename Use>
constexpr loom_emu::detail::WmmaUse use_of() {
  return std::is_same_v<Use, matrix_a>   ? loom_emu::detail::WmmaUse::A
         : std::is_same_v<Use, matrix_b> ? loom_emu::detail::WmmaUse::B
                                         : loom_emu::detail::WmmaUse::Acc;
}

inline float to_float(float v) { return v; }
inline float to_float(__half v) { return __half2float(v); }
inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// The offset of tile element (r, c) in memory of leading dimension ldm.
inline unsigned offset(int e, unsigned ldm, bool row) {
  const unsigned r = (unsigned)e / 16, c = (unsigned)e % 16;
  return row ? r * ldm + c : c * ldm + r;
}

// Each lane reads (or writes) its own elements: these accesses are the lane's, checked like any
// other access of kernel code (bounds, alignment, shared-memory races).
template <typename Use, typename T, typename L>
void load(fragment<Use, 16, 16, 16, T, L>& f, const T* p, unsigned ldm, bool row) {
  using namespace loom_emu::detail;
  const int lane = wmma_access(WarpOp::WmmaLoad, p, ldm, row ? 0 : 1, (int)sizeof(T));
  for (int i = 0; i < kWmmaElems; i++)
    f.x[i] = p[offset(wmma_element(use_of<Use>(), lane, i), ldm, row)];
}

}  // namespace detail

template <typename Use, typename T, typename L>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, L>& f, const T* p, unsigned ldm) {
  static_assert(!std::is_same_v<Use, accumulator>, "an accumulator load takes a layout_t");
  detail::load(f, p, ldm, std::is_same_v<L, row_major>);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p,
                             unsigned ldm, layout_t layout) {
  detail::load(f, p, ldm, layout == mem_row_major);
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ldm, layout_t layout) {
  using namespace loom_emu::detail;
  const bool row = layout == mem_row_major;
  const int lane = wmma_access(WarpOp::WmmaStore, p, ldm, row ? 0 : 1, (int)sizeof(float));
  for (int i = 0; i < kWmmaElems; i++)
    p[detail::offset(wmma_element(WmmaUse::Acc, lane, i), ldm, row)] = f.x[i];
}

// Not a _sync call (as in CUDA): each lane sets its own elements.
template <typename Use, typename T, typename L>
void fill_fragment(fragment<Use, 16, 16, 16, T, L>& f, const T& v) {
  for (int i = 0; i < loom_emu::detail::kWmmaElems; i++) f.x[i] = v;
}

// D = A B + C. The inputs are exact in fp32; each element of D is the sum computed in double and
// rounded once to fp32.
template <typename T, typename LA, typename LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
              const fragment<matrix_a, 16, 16, 16, T, LA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  using loom_emu::detail::kWmmaElems;
  float fa[kWmmaElems], fb[kWmmaElems], acc[kWmmaElems];
  for (int i = 0; i < kWmmaElems; i++) {
    fa[i] = detail::to_float(a.x[i]);
    fb[i] = detail::to_float(b.x[i]);
    acc[i] = c.x[i];
  }
  loom_emu::detail::wmma_mma(fa, fb, acc);
  for (int i = 0; i < kWmmaElems; i++) d.x[i] = acc[i];
}

}  // namespace wmma
}  // namespace nvcuda
