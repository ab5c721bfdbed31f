// NCCL communicators: set-up from an MPI communicator, collectives on the compute stream,
// attach_nccl. The pipeline point-to-point half is in nccl_p2p.cpp.
#include "parallel/nccl_comm.h"

#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>

#include "core/check.h"
#include "parallel/nccl_impl.h"
#include "parallel/watchdog.h"

namespace loom {

namespace nccl_detail {

namespace {

int world_rank() {
  int r = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

}  // namespace

[[noreturn]] void nccl_failed(ncclResult_t rc, const char* call, const std::string& what,
                              ncclComm_t comm) {
  const char* last = ncclGetLastError(comm);
  throw InternalError(str("NCCL ", call, " failed on ", what, ", world rank ", world_rank(), ": ",
                          ncclGetErrorString(rc),
                          last && *last ? str(" (", last, ")") : std::string(),
                          "; run with NCCL_DEBUG=WARN for NCCL's own diagnosis"));
}

void nccl_check(ncclResult_t rc, const char* call, const std::string& what, ncclComm_t comm) {
  if (rc != ncclSuccess) nccl_failed(rc, call, what, comm);
}

void cuda_check(cudaError_t e, const char* call, const std::string& what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  throw InternalError(str("CUDA ", call, " failed on ", what, ", world rank ", world_rank(), ": ",
                          cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

}  // namespace nccl_detail

using namespace nccl_detail;

namespace {

ncclDataType_t nccl_reduce_type(DType t, const std::string& what) {
  switch (t) {
    case DType::F32:
      return ncclFloat32;
    case DType::BF16:
      return ncclBfloat16;
    case DType::F16:
      return ncclFloat16;
    case DType::I32:
      return ncclInt32;
    case DType::F64:
      return ncclFloat64;
    case DType::U16:
      break;
  }
  throw InternalError(str("NCCL reduction of ", dtype_name(t), " on ", what, " is not supported"));
}

}  // namespace

// Rank 0 of `mpi` makes the id and broadcasts it with its status, so a failure there is the
// same error on every rank instead of a hang in MPI_Bcast.
ncclComm_t NcclComm::Impl::init(MPI_Comm mpi, const std::string& label) {
  struct {
    int ok;
    char error[240];
    ncclUniqueId id;
  } msg{};
  if (rank == 0) {
    const ncclResult_t rc = ncclGetUniqueId(&msg.id);
    msg.ok = rc == ncclSuccess;
    if (!msg.ok)
      std::snprintf(msg.error, sizeof msg.error, "%s (%s)", ncclGetErrorString(rc),
                    ncclGetLastError(nullptr));
  }
  LOOM_MPI(MPI_Bcast(&msg, int(sizeof msg), MPI_BYTE, 0, mpi));
  if (!msg.ok)
    throw InternalError(str("NCCL ncclGetUniqueId failed on the first rank of ", label, ": ",
                            msg.error, "; run with NCCL_DEBUG=WARN for NCCL's own diagnosis"));
  ncclComm_t c = nullptr;
  const std::string waiting = "ncclCommInitRank on " + label;
  watchdog_enter(&waiting);  // a peer that never joins: the watchdog names it and ends the job
  const ncclResult_t rc = ncclCommInitRank(&c, size, msg.id, rank);
  watchdog_leave();
  nccl_check(rc, "ncclCommInitRank", label, c);
  return c;
}

// Waits on the host for `ev`, polling so that an asynchronous NCCL error (a peer that died)
// becomes an exception instead of a hang.
void NcclComm::Impl::wait(cudaEvent_t ev, std::initializer_list<ncclComm_t> comms,
                          const char* call) const {
  for (int spin = 0;; ++spin) {
    const cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) cuda(e, call);
    for (ncclComm_t c : comms) {
      if (c == nullptr) continue;
      ncclResult_t async = ncclSuccess;
      check(ncclCommGetAsyncError(c, &async), "ncclCommGetAsyncError", c);
      if (async != ncclSuccess && async != ncclInProgress) nccl_failed(async, call, what, c);
    }
    if (spin < 100)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

NcclComm::Impl::~Impl() {
  // Destroy when everything this rank enqueued has finished; otherwise (an error, or a peer that
  // left) abort, which never waits for the peers.
  bool idle = std::uncaught_exceptions() == 0;
  if (idle && stream != nullptr && cudaStreamQuery(stream) != cudaSuccess) idle = false;
  for (cudaStream_t s : send_stream)
    if (idle && s != nullptr && cudaStreamQuery(s) != cudaSuccess) idle = false;
  std::vector<ncclComm_t> all{comm};
  for (ncclComm_t c : p2p_comm) all.push_back(c);
  for (ncclComm_t c : all) {
    if (c == nullptr) continue;
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(c, &async) != ncclSuccess || async != ncclSuccess) idle = false;
  }
  for (ncclComm_t c : all)
    if (c != nullptr) idle ? ncclCommDestroy(c) : ncclCommAbort(c);
  for (int d : {0, 1}) {
    for (Staging& s : staging[d]) {
      if (s.ptr != nullptr) cudaFree(s.ptr);  // stream-ordered memory may be freed this way too
      if (s.sent != nullptr) cudaEventDestroy(s.sent);
    }
    if (ready[d] != nullptr) cudaEventDestroy(ready[d]);
    if (drained[d] != nullptr) cudaEventDestroy(drained[d]);
    if (send_stream[d] != nullptr) cudaStreamDestroy(send_stream[d]);
  }
  cudaGetLastError();
}

NcclComm::NcclComm(MPI_Comm mpi, const std::string& what, void* stream, bool p2p)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.what = what;
  m.stream = static_cast<cudaStream_t>(stream);
  LOOM_MPI(MPI_Comm_rank(mpi, &m.rank));
  LOOM_MPI(MPI_Comm_size(mpi, &m.size));
  m.comm = m.init(mpi, what);
  m.p2p = p2p && m.size > 1;
  if (m.p2p) m.setup_p2p(mpi);
}

NcclComm::~NcclComm() = default;

int NcclComm::rank() const { return impl_->rank; }
int NcclComm::size() const { return impl_->size; }

void NcclComm::all_reduce(void* x, size_t n, DType t, ReduceOp op) {
  Impl& m = *impl_;
  if (n == 0) return;
  m.check(ncclAllReduce(x, x, n, nccl_reduce_type(t, m.what),
                        op == ReduceOp::Sum ? ncclSum : ncclMax, m.comm, m.stream),
          "ncclAllReduce", m.comm);
}

void NcclComm::reduce(void* x, size_t n, DType t, int root) {
  Impl& m = *impl_;
  if (n == 0) return;
  m.check(ncclReduce(x, x, n, nccl_reduce_type(t, m.what), ncclSum, root, m.comm, m.stream),
          "ncclReduce", m.comm);
}

void NcclComm::reduce_scatter(const void* send, void* recv, size_t n, DType t) {
  Impl& m = *impl_;
  if (n == 0) return;
  m.check(ncclReduceScatter(send, recv, n, nccl_reduce_type(t, m.what), ncclSum, m.comm, m.stream),
          "ncclReduceScatter", m.comm);
}

void NcclComm::all_gather(const void* send, void* recv, size_t n, DType t) {
  Impl& m = *impl_;
  const size_t bytes = n * dtype_size(t);
  if (bytes == 0) return;
  if (m.size == 1) {
    if (send != recv)
      m.cuda(cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, m.stream),
             "cudaMemcpyAsync (all_gather)");
    return;
  }
  m.check(ncclAllGather(send, recv, bytes, ncclUint8, m.comm, m.stream), "ncclAllGather", m.comm);
}

// NCCL has no all-gather with per-rank counts: one broadcast per contributing rank, rooted at
// it, into its slice of recv, all in one group (one launch; zero counts are skipped alike on
// every rank since counts are the same everywhere).
void NcclComm::all_gatherv(const void* send, void* recv, const std::vector<int>& counts,
                           const std::vector<int>& displs, DType t) {
  Impl& m = *impl_;
  LOOM_CHECK(int(counts.size()) == m.size && int(displs.size()) == m.size, "all_gatherv on ",
             m.what, ": ", counts.size(), " counts and ", displs.size(), " displs for ", m.size,
             " ranks");
  const size_t es = dtype_size(t);
  char* out = static_cast<char*>(recv);
  if (m.size == 1) {
    char* dst = out + size_t(displs[0]) * es;
    if (counts[0] > 0 && dst != send)
      m.cuda(cudaMemcpyAsync(dst, send, size_t(counts[0]) * es, cudaMemcpyDeviceToDevice, m.stream),
             "cudaMemcpyAsync (all_gatherv)");
    return;
  }
  m.check(ncclGroupStart(), "ncclGroupStart (all_gatherv)", m.comm);
  ncclResult_t first = ncclSuccess;
  for (int r = 0; r < m.size; ++r) {
    if (counts[size_t(r)] <= 0) continue;
    char* dst = out + size_t(displs[size_t(r)]) * es;
    const void* src = r == m.rank ? send : dst;
    const ncclResult_t rc =
        ncclBroadcast(src, dst, size_t(counts[size_t(r)]) * es, ncclUint8, r, m.comm, m.stream);
    if (first == ncclSuccess) first = rc;
  }
  const ncclResult_t end = ncclGroupEnd();  // always closes the group, even after an error
  m.check(first != ncclSuccess ? first : end, "ncclBroadcast (all_gatherv)", m.comm);
}

// One NCCL group of a send and a receive per peer (NCCL's own all-to-all pattern); the rank's
// own part is a device copy.
void NcclComm::all_to_allv(const void* send, const std::vector<int>& scounts,
                           const std::vector<int>& sdispls, void* recv,
                           const std::vector<int>& rcounts, const std::vector<int>& rdispls,
                           DType t) {
  Impl& m = *impl_;
  const size_t n = size_t(m.size), es = dtype_size(t);
  LOOM_CHECK(
      scounts.size() == n && sdispls.size() == n && rcounts.size() == n && rdispls.size() == n,
      "all_to_allv on ", m.what, ": counts and displs for ", n, " ranks");
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  const size_t me = size_t(m.rank);
  LOOM_CHECK(scounts[me] == rcounts[me], "all_to_allv on ", m.what, ": ", scounts[me],
             " elements to itself, ", rcounts[me], " expected");
  if (scounts[me] > 0)
    m.cuda(cudaMemcpyAsync(out + size_t(rdispls[me]) * es, in + size_t(sdispls[me]) * es,
                           size_t(scounts[me]) * es, cudaMemcpyDeviceToDevice, m.stream),
           "cudaMemcpyAsync (all_to_allv)");
  if (m.size == 1) return;
  m.check(ncclGroupStart(), "ncclGroupStart (all_to_allv)", m.comm);
  ncclResult_t first = ncclSuccess;
  for (size_t r = 0; r < n; ++r) {
    if (r == me) continue;
    ncclResult_t rc = ncclSuccess;
    if (scounts[r] > 0)
      rc = ncclSend(in + size_t(sdispls[r]) * es, size_t(scounts[r]) * es, ncclUint8, int(r),
                    m.comm, m.stream);
    if (rc == ncclSuccess && rcounts[r] > 0)
      rc = ncclRecv(out + size_t(rdispls[r]) * es, size_t(rcounts[r]) * es, ncclUint8, int(r),
                    m.comm, m.stream);
    if (first == ncclSuccess) first = rc;
  }
  const ncclResult_t end = ncclGroupEnd();  // always closes the group, even after an error
  m.check(first != ncclSuccess ? first : end, "ncclSend/ncclRecv (all_to_allv)", m.comm);
}

void NcclComm::broadcast(void* x, size_t bytes, int root) {
  Impl& m = *impl_;
  if (bytes == 0) return;
  m.check(ncclBroadcast(x, x, bytes, ncclUint8, root, m.comm, m.stream), "ncclBroadcast", m.comm);
}

void attach_nccl(ParallelCtx& pc, void* stream) {
  // The same order on every rank: each construction is collective over its axis.
  pc.world.set_device_comm(
      std::make_unique<NcclComm>(pc.world.mpi(), pc.world.describe(), stream, false));
  pc.dp.set_device_comm(std::make_unique<NcclComm>(pc.dp.mpi(), pc.dp.describe(), stream, false));
  pc.pp.set_device_comm(std::make_unique<NcclComm>(pc.pp.mpi(), pc.pp.describe(), stream, true));
  pc.tp.set_device_comm(std::make_unique<NcclComm>(pc.tp.mpi(), pc.tp.describe(), stream, false));
  pc.embed.set_device_comm(
      std::make_unique<NcclComm>(pc.embed.mpi(), pc.embed.describe(), stream, false));
  // Context parallelism: the ring (point-to-point) and the gradient replicas (dp x cp).
  pc.cp.set_device_comm(std::make_unique<NcclComm>(pc.cp.mpi(), pc.cp.describe(), stream, true));
  if (pc.grid.size(Axis::CP) > 1)
    pc.dpcp.set_device_comm(
        std::make_unique<NcclComm>(pc.dpcp.mpi(), pc.dpcp.describe(), stream, false));
  attach_nccl_experts(pc, stream);
}

void attach_nccl_experts(ParallelCtx& pc, void* stream) {
  if (pc.ep <= 1 || pc.ep_group.device_comm() != nullptr) return;
  // Expert parallelism: the all-to-all group and the expert replicas (their gradients).
  pc.ep_group.set_device_comm(
      std::make_unique<NcclComm>(pc.ep_group.mpi(), pc.ep_group.describe(), stream, false));
  pc.edp.set_device_comm(
      std::make_unique<NcclComm>(pc.edp.mpi(), pc.edp.describe(), stream, false));
}

void detach_nccl(ParallelCtx& pc) {
  for (Comm* c :
       {&pc.world, &pc.dp, &pc.pp, &pc.tp, &pc.embed, &pc.cp, &pc.dpcp, &pc.ep_group, &pc.edp})
    c->set_device_comm(nullptr);
}

std::vector<std::string> visible_gpu_ids() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorStubLibrary) {
    cudaGetLastError();
    return {};
  }
  cuda_check(e, "cudaGetDeviceCount", "this process's GPUs");
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp prop;
    cuda_check(cudaGetDeviceProperties(&prop, i), "cudaGetDeviceProperties", "this process's GPUs");
    std::string id = "GPU-";
    char hex[3];
    for (int b = 0; b < 16; ++b) {
      if (b == 4 || b == 6 || b == 8 || b == 10) id += '-';
      std::snprintf(hex, sizeof hex, "%02x",
                    unsigned(static_cast<unsigned char>(prop.uuid.bytes[b])));
      id += hex;
    }
    ids.push_back(id);
  }
  return ids;
}

}  // namespace loom
