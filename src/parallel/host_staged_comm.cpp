// HostStagedComm: device collectives and p2p staged through host memory and run by MPI.
#include "parallel/host_staged_comm.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <exception>

#include "core/check.h"
#include "kernels/cuda_device.h"
#include "parallel/p2p_route.h"

namespace loom {

namespace {

bool widened(DType t) { return t == DType::BF16 || t == DType::F16; }

// The MPI type a buffer of t is reduced in (bf16/fp16: their fp32 widening).
MPI_Datatype mpi_reduce_type(DType t, const std::string& what) {
  switch (t) {
    case DType::F32:
    case DType::BF16:
    case DType::F16:
      return MPI_FLOAT;
    case DType::F64:
      return MPI_DOUBLE;
    case DType::I32:
      return MPI_INT;
    case DType::U16:
      break;
  }
  throw InternalError(
      str("host-staged reduction of ", dtype_name(t), " on ", what, " is not supported"));
}

size_t reduce_size(DType t) { return widened(t) ? sizeof(float) : dtype_size(t); }

// n elements of t (bf16/fp16) -> fp32, exactly.
void widen(const char* in, size_t n, DType t, float* out) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t bits;
    std::memcpy(&bits, in + 2 * i, 2);
    out[i] = t == DType::BF16 ? cuda::bf16_to_float(cuda::bf16{bits})
                              : cuda::f16_to_float(cuda::f16{bits});
  }
}

// fp32 -> n elements of t (bf16/fp16), round-to-nearest-even.
void narrow(const float* in, size_t n, DType t, char* out) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t bits =
        t == DType::BF16 ? cuda::bf16_from_float(in[i]).bits : cuda::f16_from_float(in[i]).bits;
    std::memcpy(out + 2 * i, &bits, 2);
  }
}

int count_of(size_t n, const std::string& what) {
  LOOM_CHECK(n <= size_t(INT_MAX), "host-staged transfer of ", n, " elements on ", what,
             " (more than one MPI call takes; the host-staged comm is a testing mode)");
  return int(n);
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Sum ? MPI_SUM : MPI_MAX; }

}  // namespace

HostStagedComm::HostStagedComm(MPI_Comm comm, const std::string& what, Backend& be)
    : be_(be), what_(what) {
  LOOM_MPI(MPI_Comm_dup(comm, &comm_));
  LOOM_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  LOOM_MPI(MPI_Comm_rank(comm_, &rank_));
  LOOM_MPI(MPI_Comm_size(comm_, &size_));
}

HostStagedComm::~HostStagedComm() {
  // After an error a peer may never receive: drop the sends instead of waiting for them, and
  // leave the communicator (freeing it may wait for peers that are gone).
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  const bool clean = std::uncaught_exceptions() == 0;
  for (auto& pool : staging_)
    for (Staged& s : pool)
      if (s.req != MPI_REQUEST_NULL) {
        if (clean) {
          MPI_Wait(&s.req, MPI_STATUS_IGNORE);
        } else {
          MPI_Cancel(&s.req);
          MPI_Request_free(&s.req);
        }
      }
  if (clean) MPI_Comm_free(&comm_);
}

void HostStagedComm::down(std::vector<char>& host, const void* dev, size_t bytes) {
  if (host.size() < bytes) host.resize(bytes);
  if (bytes) be_.to_host(host.data(), dev, bytes);  // waits for the stream's work before it
}

void HostStagedComm::up(void* dev, const std::vector<char>& host, size_t bytes) {
  if (bytes) be_.from_host(dev, host.data(), bytes);
}

// buf holds n elements of t (all_reduce, reduce) or size*n (scatter: the result, n elements,
// replaces the first n). root < 0: all ranks get the result.
void HostStagedComm::reduce_host(std::vector<char>& buf, size_t n, DType t, ReduceOp op, int root,
                                 bool scatter) {
  const MPI_Datatype type = mpi_reduce_type(t, what_);
  const size_t in_n = scatter ? n * size_t(size_) : n, es = reduce_size(t);
  const int cnt = count_of(in_n, what_);
  std::vector<char> wide;
  char* in = buf.data();
  if (widened(t)) {
    wide.resize(in_n * sizeof(float));
    widen(buf.data(), in_n, t, reinterpret_cast<float*>(wide.data()));
    in = wide.data();
  }
  if (scatter) {
    out_.resize(n * es);
    LOOM_MPI(MPI_Reduce_scatter_block(in, out_.data(), int(n), type, MPI_SUM, comm_));
    in = out_.data();
  } else if (root < 0) {
    LOOM_MPI(MPI_Allreduce(MPI_IN_PLACE, in, cnt, type, mpi_op(op), comm_));
  } else {
    const void* sendbuf = rank_ == root ? MPI_IN_PLACE : static_cast<const void*>(in);
    LOOM_MPI(MPI_Reduce(sendbuf, in, cnt, type, MPI_SUM, root, comm_));
  }
  if (widened(t))
    narrow(reinterpret_cast<const float*>(in), n, t, buf.data());
  else if (in != buf.data())
    std::memcpy(buf.data(), in, n * es);
}

