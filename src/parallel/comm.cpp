// MPI implementation of Comm. Counts above INT_MAX elements are split into several calls.
#include "parallel/comm.h"

#include <algorithm>
#include <climits>
#include <utility>

#include "core/check.h"
#include "core/timer.h"
#include "parallel/p2p_route.h"
#include "parallel/watchdog.h"

namespace loom {

namespace {
constexpr size_t kMaxChunk = size_t(1) << 30;

// Scope of one blocking MPI call: adds its time to the communicator's busy time and shows it
// to the watchdog, which names the call, the axis and the peers if it never returns.
class Blocked {
 public:
  Blocked(Comm& c, const char* call) : what_(str(call, " on ", c.describe())), busy_(c.busy_ref()) {
    watchdog_enter(&what_);
  }
  ~Blocked() {
    watchdog_leave();
    busy_ += sw_.ms();
  }

 private:
  std::string what_;
  double& busy_;
  Stopwatch sw_;
};

MPI_Op to_mpi(ReduceOp op) { return op == ReduceOp::Sum ? MPI_SUM : MPI_MAX; }
}  // namespace

void mpi_check(int rc, const char* call, const char* file, int line) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  int world_rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  throw InternalError(str(file, ":", line, ": ", call, " failed on rank ", world_rank, ": ",
                          std::string(msg, size_t(len))));
}

Comm::Comm(MPI_Comm comm, std::string name) : comm_(comm), name_(std::move(name)) {
  LOOM_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  LOOM_MPI(MPI_Comm_rank(comm_, &rank_));
  LOOM_MPI(MPI_Comm_size(comm_, &size_));
  // "tp (world ranks 2,3)": the peers this communicator spans, for diagnostics.
  MPI_Group mine, world;
  LOOM_MPI(MPI_Comm_group(comm_, &mine));
  LOOM_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world));
  std::vector<int> local(static_cast<size_t>(size_)), global(local.size());
  for (int i = 0; i < size_; ++i) local[size_t(i)] = i;
  LOOM_MPI(MPI_Group_translate_ranks(mine, size_, local.data(), world, global.data()));
  MPI_Group_free(&mine);
  MPI_Group_free(&world);
  describe_ = name_ + " (world ranks ";
  for (int i = 0; i < size_; ++i) describe_ += (i ? "," : "") + std::to_string(global[size_t(i)]);
  describe_ += ")";
}

template <typename T>
void Comm::all_reduce_impl(T* x, size_t n, ReduceOp op, MPI_Datatype type) {
  if (size_ == 1) return;
  Blocked blocked(*this, "all_reduce");
  for (size_t off = 0; off < n; off += kMaxChunk) {
    int cnt = int(std::min(kMaxChunk, n - off));
    LOOM_MPI(MPI_Allreduce(MPI_IN_PLACE, x + off, cnt, type, to_mpi(op), comm_));
  }
  bytes_ += n * sizeof(T);
}

void Comm::all_reduce(float* x, size_t n, ReduceOp op) {
  if (on_device()) return all_reduce(static_cast<void*>(x), n, DType::F32, op);
  all_reduce_impl(x, n, op, MPI_FLOAT);
}
void Comm::all_reduce(double* x, size_t n, ReduceOp op) { all_reduce_impl(x, n, op, MPI_DOUBLE); }

void Comm::all_reduce(void* x, size_t n, DType t, ReduceOp op) {
  if (on_device()) {
    Blocked blocked(*this, "all_reduce");
    dev_->all_reduce(x, n, t, op);
    bytes_ += n * dtype_size(t);
    return;
  }
  if (size_ == 1) return;
  LOOM_CHECK(t == DType::F32 || t == DType::F64, "comm '", name_, "': host all_reduce of ",
             dtype_name(t));
  if (t == DType::F64) return all_reduce_impl(static_cast<double*>(x), n, op, MPI_DOUBLE);
  all_reduce(static_cast<float*>(x), n, op);
}

void Comm::reduce(float* x, size_t n, int root) {
  if (on_device()) {
    Blocked blocked(*this, "reduce");
    dev_->reduce(x, n, DType::F32, root);
    bytes_ += n * sizeof(float);
    return;
  }
  if (size_ == 1) return;
  Blocked blocked(*this, "reduce");
  for (size_t off = 0; off < n; off += kMaxChunk) {
    int cnt = int(std::min(kMaxChunk, n - off));
    const void* send = rank_ == root ? MPI_IN_PLACE : static_cast<const void*>(x + off);
    LOOM_MPI(MPI_Reduce(send, x + off, cnt, MPI_FLOAT, MPI_SUM, root, comm_));
  }
  bytes_ += n * sizeof(float);
}

