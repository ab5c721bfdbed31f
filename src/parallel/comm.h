// Comm: the collectives and point-to-point calls of one grid axis. MPI underneath on the cpu
// backend; once a DeviceComm is attached (cuda), the model's buffers are device memory and go
// through it, while host values (double reductions, broadcasts) stay on MPI.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace loom {

enum class ReduceOp { Sum, Max };

// The way a point-to-point transfer travels along its axis, seen as a ring: Next goes to
// (rank + 1) mod size (pipeline activations, the last stage's to the first included), Prev to
// (rank - 1) mod size (gradients). Device transfers name it: on a ring of two both ways lead to
// the same peer, and device p2p (no tags) keeps one ordered lane per way (parallel/p2p_route.h).
enum class Ring { Next, Prev };

// Collectives and point-to-point transfers on device memory (NCCL, parallel/nccl_comm.h; or the
// host-staged testing mode, parallel/host_staged_comm.h; see parallel/device_comms.h), over
// the same ranks as the Comm they are attached to, enqueued on the cuda backend's stream. Counts
// are elements of `t`. Attached to every Comm of a ParallelCtx when device: cuda (size-1 axes
// included), so device buffers never reach MPI (Debian's OpenMPI is not CUDA-aware).
class DeviceComm {
 public:
  virtual ~DeviceComm() = default;
  virtual void all_reduce(void* x, size_t n, DType t, ReduceOp op) = 0;
  virtual void reduce(void* x, size_t n, DType t, int root) = 0;  // in place at root, sum
  virtual void reduce_scatter(const void* send, void* recv, size_t n, DType t) = 0;
  virtual void all_gather(const void* send, void* recv, size_t n, DType t) = 0;
  virtual void all_gatherv(const void* send, void* recv, const std::vector<int>& counts,
                           const std::vector<int>& displs, DType t) = 0;
  // Rank r's scounts[r] elements at sdispls[r] of `send` go to rank r, which receives them at
  // rdispls[me] of its `recv` (rcounts[me] of them); counts and offsets in elements of t. The
  // expert-parallel exchange of Mixture-of-Experts rows.
  virtual void all_to_allv(const void* send, const std::vector<int>& scounts,
                           const std::vector<int>& sdispls, void* recv,
                           const std::vector<int>& rcounts, const std::vector<int>& rdispls,
                           DType t) = 0;
  virtual void broadcast(void* x, size_t bytes, int root) = 0;
  // Point-to-point as Comm's: send never blocks the host nor holds up later work on the compute
  // stream, and the caller may overwrite its buffer as soon as send returns (the data is
  // staged); recv makes later work on the stream wait for the data. complete() makes later
  // work on the compute stream wait until every send issued so far has been delivered (the
  // host does not wait): only at the end of a pipeline run. reserve_sends() allocates the
  // staging buffers of `count` sends of up to `bytes` each per direction, before any step, so
  // that no send allocates (a cudaMalloc/cudaFree mid-step can synchronize the device).
  // `peer` is the neighbour of this rank on the ring the way `way` goes; the k-th send from a
  // to b in one way matches b's k-th receive from a in that way.
  virtual void send(const void* x, size_t n, DType t, int peer, Ring way) = 0;
  virtual void recv(void* x, size_t n, DType t, int peer, Ring way) = 0;
  virtual void complete() = 0;
  virtual void reserve_sends(size_t bytes, int count) = 0;
};

// A non-blocking operation started by one of Comm's start_* calls, completed by Comm::wait (or
// found complete by Comm::test). Move-only: it owns the MPI request and whatever MPI may read
// until completion (all_gatherv's counts). Host buffers go through MPI's non-blocking calls;
// a collective on device memory is enqueued on the stream at start (stream order makes later
// work wait for it), so its request is already complete; a device receive is enqueued at wait.
// The buffers of an active request belong to MPI: do not touch them until it completes, and
// complete every request before it is dropped or assigned over.
class CommRequest {
 public:
  CommRequest() = default;
  CommRequest(CommRequest&& o) noexcept { *this = std::move(o); }
  CommRequest& operator=(CommRequest&& o) noexcept;
  CommRequest(const CommRequest&) = delete;
  CommRequest& operator=(const CommRequest&) = delete;
  bool active() const { return req_ != MPI_REQUEST_NULL || dev_recv_ != nullptr; }

 private:
  friend class Comm;
  MPI_Request req_ = MPI_REQUEST_NULL;
  const char* call_ = "";
  std::vector<int> counts_, displs_;  // all_gatherv: must outlive the MPI request
  size_t recv_n_ = 0;                 // receive: elements expected
  int peer_ = -1;
  Ring way_ = Ring::Next;
  DType dtype_ = DType::F32;
  void* dev_recv_ = nullptr;  // device receive, enqueued at wait (see Comm::start_recv)
};

// Throws InternalError naming the MPI call, the rank and MPI's message when `rc` is not success.
void mpi_check(int rc, const char* call, const char* file, int line);
#define LOOM_MPI(call) ::loom::mpi_check((call), #call, __FILE__, __LINE__)

