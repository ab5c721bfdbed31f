// OpenBLAS kernel selection. OpenBLAS 0.3.21 does not recognise recent Xeons (e.g. family 6
// model 207) and falls back to its generic SSE3 "Prescott" kernels, 4-5x slower than its AVX2
// or AVX-512 ones. The choice is made when the library loads, so the fix is an environment
// variable set before the process starts: ensure_fast_blas() re-executes the program once
// with OPENBLAS_CORETYPE set when it finds the fallback on a CPU that can do better.
#pragma once

namespace loom {

// Call first thing in main(), before MPI_Init. Returns only when no re-exec was needed, or when
// the process was started through an explicit dynamic loader (ld-linux-x86-64.so.2 PROGRAM ...,
// as the GPU bundle's wrappers do): /proc/self/exe is then the loader, and re-executing it with
// the program's arguments would run the first argument as a program.
void ensure_fast_blas(char** argv);
// True when PATH (the target of /proc/self/exe) names a dynamic loader (ld-linux*, ld-*.so*).
bool is_dynamic_loader(const char* path);
// The OpenBLAS kernel family in use, e.g. "SkylakeX" (for the start-up banner).
const char* blas_core_name();

}  // namespace loom
