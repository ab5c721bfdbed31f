// NcclComm: a grid axis's DeviceComm over NCCL; attach_nccl gives every Comm of a ParallelCtx one.
#pragma once
#ifdef LOOM_HAVE_NCCL
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "parallel/comm.h"
#include "parallel/parallel_ctx.h"

namespace loom {

// Collectives run on the compute stream given at construction, so they are ordered with the
// kernels around them and the host never waits for them. With p2p (the pipeline axis) it also
// owns the point-to-point machinery, built so that a send never holds up the compute stream:
// the data is copied into a staging buffer on the compute stream (the caller may overwrite its
// buffer right after send() returns), then sent on a send stream of its own over a communicator
// used for nothing else on this rank; recv() runs on the compute stream. Peers are the ring
// neighbours (rank +- 1 mod size: pipeline stages, and the wrap of interleaved 1F1B). The
// reasoning: nccl_p2p.cpp and docs/gpu-parallel.md.
//
// Every NCCL or CUDA failure throws InternalError naming the call, the axis (what), the world
// rank and NCCL's message.
class NcclComm : public DeviceComm {
 public:
  // Collective over `comm`: its rank 0 makes the unique id (ncclGetUniqueId), MPI_Bcast hands it
  // to the others, every rank calls ncclCommInitRank on the current CUDA device. `what` names the
  // axis in messages (Comm::describe()); stream is the compute stream (cudaStream_t).
  NcclComm(MPI_Comm comm, const std::string& what, void* stream, bool p2p);
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

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

  int rank() const;
  int size() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Gives each Comm of pc (world, dp, pp, tp, embed, size-1 ones included) an NcclComm on
// `stream` (the cuda backend's compute stream); the pp axis gets the p2p machinery. Collective:
// every rank calls it, after cudaSetDevice(its GPU), outside collectively(): an NCCL failure on
// one rank throws InternalError there while others may wait inside NCCL, and main's abort_job
// then ends the job (a hang inside NCCL's set-up is caught by the communication watchdog).
void attach_nccl(ParallelCtx& pc, void* stream);
// The same for the expert-parallel communicators (ep_group, edp) when pc.ep > 1 and they have
// none yet (add_expert_comms made them after attach_nccl). Collective over the world.
void attach_nccl_experts(ParallelCtx& pc, void* stream);
// Drops the NcclComms of pc (before the compute stream they use is destroyed).
void detach_nccl(ParallelCtx& pc);

// Ids (UUIDs, "GPU-xxxxxxxx-xxxx-...") of the GPUs this process sees, in CUDA device order, for
// gpus_for_ranks(); empty when there is no driver or no device.
std::vector<std::string> visible_gpu_ids();

}  // namespace loom
#endif  // LOOM_HAVE_NCCL