class Comm {
 public:
  Comm() = default;  // a size-1 communicator (MPI_COMM_SELF)
  Comm(MPI_Comm comm, std::string name);

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }
  MPI_Comm mpi() const { return comm_; }

  // Buffers of the model: float and act-dtype data live where the Comm's buffers do (host
  // without a DeviceComm, device memory with one); host buffers must be fp32 (or fp64: the
  // step's scalars, which live in backend memory too).
  void all_reduce(float* x, size_t n, ReduceOp op);
  void all_reduce(void* x, size_t n, DType t, ReduceOp op);
  // In place at `root`: x (n) becomes the sum over ranks; other ranks' x is left as it was.
  void reduce(float* x, size_t n, int root);
  // recv (n) = sum over ranks of send[rank*n, rank*n+n): send holds size()*n elements.
  void reduce_scatter(const float* send, float* recv, size_t n);
  // recv (size()*n) = concatenation of every rank's send (n).
  void all_gather(const float* send, float* recv, size_t n);
  // The same two on buffers of dtype t (act-dtype activations): host buffers must be fp32.
  void reduce_scatter(const void* send, void* recv, size_t n, DType t);
  void all_gather(const void* send, void* recv, size_t n, DType t);
  // recv = concatenation of every rank's send, rank r contributing counts[r] elements placed
  // at displs[r] (counts may be 0); in place when send is recv + displs[rank].
  void all_gatherv(const float* send, float* recv, const std::vector<int>& counts,
                   const std::vector<int>& displs);
  // This rank's send[sdispls[q], +scounts[q]) goes to rank q, which receives it at its
  // recv[rdispls[me], +rcounts[me]) (Mixture of Experts: token rows to and from their experts).
  // fp32 buffers: host memory through MPI, or device memory through the attached DeviceComm.
  void all_to_allv(const float* send, const std::vector<int>& scounts,
                   const std::vector<int>& sdispls, float* recv, const std::vector<int>& rcounts,
                   const std::vector<int>& rdispls);
  // Host values, always through MPI: step counters, losses, norms, strings, row counts.
  void all_reduce(double* x, size_t n, ReduceOp op);
  void all_gather(const int32_t* send, int32_t* recv, size_t n);  // recv (size()*n)
  void broadcast(void* x, size_t bytes, int root);
  void barrier();

  // Point-to-point (peer is a rank of this communicator). isend returns at once; the buffer
  // must stay untouched until wait(). recv blocks. Sends never block, so a schedule whose
  // receives are all satisfiable cannot deadlock.
  MPI_Request isend(const float* x, size_t n, int peer, int tag);
  void recv(float* x, size_t n, int peer, int tag);
  void wait(MPI_Request* req);
  // The same on buffers of dtype t (host fp32 through MPI, device buffers through the
  // DeviceComm: isend then returns MPI_REQUEST_NULL; wait_sends() drains its sends). `way`
  // matters on device only (there peer must be the neighbour that way; see Ring).
  MPI_Request isend(const void* x, size_t n, DType t, int peer, int tag, Ring way);
  void recv(void* x, size_t n, DType t, int peer, int tag, Ring way);
  void wait_sends();
  // Device p2p (cuda): staging for `count` sends of up to `bytes` per direction, allocated now.
  void reserve_sends(size_t bytes, int count);

  // Non-blocking twins of the collectives and of recv (parallel.overlap): same arguments and
  // results, bytes counted at start. Every rank of the communicator must start its collectives
  // (blocking and non-blocking) in the same order. wait() blocks until the request completes
  // (watchdog and busy time as a blocking call); test() returns at once, true once complete,
  // and lets MPI progress the transfers meanwhile (MPI moves data only inside MPI calls when it
  // has no progress thread). Requests that are not active return at once from both.
  CommRequest start_all_reduce(float* x, size_t n, ReduceOp op);
  CommRequest start_reduce(float* x, size_t n, int root);
  CommRequest start_all_gatherv(const float* send, float* recv, std::vector<int> counts,
                                std::vector<int> displs);
  // Host: MPI_Irecv. Device: the receive is enqueued when waited for, not at start, because a
  // receive enqueued on the compute stream would hold back the compute enqueued after it (a
  // side-stream DeviceComm can enqueue it at start).
  CommRequest start_recv(void* x, size_t n, DType t, int peer, int tag, Ring way);
  void wait(CommRequest& r);
  bool test(CommRequest& r);

  // Device collectives (cuda backend): once attached, every buffer call goes there, so every
  // buffer passed to one must then be device memory.
  void set_device_comm(std::unique_ptr<DeviceComm> d) { dev_ = std::move(d); }
  DeviceComm* device_comm() const { return dev_.get(); }

  // Bytes this rank sent through collectives and p2p (payload, per call) since construction,
  // and milliseconds spent inside blocking calls (collectives, recv, wait).
  uint64_t bytes_sent() const { return bytes_; }
  double busy_ms() const { return busy_ms_; }
  double& busy_ref() { return busy_ms_; }
  const std::string& describe() const { return describe_; }  // "tp (world ranks 2,3)"

 private:
  template <typename T>
  void all_reduce_impl(T* x, size_t n, ReduceOp op, MPI_Datatype type);

  bool on_device() const { return dev_ != nullptr; }  // buffers are device memory

  std::shared_ptr<DeviceComm> dev_;
  MPI_Comm comm_ = MPI_COMM_SELF;
  std::string name_ = "self";
  std::string describe_ = "self";
  int rank_ = 0;
  int size_ = 1;
  uint64_t bytes_ = 0;
  double busy_ms_ = 0;
};

}  // namespace loom