void HostStagedComm::all_reduce(void* x, size_t n, DType t, ReduceOp op) {
  if (n == 0 || size_ == 1) return;
  down(host_, x, n * dtype_size(t));
  reduce_host(host_, n, t, op, -1, false);
  up(x, host_, n * dtype_size(t));
}

void HostStagedComm::reduce(void* x, size_t n, DType t, int root) {
  if (n == 0 || size_ == 1) return;
  down(host_, x, n * dtype_size(t));
  reduce_host(host_, n, t, ReduceOp::Sum, root, false);
  if (rank_ == root) up(x, host_, n * dtype_size(t));
}

void HostStagedComm::reduce_scatter(const void* send, void* recv, size_t n, DType t) {
  const size_t bytes = n * dtype_size(t);
  if (bytes == 0) return;
  if (size_ == 1) {
    if (send != recv) be_.copy(recv, send, bytes);
    return;
  }
  down(host_, send, bytes * size_t(size_));
  reduce_host(host_, n, t, ReduceOp::Sum, -1, true);
  up(recv, host_, bytes);
}

void HostStagedComm::all_gather(const void* send, void* recv, size_t n, DType t) {
  const size_t bytes = n * dtype_size(t);
  if (bytes == 0) return;
  if (size_ == 1) {
    if (send != recv) be_.copy(recv, send, bytes);
    return;
  }
  const int cnt = count_of(bytes * size_t(size_), what_);
  down(host_, send, bytes);
  out_.resize(size_t(cnt));
  LOOM_MPI(
      MPI_Allgather(host_.data(), int(bytes), MPI_BYTE, out_.data(), int(bytes), MPI_BYTE, comm_));
  up(recv, out_, size_t(cnt));
}

// Only the slices of recv that ranks contribute are written, as with NCCL.
void HostStagedComm::all_gatherv(const void* send, void* recv, const std::vector<int>& counts,
                                 const std::vector<int>& displs, DType t) {
  LOOM_CHECK(int(counts.size()) == size_ && int(displs.size()) == size_, "all_gatherv on ", what_,
             ": ", counts.size(), " counts and ", displs.size(), " displs for ", size_, " ranks");
  const size_t es = dtype_size(t);
  char* out = static_cast<char*>(recv);
  std::vector<int> bcounts(static_cast<size_t>(size_)), bdispls(bcounts.size());
  size_t extent = 0;
  for (size_t r = 0; r < size_t(size_); ++r) {
    LOOM_CHECK(counts[r] >= 0 && displs[r] >= 0, "all_gatherv on ", what_, ": rank ", r, " count ",
               counts[r], " at ", displs[r]);
    bcounts[r] = count_of(size_t(counts[r]) * es, what_);
    bdispls[r] = count_of(size_t(displs[r]) * es, what_);
    if (counts[r] > 0) extent = std::max(extent, size_t(bdispls[r]) + size_t(bcounts[r]));
  }
  const size_t mine = size_t(bcounts[size_t(rank_)]);
  if (size_ == 1) {
    char* dst = out + bdispls[0];
    if (mine > 0 && dst != send) be_.copy(dst, send, mine);
    return;
  }
  down(host_, send, mine);
  out_.resize(extent);
  LOOM_MPI(MPI_Allgatherv(host_.data(), int(mine), MPI_BYTE, out_.data(), bcounts.data(),
                          bdispls.data(), MPI_BYTE, comm_));
  for (size_t r = 0; r < size_t(size_); ++r)
    if (bcounts[r] > 0)
      be_.from_host(out + bdispls[r], out_.data() + bdispls[r], size_t(bcounts[r]));
}

// The send extent goes down to the host, MPI_Alltoallv moves it in bytes, and each peer's part
// comes up to its place in recv.
void HostStagedComm::all_to_allv(const void* send, const std::vector<int>& scounts,
                                 const std::vector<int>& sdispls, void* recv,
                                 const std::vector<int>& rcounts, const std::vector<int>& rdispls,
                                 DType t) {
  const size_t n = size_t(size_), es = dtype_size(t);
  LOOM_CHECK(
      scounts.size() == n && sdispls.size() == n && rcounts.size() == n && rdispls.size() == n,
      "all_to_allv on ", what_, ": counts and displs for ", n, " ranks");
  std::vector<int> bsc(n), bsd(n), brc(n), brd(n);
  size_t sext = 0, rext = 0;
  for (size_t r = 0; r < n; ++r) {
    LOOM_CHECK(scounts[r] >= 0 && sdispls[r] >= 0 && rcounts[r] >= 0 && rdispls[r] >= 0,
               "all_to_allv on ", what_, ": negative count or offset for rank ", r);
    bsc[r] = count_of(size_t(scounts[r]) * es, what_),
    bsd[r] = count_of(size_t(sdispls[r]) * es, what_);
    brc[r] = count_of(size_t(rcounts[r]) * es, what_),
    brd[r] = count_of(size_t(rdispls[r]) * es, what_);
    if (bsc[r] > 0) sext = std::max(sext, size_t(bsd[r]) + size_t(bsc[r]));
    if (brc[r] > 0) rext = std::max(rext, size_t(brd[r]) + size_t(brc[r]));
  }
  down(host_, send, sext);
  out_.resize(std::max<size_t>(rext, 1));
  LOOM_MPI(MPI_Alltoallv(host_.data(), bsc.data(), bsd.data(), MPI_BYTE, out_.data(), brc.data(),
                         brd.data(), MPI_BYTE, comm_));
  char* out = static_cast<char*>(recv);
  for (size_t r = 0; r < n; ++r)
    if (brc[r] > 0) be_.from_host(out + brd[r], out_.data() + brd[r], size_t(brc[r]));
}

