// CUDA emulator: the subset of cuBLASLt that loom uses, from NVIDIA's documented semantics.
// Anything outside it (other attributes, layouts orders, types, epilogues, pointer modes) is
// refused with CUBLAS_STATUS_NOT_SUPPORTED and a message, never approximated.
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <sstream>
#include <string>

#include "cublaslt_impl.h"
#include "state.h"

namespace loom_emu::rt {
namespace {

constexpr uint64_t kAlgoMagic = 0x6c6f6f6d456d754cull;  // marks algos made by the heuristic
bool g_epilogues = true;

std::set<const void*>& live() {
  static std::set<const void*> s;
  return s;
}

template <typename T>
T* track(T* p) {
  live().insert(p);
  return p;
}

template <typename T, typename H>
T* get(H h) {
  return live().count((const void*)h) ? reinterpret_cast<T*>(h) : nullptr;
}

cublasStatus_t refuse(cublasStatus_t st, const std::string& why) {
  std::fprintf(stderr, "loom CUDA emulator: cuBLASLt: %s\n", why.c_str());
  return st;
}

bool supported_types(const LtDesc& d, cudaDataType ab, cudaDataType cd) {
  if (d.compute == CUBLAS_COMPUTE_32F_FAST_TF32) return ab == CUDA_R_32F && cd == CUDA_R_32F;
  if (ab == CUDA_R_32F) return cd == CUDA_R_32F;
  if (ab == CUDA_R_16BF || ab == CUDA_R_16F) return cd == ab || cd == CUDA_R_32F;
  return false;
}

bool supported_epilogue(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}

// Shapes, types, epilogue: "" when cuBLASLt's documented rules hold, else why not.
std::string validate(const LtDesc& d, const LtLayout& a, const LtLayout& b, const LtLayout& c,
                     const LtLayout& dd, uint64_t* m, uint64_t* n, uint64_t* k) {
  *m = d.trans_a == CUBLAS_OP_N ? a.rows : a.cols;
  *k = d.trans_a == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t kb = d.trans_b == CUBLAS_OP_N ? b.rows : b.cols;
  *n = d.trans_b == CUBLAS_OP_N ? b.cols : b.rows;
  std::ostringstream os;
  if (kb != *k)
    os << "op(A) is " << *m << " x " << *k << " but op(B) has " << kb << " rows";
  else if (c.rows != *m || c.cols != *n || dd.rows != *m || dd.cols != *n)
    os << "C/D are " << c.rows << " x " << c.cols << " / " << dd.rows << " x " << dd.cols
       << ", op(A) op(B) is " << *m << " x " << *n;
  else if (a.ld < (int64_t)std::max<uint64_t>(1, a.rows) ||
           b.ld < (int64_t)std::max<uint64_t>(1, b.rows) ||
           c.ld < (int64_t)std::max<uint64_t>(1, c.rows) ||
           dd.ld < (int64_t)std::max<uint64_t>(1, dd.rows))
    os << "a leading dimension is smaller than its matrix's rows (lda " << a.ld << ", ldb " << b.ld
       << ", ldc " << c.ld << ", ldd " << dd.ld << ")";
  else if (a.type != b.type || c.type != dd.type || !supported_types(d, a.type, c.type))
    os << "type combination A " << a.type << ", B " << b.type << ", C " << c.type << ", D "
       << dd.type << " with compute type " << d.compute << " is not emulated";
  else if (!supported_epilogue(d.epilogue))
    os << "epilogue " << d.epilogue << " is not emulated";
  else if ((d.epilogue & CUBLASLT_EPILOGUE_BIAS) && !d.bias)
    os << "a bias epilogue without CUBLASLT_MATMUL_DESC_BIAS_POINTER";
  else if ((d.epilogue & 128) && (!d.aux || d.aux_ld < (int64_t)*m || d.aux_ld % 8 != 0))
    os << "a GELU_AUX epilogue needs the aux pointer and an aux leading dimension divisible by 8 "
          "and >= the rows of D (got "
       << d.aux_ld << ", rows " << *m << ")";
  return os.str();
}

}  // namespace
}  // namespace loom_emu::rt

