// The emulated cublasLtMatmul's execution: the operand checks a GPU kernel would fault on, then
// the product (run at the call, or at each launch of a graph that captured it).
#include <sstream>

#include "cublaslt_impl.h"
#include "state.h"

namespace loom_emu::rt {

uint32_t alignment_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al) al >>= 1;
  return al;
}

// The bytes a column-major (rows, cols, ld) matrix spans.
size_t span(uint64_t rows, uint64_t cols, int64_t ld, cudaDataType t) {
  if (rows == 0 || cols == 0) return 0;
  return ((cols - 1) * (size_t)ld + rows) * type_bytes(t);
}

// Runs a validated call: what a kernel on the GPU would fault on (operands outside their
// allocations, or less aligned than the preference promised when the algorithm was chosen), then
// the product.
void execute(const LtCall& k) {
  const LtProblem pr{&k.desc, &k.a,    &k.b,   &k.c, &k.d, k.m, k.n,
                     k.k,     k.alpha, k.beta, k.A,  k.B,  k.C, k.D};
  struct Operand {
    const char* name;
    const void* p;
    size_t bytes;
    uint32_t promised;
  };
  const Operand ops[] = {
      {"A", k.A, span(k.a.rows, k.a.cols, k.a.ld, k.a.type), 1u << k.al[0]},
      {"B", k.B, span(k.b.rows, k.b.cols, k.b.ld, k.b.type), 1u << k.al[1]},
      {"C", pr.beta != 0.0f ? k.C : nullptr, span(k.c.rows, k.c.cols, k.c.ld, k.c.type),
       1u << k.al[2]},
      {"D", k.D, span(k.d.rows, k.d.cols, k.d.ld, k.d.type), 1u << k.al[3]},
      {"bias", (k.desc.epilogue & CUBLASLT_EPILOGUE_BIAS) ? k.desc.bias : nullptr,
       k.m * type_bytes(k.d.type), 1},
      {"GELU aux", (k.desc.epilogue & 128) ? k.desc.aux : nullptr,
       span(k.m, k.n, k.desc.aux_ld, k.d.type), 1},
      {"workspace", k.ws_bytes ? k.ws : nullptr, k.ws_bytes, 1},
  };
  counters().gemms++;
  for (const Operand& o : ops) {
    if (!o.p) continue;
    std::ostringstream os;
    os << "cublasLtMatmul (m " << k.m << ", n " << k.n << ", k " << k.k << "): operand " << o.name;
    if (!device_range_ok(o.p, o.bytes)) {
      os << " spans " << o.bytes << " bytes from "
         << describe_address(reinterpret_cast<uintptr_t>(o.p))
         << ", beyond its allocation (a wrong shape or leading dimension)";
      fault(cudaErrorIllegalAddress, os.str());
      return;  // as on a GPU: the fault surfaces at the next sync
    }
    if (alignment_of(o.p) < o.promised) {
      os << " at " << o.p << " is " << alignment_of(o.p) << "-byte aligned, but the preference "
         << "promised " << o.promised;
      fault(cudaErrorMisalignedAddress, os.str());
      return;
    }
  }
  DeviceWindow window;
  run_gemm(pr);
}

}  // namespace loom_emu::rt