void Comm::reduce_scatter(const float* send, float* recv, size_t n) {
  if (on_device()) {
    Blocked blocked(*this, "reduce_scatter");
    dev_->reduce_scatter(send, recv, n, DType::F32);
    bytes_ += n * size_t(size_) * sizeof(float);
    return;
  }
  if (size_ == 1) {
    std::copy(send, send + n, recv);
    return;
  }
  LOOM_CHECK(n <= size_t(INT_MAX), "reduce_scatter of ", n, " elements per rank");
  Blocked blocked(*this, "reduce_scatter");
  LOOM_MPI(MPI_Reduce_scatter_block(send, recv, int(n), MPI_FLOAT, MPI_SUM, comm_));
  bytes_ += n * size_t(size_) * sizeof(float);
}

void Comm::all_gather(const float* send, float* recv, size_t n) {
  if (on_device()) {
    Blocked blocked(*this, "all_gather");
    dev_->all_gather(send, recv, n, DType::F32);
    bytes_ += n * sizeof(float);
    return;
  }
  if (size_ == 1) {
    if (recv != send) std::copy(send, send + n, recv);
    return;
  }
  LOOM_CHECK(n <= size_t(INT_MAX), "all_gather of ", n, " elements per rank");
  if (send == recv + size_t(rank_) * n) send = static_cast<const float*>(MPI_IN_PLACE);
  Blocked blocked(*this, "all_gather");
  LOOM_MPI(MPI_Allgather(send, int(n), MPI_FLOAT, recv, int(n), MPI_FLOAT, comm_));
  bytes_ += n * sizeof(float);
}

void Comm::reduce_scatter(const void* send, void* recv, size_t n, DType t) {
  if (on_device()) {
    Blocked blocked(*this, "reduce_scatter");
    dev_->reduce_scatter(send, recv, n, t);
    bytes_ += n * size_t(size_) * dtype_size(t);
    return;
  }
  LOOM_CHECK(t == DType::F32, "comm '", name_, "': host reduce_scatter of ", dtype_name(t));
  reduce_scatter(static_cast<const float*>(send), static_cast<float*>(recv), n);
}

void Comm::all_gather(const void* send, void* recv, size_t n, DType t) {
  if (on_device()) {
    Blocked blocked(*this, "all_gather");
    dev_->all_gather(send, recv, n, t);
    bytes_ += n * dtype_size(t);
    return;
  }
  LOOM_CHECK(t == DType::F32, "comm '", name_, "': host all_gather of ", dtype_name(t));
  all_gather(static_cast<const float*>(send), static_cast<float*>(recv), n);
}

void Comm::all_gatherv(const float* send, float* recv, const std::vector<int>& counts,
                       const std::vector<int>& displs) {
  LOOM_CHECK(int(counts.size()) == size_ && int(displs.size()) == size_, "all_gatherv sizes");
  if (on_device()) {
    Blocked blocked(*this, "all_gatherv");
    dev_->all_gatherv(send, recv, counts, displs, DType::F32);
    bytes_ += size_t(counts[size_t(rank_)]) * sizeof(float);
    return;
  }
  if (size_ == 1) {
    if (counts[0] && recv + displs[0] != send) std::copy(send, send + counts[0], recv + displs[0]);
    return;
  }
  if (send == recv + displs[size_t(rank_)]) send = static_cast<const float*>(MPI_IN_PLACE);
  Blocked blocked(*this, "all_gatherv");
  LOOM_MPI(MPI_Allgatherv(send, counts[size_t(rank_)], MPI_FLOAT, recv, counts.data(),
                          displs.data(), MPI_FLOAT, comm_));
  bytes_ += size_t(counts[size_t(rank_)]) * sizeof(float);
}

void Comm::all_to_allv(const float* send, const std::vector<int>& scounts,
                       const std::vector<int>& sdispls, float* recv,
                       const std::vector<int>& rcounts, const std::vector<int>& rdispls) {
  const size_t n = size_t(size_);
  LOOM_CHECK(
      scounts.size() == n && sdispls.size() == n && rcounts.size() == n && rdispls.size() == n,
      "all_to_allv sizes on ", describe_);
  Blocked blocked(*this, "all_to_allv");
  if (on_device())
    dev_->all_to_allv(send, scounts, sdispls, recv, rcounts, rdispls, DType::F32);
  else
    LOOM_MPI(MPI_Alltoallv(send, scounts.data(), sdispls.data(), MPI_FLOAT, recv, rcounts.data(),
                           rdispls.data(), MPI_FLOAT, comm_));
  for (size_t r = 0; r < n; ++r)
    if (int(r) != rank_) bytes_ += size_t(scounts[r]) * sizeof(float);
}