using namespace loom_emu::rt;

void loom_emu::set_cublaslt_epilogues(bool on) {
  std::lock_guard<std::recursive_mutex> lock(device_lock());
  g_epilogues = on;
}


extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  LOOM_EMU_LOCK;
  *h = reinterpret_cast<cublasLtHandle_t>(track(new int(0)));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  LOOM_EMU_LOCK;
  if (!live().erase(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete reinterpret_cast<int*>(h);
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    default:
      return "CUBLAS_STATUS_UNKNOWN";
  }
}

const char* cublasLtGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    default:
      return "unknown error";
  }
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  LOOM_EMU_LOCK;
  if ((compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32) ||
      scale != CUDA_R_32F)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "only fp32 compute and scale types are emulated");
  counters().lt_descs++;
  auto* p = track(new LtDesc{});
  p->compute = compute;
  p->scale = scale;
  *d = reinterpret_cast<cublasLtMatmulDesc_t>(p);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  LOOM_EMU_LOCK;
  if (!live().erase(d)) return CUBLAS_STATUS_INVALID_VALUE;
  delete reinterpret_cast<LtDesc*>(d);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t h,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t bytes) {
  LOOM_EMU_LOCK;
  LtDesc* d = get<LtDesc>(h);
  if (!d || !buf) return CUBLAS_STATUS_INVALID_VALUE;
  auto set = [&](auto* field) {
    if (bytes != sizeof(*field))
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "attribute " + std::to_string(attr) + ": size " +
                                                     std::to_string(bytes) +
                                                     " != " + std::to_string(sizeof(*field)));
    std::memcpy(field, buf, bytes);
    return CUBLAS_STATUS_SUCCESS;
  };
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return set(&d->trans_a);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return set(&d->trans_b);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return set(&d->epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return set(&d->bias);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return set(&d->aux);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return set(&d->aux_ld);
    default:
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                    "matmul descriptor attribute " + std::to_string(attr) + " is not emulated");
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  LOOM_EMU_LOCK;
  if (type != CUDA_R_32F && type != CUDA_R_16BF && type != CUDA_R_16F)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "matrix type " + std::to_string(type));
  counters().lt_layouts++;
  *l = reinterpret_cast<cublasLtMatrixLayout_t>(track(new LtLayout{type, rows, cols, ld}));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  LOOM_EMU_LOCK;
  if (!live().erase(l)) return CUBLAS_STATUS_INVALID_VALUE;
  delete reinterpret_cast<LtLayout*>(l);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  LOOM_EMU_LOCK;
  *p = reinterpret_cast<cublasLtMatmulPreference_t>(track(new LtPref{}));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  LOOM_EMU_LOCK;
  if (!live().erase(p)) return CUBLAS_STATUS_INVALID_VALUE;
  delete reinterpret_cast<LtPref*>(p);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t h,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t bytes) {
  LOOM_EMU_LOCK;
  LtPref* p = get<LtPref>(h);
  if (!p || !buf) return CUBLAS_STATUS_INVALID_VALUE;
  uint32_t* field = nullptr;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      if (bytes != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&p->max_workspace, buf, bytes);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      field = &p->align[0];
      break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      field = &p->align[1];
      break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      field = &p->align[2];
      break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      field = &p->align[3];
      break;
    default:
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                    "preference attribute " + std::to_string(attr) + " is not emulated");
  }
  if (bytes != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(field, buf, bytes);
  return CUBLAS_STATUS_SUCCESS;
}

