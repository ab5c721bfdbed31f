// HostStagedComm: a DeviceComm through host memory and MPI (testing multi-rank device layouts).
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "parallel/comm.h"

namespace loom {

// Every call synchronizes the backend's stream, copies the device buffers to host buffers
// (Backend::to_host), runs the MPI call on a duplicate of the axis's communicator and copies
// the result back (Backend::from_host). Ranks may share one device, and the CPU emulation of
// the cuda backend (LOOM_CUDA=EMULATE) runs it with no GPU at all. A testing mode, slow by
// design: the host waits for every transfer.
//
// Reductions of bf16/fp16 buffers widen to fp32 on the host, reduce in fp32 (MPI_FLOAT) and
// round once back to the buffer's type (round-to-nearest-even): the result is the exact sum
// rounded to fp32 (a few fp32 ulps for small rank counts), then to bf16/fp16: at most half an
// ulp of the result's type from the fp32 sum, where NCCL rounds to the buffer's type at every
// step of its ring and so may differ from this by a few ulps of that type.
//
// Point-to-point keeps DeviceComm's semantics and NCCL's matching: send() copies the data to a
// host staging buffer (the caller may reuse its own at once) and starts MPI_Issend, so the host
// never waits for the receiver; the MPI tag is the p2p lane (p2p_route.h: way and sender
// colour), so messages match per (sender, receiver, way) in order, exactly as the NCCL lanes do,
// and the device runs exercise the ordering the NCCL path relies on. Synchronous mode (Issend)
// makes a send complete only once its receive has started, as an NCCL send does, whatever its
// size: a staging buffer is free again under the same condition as on NCCL, so a reservation
// too small for the schedule shows here as it would there. recv() blocks the host
// until the data is there (MPI_Recv), then copies it to the device. complete() waits for every
// send so far (MPI_Waitall): every rank has then issued all its sends of the pipeline run, so
// each is matched by a receive its peer makes without waiting for this rank.
class HostStagedComm : public DeviceComm {
 public:
  // Collective over `comm` (MPI_Comm_dup). `what` names the axis in messages.
  HostStagedComm(MPI_Comm comm, const std::string& what, Backend& be);
  ~HostStagedComm() override;
  HostStagedComm(const HostStagedComm&) = delete;
  HostStagedComm& operator=(const HostStagedComm&) = delete;

  void all_reduce(void* x, size_t n, DType t, ReduceOp op) override;
  void reduce(void* x, size_t n, DType t, int root) override;
  void reduce_scatter(const void* send, void* recv, size_t n, DType t) override;
  void all_gather(const void* send, void* recv, size_t n, DType t) override;
  void all_gatherv(const void* send, void* recv, const std::vector<int>& counts,
                   const std::vector<int>& displs, DType t) override;
  void all_to_allv(const void* send, const std::vector<int>& scounts,
                   const std::vector<int>& sdispls, void* recv, const std::vector<int>& rcounts,
                   const std::vector<int>& rdispls, DType t) override;
  void broadcast(void* x, size_t bytes, int root) override;
  void send(const void* x, size_t n, DType t, int peer, Ring way) override;
  void recv(void* x, size_t n, DType t, int peer, Ring way) override;
  void complete() override;
  void reserve_sends(size_t bytes, int count) override;

  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  struct Staged {
    std::vector<char> data;
    MPI_Request req = MPI_REQUEST_NULL;
    uint64_t seq = 0;  // order of the send, to wait for the oldest when the pool is full
  };
  void down(std::vector<char>& host, const void* dev, size_t bytes);  // device -> host
  void up(void* dev, const std::vector<char>& host, size_t bytes);    // host -> device
  // In place on host bytes holding n elements of t: MPI reduction (fp32 for bf16/fp16).
  void reduce_host(std::vector<char>& buf, size_t n, DType t, ReduceOp op, int root, bool scatter);
  size_t staging_slot(Ring way, size_t bytes);

  Backend& be_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::string what_;
  int rank_ = 0, size_ = 1;
  std::vector<char> host_, out_;    // scratch of the collectives
  std::vector<Staged> staging_[2];  // per way (int(Ring))
  uint64_t sends_ = 0;
};

}  // namespace loom