void HostStagedComm::broadcast(void* x, size_t bytes, int root) {
  if (bytes == 0 || size_ == 1) return;
  const int cnt = count_of(bytes, what_);
  if (rank_ == root)
    down(host_, x, bytes);
  else if (host_.size() < bytes)
    host_.resize(bytes);
  LOOM_MPI(MPI_Bcast(host_.data(), cnt, MPI_BYTE, root, comm_));
  if (rank_ != root) up(x, host_, bytes);
}

void HostStagedComm::reserve_sends(size_t bytes, int count) {
  LOOM_CHECK(count > 0 && count <= 64, "reserve_sends: ", count,
             " staging buffers per way (1..64)");
  for (auto& pool : staging_) {
    for (Staged& s : pool) {  // a larger reservation replaces a smaller one (set-up only)
      LOOM_CHECK(s.req == MPI_REQUEST_NULL || s.data.size() >= bytes, "reserve_sends on ", what_,
                 " while a send is in flight");
      if (s.data.size() < bytes) s.data.resize(bytes);
    }
    while (pool.size() < size_t(count)) pool.emplace_back().data.resize(bytes);
  }
}

// A free staging buffer of at least `bytes` for a send one way; with every buffer in flight,
// waits (on the host) for the oldest send, as the NCCL staging pool does.
size_t HostStagedComm::staging_slot(Ring way, size_t bytes) {
  std::vector<Staged>& pool = staging_[int(way)];
  LOOM_CHECK(!pool.empty() && pool[0].data.size() >= bytes, "host-staged send of ", bytes,
             " bytes on ", what_, " without a staging buffer reserved for it (reserve_sends: ",
             pool.empty() ? size_t(0) : pool[0].data.size(), " bytes)");
  size_t oldest = 0;
  for (size_t i = 0; i < pool.size(); ++i) {
    Staged& s = pool[i];
    if (s.req != MPI_REQUEST_NULL) {
      int done = 0;
      LOOM_MPI(MPI_Test(&s.req, &done, MPI_STATUS_IGNORE));
    }
    if (s.req == MPI_REQUEST_NULL) return i;
    if (s.seq < pool[oldest].seq) oldest = i;
  }
  LOOM_MPI(MPI_Wait(&pool[oldest].req, MPI_STATUS_IGNORE));
  return oldest;
}

void HostStagedComm::send(const void* x, size_t n, DType t, int peer, Ring way) {
  LOOM_CHECK(size_ > 1 && peer == ring_peer(rank_, way, size_), "host-staged send on ", what_,
             " from rank ", rank_, " to ", peer, ": not the neighbour that way on a ring of ",
             size_);
  const size_t bytes = n * dtype_size(t);
  if (bytes == 0) return;
  const int cnt = count_of(bytes, what_);
  Staged& s = staging_[int(way)][staging_slot(way, bytes)];
  be_.to_host(s.data.data(), x, bytes);
  LOOM_MPI(
      MPI_Issend(s.data.data(), cnt, MPI_BYTE, peer, p2p_lane(rank_, way, size_), comm_, &s.req));
  s.seq = ++sends_;
}

void HostStagedComm::recv(void* x, size_t n, DType t, int peer, Ring way) {
  const Ring back = way == Ring::Next ? Ring::Prev : Ring::Next;
  LOOM_CHECK(size_ > 1 && peer == ring_peer(rank_, back, size_), "host-staged recv on ", what_,
             " at rank ", rank_, " from ", peer, ": data travelling that way comes from rank ",
             size_ > 1 ? ring_peer(rank_, back, size_) : rank_);
  const size_t bytes = n * dtype_size(t);
  if (bytes == 0) return;
  const int cnt = count_of(bytes, what_);
  if (host_.size() < bytes) host_.resize(bytes);
  MPI_Status st;
  LOOM_MPI(MPI_Recv(host_.data(), cnt, MPI_BYTE, peer, p2p_lane(peer, way, size_), comm_, &st));
  int got = 0;
  LOOM_MPI(MPI_Get_count(&st, MPI_BYTE, &got));
  LOOM_CHECK(got == cnt, "host-staged recv on ", what_, " at rank ", rank_, " from ", peer, ": ",
             got, " bytes arrived, ", cnt, " expected (sends and receives out of order)");
  up(x, host_, bytes);
}

void HostStagedComm::complete() {
  for (auto& pool : staging_)
    for (Staged& s : pool)
      if (s.req != MPI_REQUEST_NULL) LOOM_MPI(MPI_Wait(&s.req, MPI_STATUS_IGNORE));
}

}  // namespace loom