// One "algorithm" for every valid problem: it records the problem and the alignments the
// preference promised, which cublasLtMatmul then holds the operands to.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t dh,
                                              cublasLtMatrixLayout_t ah, cublasLtMatrixLayout_t bh,
                                              cublasLtMatrixLayout_t ch, cublasLtMatrixLayout_t ddh,
                                              cublasLtMatmulPreference_t ph, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* returned) {
  LOOM_EMU_LOCK;
  const LtDesc* d = get<LtDesc>(dh);
  const LtLayout *a = get<LtLayout>(ah), *b = get<LtLayout>(bh), *c = get<LtLayout>(ch),
                 *dd = get<LtLayout>(ddh);
  const LtPref* p = get<LtPref>(ph);
  if (!get<int>(h) || !d || !a || !b || !c || !dd || !p || requested < 1 || !returned)
    return CUBLAS_STATUS_INVALID_VALUE;
  counters().lt_heuristics++;
  *returned = 0;
  uint64_t m, n, k;
  const std::string bad = validate(*d, *a, *b, *c, *dd, &m, &n, &k);
  if (!bad.empty()) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "no algorithm: " + bad);
  if (!g_epilogues && d->epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    return CUBLAS_STATUS_NOT_SUPPORTED;  // set_cublaslt_epilogues(false): exercise fallbacks
  // Element alignment at least (the bias and aux pointers are judged by their values, as the
  // documentation says the heuristic does).
  const uint32_t ab = (uint32_t)type_bytes(a->type), cd = (uint32_t)type_bytes(c->type);
  if (p->align[0] < ab || p->align[1] < ab || p->align[2] < cd || p->align[3] < cd ||
      (d->bias && alignment_of(d->bias) < cd) || (d->aux && alignment_of(d->aux) < cd))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "no algorithm: operands below element alignment");
  cublasLtMatmulHeuristicResult_t& r = results[0];
  std::memset(&r, 0, sizeof(r));
  r.algo.data[0] = kAlgoMagic;
  r.algo.data[1] = m;
  r.algo.data[2] = n;
  r.algo.data[3] = k;
  r.algo.data[4] = (uint64_t)d->epilogue | ((uint64_t)a->type << 32);
  for (int i = 0; i < 4; i++)
    reinterpret_cast<uint8_t*>(&r.algo.data[5])[i] = (uint8_t)__builtin_ctz(p->align[i]);
  r.workspaceSize = 0;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t dh, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t ah, const void* B,
                              cublasLtMatrixLayout_t bh, const void* beta, const void* C,
                              cublasLtMatrixLayout_t ch, void* D, cublasLtMatrixLayout_t ddh,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t ws_bytes,
                              cudaStream_t stream) {
  LOOM_EMU_LOCK;
  const LtDesc* d = get<LtDesc>(dh);
  const LtLayout *a = get<LtLayout>(ah), *b = get<LtLayout>(bh), *c = get<LtLayout>(ch),
                 *dd = get<LtLayout>(ddh);
  if (!get<int>(h) || !d || !a || !b || !c || !dd || !alpha || !beta || !algo)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (sticky() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  if (!valid_stream(stream)) return refuse(CUBLAS_STATUS_INVALID_VALUE, "invalid stream");
  uint64_t m, n, k;
  const std::string bad = validate(*d, *a, *b, *c, *dd, &m, &n, &k);
  if (!bad.empty()) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, bad);
  if (algo->data[0] != kAlgoMagic || algo->data[1] != m || algo->data[2] != n ||
      algo->data[3] != k || algo->data[4] != ((uint64_t)d->epilogue | ((uint64_t)a->type << 32)))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "the algo was not found for this problem");
  if (C == D && (c->ld != dd->ld || c->type != dd->type))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "in place (C == D) needs Cdesc equal to Ddesc");
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  // The call as a graph node keeps it (LtCall: copies of the descriptors and scalars).
  auto call = std::make_shared<LtCall>(LtCall{*d,
                                              *a,
                                              *b,
                                              *c,
                                              *dd,
                                              m,
                                              n,
                                              k,
                                              *static_cast<const float*>(alpha),
                                              *static_cast<const float*>(beta),
                                              A,
                                              B,
                                              C,
                                              D,
                                              {},
                                              workspace,
                                              ws_bytes});
  std::memcpy(call->al, &algo->data[5], sizeof call->al);
  if (capturing(stream)) {
    record(stream, [call] { execute(*call); });
    return CUBLAS_STATUS_SUCCESS;
  }
  execute(*call);
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