void Comm::all_gather(const int32_t* send, int32_t* recv, size_t n) {
  Blocked blocked(*this, "all_gather");
  LOOM_MPI(MPI_Allgather(send, int(n), MPI_INT32_T, recv, int(n), MPI_INT32_T, comm_));
}

void Comm::broadcast(void* x, size_t bytes, int root) {
  if (size_ == 1) return;
  char* p = static_cast<char*>(x);
  Blocked blocked(*this, "broadcast");
  for (size_t off = 0; off < bytes; off += kMaxChunk) {
    int cnt = int(std::min(kMaxChunk, bytes - off));
    LOOM_MPI(MPI_Bcast(p + off, cnt, MPI_BYTE, root, comm_));
  }
  if (rank_ == root) bytes_ += bytes;
}

void Comm::barrier() {
  if (size_ == 1) return;
  Blocked blocked(*this, "barrier");
  LOOM_MPI(MPI_Barrier(comm_));
}

MPI_Request Comm::isend(const float* x, size_t n, int peer, int tag) {
  LOOM_CHECK(n <= size_t(INT_MAX) && peer >= 0 && peer < size_, "isend of ", n, " to ", peer);
  MPI_Request req;
  LOOM_MPI(MPI_Isend(x, int(n), MPI_FLOAT, peer, tag, comm_, &req));
  bytes_ += n * sizeof(float);
  return req;
}

void Comm::recv(float* x, size_t n, int peer, int tag) {
  LOOM_CHECK(n <= size_t(INT_MAX) && peer >= 0 && peer < size_, "recv of ", n, " from ", peer);
  MPI_Status st;
  Blocked blocked(*this, "recv");
  LOOM_MPI(MPI_Recv(x, int(n), MPI_FLOAT, peer, tag, comm_, &st));
  int got = 0;
  MPI_Get_count(&st, MPI_FLOAT, &got);
  LOOM_CHECK(size_t(got) == n, "comm '", name_, "' received ", got, " floats from ", peer,
             ", expected ", n);
}

MPI_Request Comm::isend(const void* x, size_t n, DType t, int peer, int tag, Ring way) {
  if (on_device()) {
    LOOM_CHECK(peer == ring_peer(rank_, way, size_), "isend to ", peer, " on ", describe_,
               ": rank ", rank_, "'s neighbour that way is ", ring_peer(rank_, way, size_));
    dev_->send(x, n, t, peer, way);
    bytes_ += n * dtype_size(t);
    return MPI_REQUEST_NULL;
  }
  LOOM_CHECK(t == DType::F32, "comm '", name_, "': host isend of ", dtype_name(t));
  return isend(static_cast<const float*>(x), n, peer, tag);
}

void Comm::recv(void* x, size_t n, DType t, int peer, int tag, Ring way) {
  if (on_device()) {
    // A receive in `way` comes from the neighbour the other way.
    const Ring back = way == Ring::Next ? Ring::Prev : Ring::Next;
    LOOM_CHECK(peer == ring_peer(rank_, back, size_), "recv from ", peer, " on ", describe_,
               ": rank ", rank_, " receives that way from ", ring_peer(rank_, back, size_));
    Blocked blocked(*this, "recv");
    dev_->recv(x, n, t, peer, way);
    return;
  }
  LOOM_CHECK(t == DType::F32, "comm '", name_, "': host recv of ", dtype_name(t));
  recv(static_cast<float*>(x), n, peer, tag);
}

void Comm::wait_sends() {
  if (!dev_) return;
  Blocked blocked(*this, "wait");
  dev_->complete();
}

void Comm::reserve_sends(size_t bytes, int count) {
  if (dev_ && size_ > 1) dev_->reserve_sends(bytes, count);
}

void Comm::wait(MPI_Request* req) {
  if (*req == MPI_REQUEST_NULL) return;  // also every device send (staged: see DeviceComm)
  Blocked blocked(*this, "wait");
  LOOM_MPI(MPI_Wait(req, MPI_STATUS_IGNORE));
}

CommRequest& CommRequest::operator=(CommRequest&& o) noexcept {
  req_ = std::exchange(o.req_, MPI_REQUEST_NULL);
  call_ = o.call_;
  counts_ = std::move(o.counts_);
  displs_ = std::move(o.displs_);
  recv_n_ = o.recv_n_;
  peer_ = o.peer_;
  way_ = o.way_;
  dtype_ = o.dtype_;
  dev_recv_ = std::exchange(o.dev_recv_, nullptr);
  return *this;
}

