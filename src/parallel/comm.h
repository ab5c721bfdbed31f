// Comm: the collectives and point-to-point calls of one grid axis. MPI underneath on the cpu
// backend; calls dispatch on the tensor's device so an NCCL communicator can slot in for cuda.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace loom {

enum class ReduceOp { Sum, Max };

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

  void all_reduce(float* x, size_t n, ReduceOp op);
  void all_reduce(double* x, size_t n, ReduceOp op);
  void all_reduce(const Tensor& t, ReduceOp op);
  // In place at `root`: x (n) becomes the sum over ranks; other ranks' x is left as it was.
  void reduce(float* x, size_t n, int root);
  // recv (n) = sum over ranks of send[rank*n, rank*n+n): send holds size()*n elements.
  void reduce_scatter(const float* send, float* recv, size_t n);
  // recv (size()*n) = concatenation of every rank's send (n).
  void all_gather(const float* send, float* recv, size_t n);
  // recv = concatenation of every rank's send, rank r contributing counts[r] elements placed
  // at displs[r] (counts may be 0).
  void all_gatherv(const float* send, float* recv, const std::vector<int>& counts,
                   const std::vector<int>& displs);
  void broadcast(void* x, size_t bytes, int root);
  void barrier();

  // Point-to-point (peer is a rank of this communicator). isend returns at once; the buffer
  // must stay untouched until wait(). recv blocks. Sends never block, so a schedule whose
  // receives are all satisfiable cannot deadlock.
  MPI_Request isend(const float* x, size_t n, int peer, int tag);
  void recv(float* x, size_t n, int peer, int tag);
  void wait(MPI_Request* req);

  // Bytes this rank sent through collectives and p2p (payload, per call) since construction,
  // and milliseconds spent inside blocking calls (collectives, recv, wait).
  uint64_t bytes_sent() const { return bytes_; }
  double busy_ms() const { return busy_ms_; }
  double& busy_ref() { return busy_ms_; }
  const std::string& describe() const { return describe_; }  // "tp (world ranks 2,3)"

 private:
  template <typename T>
  void all_reduce_impl(T* x, size_t n, ReduceOp op, MPI_Datatype type);

  MPI_Comm comm_ = MPI_COMM_SELF;
  std::string name_ = "self";
  std::string describe_ = "self";
  int rank_ = 0;
  int size_ = 1;
  uint64_t bytes_ = 0;
  double busy_ms_ = 0;
};

}  // namespace loom
