// Which DeviceComm the communicators of a cuda run get (LOOM_DEVICE_COMM), and attaching them.
#pragma once
#include "backend/backend.h"
#include "parallel/parallel_ctx.h"

namespace loom {

// nccl: NCCL, one GPU per rank (parallel/nccl_comm.h). host: the host-staged testing mode
// (parallel/host_staged_comm.h): every device transfer goes through host memory and MPI, and
// ranks may share a device. Chosen by the environment variable LOOM_DEVICE_COMM (nccl or host),
// read once per process; unset: nccl where loom was built with NCCL, host in the CPU emulation
// build (LOOM_CUDA=EMULATE), which has no NCCL. A value this build cannot run throws UserError.
enum class DeviceCommKind { Nccl, Host };
DeviceCommKind device_comm_kind();
const char* device_comm_name(DeviceCommKind k);  // "nccl", "host"

// Gives each Comm of pc (world, dp, pp, tp, embed, size-1 ones included) a DeviceComm of
// device_comm_kind() on be's compute stream; the pp axis gets point-to-point. Collective: every
// rank calls it, in the same order, after the backend is made on its device.
void attach_device_comms(ParallelCtx& pc, Backend& be);
// Expert parallelism (pc.ep > 1): the same for ep_group and edp, when they have none yet
// (add_expert_comms may come after attach_device_comms). Collective: every rank calls it.
void attach_expert_device_comms(ParallelCtx& pc, Backend& be);
// Drops them (before the backend and its stream go).
void detach_device_comms(ParallelCtx& pc);

}  // namespace loom