CommRequest Comm::start_all_reduce(float* x, size_t n, ReduceOp op) {
  CommRequest r;
  r.call_ = "all_reduce";
  if (on_device()) {
    all_reduce(static_cast<void*>(x), n, DType::F32, op);  // enqueued on the stream
    return r;
  }
  if (size_ == 1) return r;
  LOOM_CHECK(n <= size_t(INT_MAX), "start_all_reduce of ", n, " elements");
  LOOM_MPI(MPI_Iallreduce(MPI_IN_PLACE, x, int(n), MPI_FLOAT, to_mpi(op), comm_, &r.req_));
  bytes_ += n * sizeof(float);
  return r;
}

CommRequest Comm::start_reduce(float* x, size_t n, int root) {
  CommRequest r;
  r.call_ = "reduce";
  if (on_device() || size_ == 1) {
    reduce(x, n, root);
    return r;
  }
  LOOM_CHECK(n <= size_t(INT_MAX), "start_reduce of ", n, " elements");
  const void* send = rank_ == root ? MPI_IN_PLACE : static_cast<const void*>(x);
  LOOM_MPI(MPI_Ireduce(send, x, int(n), MPI_FLOAT, MPI_SUM, root, comm_, &r.req_));
  bytes_ += n * sizeof(float);
  return r;
}

CommRequest Comm::start_all_gatherv(const float* send, float* recv, std::vector<int> counts,
                                    std::vector<int> displs) {
  CommRequest r;
  r.call_ = "all_gatherv";
  if (on_device() || size_ == 1) {
    all_gatherv(send, recv, counts, displs);
    return r;
  }
  LOOM_CHECK(int(counts.size()) == size_ && int(displs.size()) == size_, "all_gatherv sizes");
  r.counts_ = std::move(counts);
  r.displs_ = std::move(displs);
  if (send == recv + r.displs_[size_t(rank_)]) send = static_cast<const float*>(MPI_IN_PLACE);
  LOOM_MPI(MPI_Iallgatherv(send, r.counts_[size_t(rank_)], MPI_FLOAT, recv, r.counts_.data(),
                           r.displs_.data(), MPI_FLOAT, comm_, &r.req_));
  bytes_ += size_t(r.counts_[size_t(rank_)]) * sizeof(float);
  return r;
}

CommRequest Comm::start_recv(void* x, size_t n, DType t, int peer, int tag, Ring way) {
  LOOM_CHECK(n <= size_t(INT_MAX) && peer >= 0 && peer < size_, "recv of ", n, " from ", peer,
             " on ", describe_);
  CommRequest r;
  r.call_ = "recv";
  r.recv_n_ = n;
  r.peer_ = peer;
  r.way_ = way;
  r.dtype_ = t;
  if (on_device()) {
    r.dev_recv_ = x;
    return r;
  }
  LOOM_CHECK(t == DType::F32, "comm '", name_, "': host recv of ", dtype_name(t));
  LOOM_MPI(MPI_Irecv(x, int(n), MPI_FLOAT, peer, tag, comm_, &r.req_));
  return r;
}

void Comm::wait(CommRequest& r) {
  if (r.dev_recv_) {
    recv(std::exchange(r.dev_recv_, nullptr), r.recv_n_, r.dtype_, r.peer_, 0, r.way_);
    return;
  }
  if (r.req_ == MPI_REQUEST_NULL) return;
  MPI_Status st;
  {
    Blocked blocked(*this, r.call_);
    LOOM_MPI(MPI_Wait(&r.req_, &st));
  }
  if (r.recv_n_ == 0) return;
  int got = 0;
  MPI_Get_count(&st, MPI_FLOAT, &got);
  LOOM_CHECK(size_t(got) == r.recv_n_, "comm '", name_, "' received ", got, " floats from ",
             r.peer_, ", expected ", r.recv_n_);
}

bool Comm::test(CommRequest& r) {
  if (r.req_ == MPI_REQUEST_NULL) return r.dev_recv_ == nullptr;
  int done = 0;
  MPI_Status st;
  LOOM_MPI(MPI_Test(&r.req_, &done, &st));
  if (done && r.recv_n_ > 0) {
    int got = 0;
    MPI_Get_count(&st, MPI_FLOAT, &got);
    LOOM_CHECK(size_t(got) == r.recv_n_, "comm '", name_, "' received ", got, " floats from ",
               r.peer_, ", expected ", r.recv_n_);
  }
  return done != 0;
}

}  // namespace loom
