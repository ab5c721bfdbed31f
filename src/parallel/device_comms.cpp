// LOOM_DEVICE_COMM: NCCL or the host-staged testing mode on every communicator of a cuda run.
#include "parallel/device_comms.h"

#include <cstdlib>
#include <memory>
#include <string>

#include "core/check.h"
#include "parallel/host_staged_comm.h"
#ifdef LOOM_HAVE_NCCL
#include "parallel/nccl_comm.h"
#endif

namespace loom {

namespace {

DeviceCommKind read_kind() {
#ifdef LOOM_HAVE_NCCL
  const DeviceCommKind fallback = DeviceCommKind::Nccl;
#else
  const DeviceCommKind fallback = DeviceCommKind::Host;
#endif
  const char* v = std::getenv("LOOM_DEVICE_COMM");
  if (v == nullptr || *v == '\0') return fallback;
  const std::string s = v;
  if (s == "host") return DeviceCommKind::Host;
  if (s != "nccl")
    throw UserError(str("LOOM_DEVICE_COMM=", s, " is not a device communicator; set nccl (the ",
                        "default) or host (the host-staged testing mode), or unset it"));
#ifndef LOOM_HAVE_NCCL
  throw UserError(
      "LOOM_DEVICE_COMM=nccl, but this loom was built without NCCL (the CPU emulation build, "
      "LOOM_CUDA=EMULATE, has none); set LOOM_DEVICE_COMM=host or unset it");
#endif
  return DeviceCommKind::Nccl;
}

}  // namespace

DeviceCommKind device_comm_kind() {
  static const DeviceCommKind kind = read_kind();
  return kind;
}

const char* device_comm_name(DeviceCommKind k) {
  return k == DeviceCommKind::Host ? "host" : "nccl";
}

void attach_device_comms(ParallelCtx& pc, Backend& be) {
#ifdef LOOM_HAVE_NCCL
  if (device_comm_kind() == DeviceCommKind::Nccl) return attach_nccl(pc, be.stream());
#endif
  // The same order on every rank: each construction is collective over its axis. As
  // attach_nccl: dp x cp (the gradient replicas) only with context parallelism.
  for (Comm* c : {&pc.world, &pc.dp, &pc.pp, &pc.tp, &pc.embed, &pc.cp, &pc.dpcp})
    if (c != &pc.dpcp || pc.grid.size(Axis::CP) > 1)
      c->set_device_comm(std::make_unique<HostStagedComm>(c->mpi(), c->describe(), be));
  attach_expert_device_comms(pc, be);
}

void attach_expert_device_comms(ParallelCtx& pc, Backend& be) {
  if (pc.ep <= 1 || pc.ep_group.device_comm() != nullptr) return;
#ifdef LOOM_HAVE_NCCL
  if (device_comm_kind() == DeviceCommKind::Nccl) return attach_nccl_experts(pc, be.stream());
#endif
  for (Comm* c : {&pc.ep_group, &pc.edp})
    c->set_device_comm(std::make_unique<HostStagedComm>(c->mpi(), c->describe(), be));
}

void detach_device_comms(ParallelCtx& pc) {
#ifdef LOOM_HAVE_NCCL
  if (device_comm_kind() == DeviceCommKind::Nccl) return detach_nccl(pc);
#endif
  for (Comm* c :
       {&pc.world, &pc.dp, &pc.pp, &pc.tp, &pc.embed, &pc.cp, &pc.dpcp, &pc.ep_group, &pc.edp})
    c->set_device_comm(nullptr);
}

}  // namespace loom
