// Internal to the NCCL communicators (nccl_comm.cpp, nccl_p2p.cpp): NcclComm::Impl and checks.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "parallel/nccl_comm.h"
#include "parallel/p2p_route.h"

namespace loom {
namespace nccl_detail {

// The per-way arrays of NcclComm::Impl are indexed by int(Ring): Next (activations), Prev.
constexpr size_t kMaxStaging = 64;  // staging buffers per way before a send waits

// Throw InternalError naming the call, the communicator (what), the world rank and the error.
[[noreturn]] void nccl_failed(ncclResult_t rc, const char* call, const std::string& what,
                              ncclComm_t comm);
void nccl_check(ncclResult_t rc, const char* call, const std::string& what, ncclComm_t comm);
void cuda_check(cudaError_t e, const char* call, const std::string& what);

}  // namespace nccl_detail

// What an NcclComm owns: its communicators, and on the pipeline axis the p2p communicators, send
// streams and staging buffers (nccl_p2p.cpp explains them).
struct NcclComm::Impl {
  struct Staging {
    void* ptr = nullptr;
    size_t bytes = 0;
    cudaEvent_t sent = nullptr;  // recorded on the send stream after the send
    bool busy = false;
    uint64_t seq = 0;  // order of the send, to wait for the oldest when the pool is full
  };

  std::string what;
  int rank = 0, size = 1;
  cudaStream_t stream = nullptr;  // compute stream (not owned)
  ncclComm_t comm = nullptr;      // collectives
  bool p2p = false;
  ncclComm_t p2p_comm[kP2PLanes] = {};  // by lane (p2p_route.h: way and sender colour)
  cudaStream_t send_stream[2] = {nullptr, nullptr};
  cudaEvent_t ready[2] = {nullptr, nullptr};    // staging copy done (compute stream)
  cudaEvent_t drained[2] = {nullptr, nullptr};  // complete(): sends so far done (send stream)
  std::vector<Staging> staging[2];
  uint64_t sends = 0;

  void check(ncclResult_t rc, const char* call, ncclComm_t c) const {
    nccl_detail::nccl_check(rc, call, what, c);
  }
  void cuda(cudaError_t e, const char* call) const { nccl_detail::cuda_check(e, call, what); }

  ncclComm_t init(MPI_Comm mpi, const std::string& label);
  void wait(cudaEvent_t ev, std::initializer_list<ncclComm_t> comms, const char* call) const;
  void setup_p2p(MPI_Comm mpi);  // nccl_p2p.cpp
  void connect_p2p();
  size_t staging_slot(Ring way, size_t bytes);
  ~Impl();
};

}  // namespace loom
