// NCCL pipeline point-to-point: sends that never block the compute stream.
//
// Point-to-point design. The pipeline executor relies on MPI's semantics: isend returns at once
// and never waits for the receiver, so a schedule whose receives can all be matched cannot
// deadlock (layout/schedule.h simulates exactly that). NCCL's send does wait: its kernel holds
// its stream until the peer's receive runs. Enqueued on the compute stream, stage i's "send
// activation k, then receive gradient j" and stage i+1's "send gradient j, then receive
// activation k+1" block each other for good. Hence:
//
// 1. Sends leave the compute stream. send() copies the data into a staging buffer on the compute
//    stream (so it is ordered after the kernels that produced it, and the caller may reuse its
//    buffer at once, as with MPI_Bsend), records an event, and a send stream waits for that event
//    and runs ncclSend. Only that send stream waits for the peer. recv() runs ncclRecv on the
//    compute stream: later kernels wait for the data, which is what a receive means.
// 2. One send stream per way along the ring (Next: to rank+1 mod n, activations, the last
//    stage's to the first included; Prev: to rank-1 mod n, gradients), so sends one way never
//    queue behind sends the other way. The caller names the way (Ring): on a ring of two both
//    lead to the same peer. Within a way the k-th send to the peer matches the peer's k-th
//    receive from us that way, and the peer's receives are in schedule order on its compute
//    stream, so FIFO order adds no wait the schedule does not already have. This is the
//    simulator's model: a send waits only for the data it carries.
// 3. Communicators. NCCL serializes the operations of one communicator on a rank, and using one
//    communicator from two streams at once is not supported; operations on a communicator must
//    also match in order across its ranks. So no communicator may carry both a rank's sends
//    (send stream) and its receives (compute stream): a receive queued behind a send on the
//    same communicator would reintroduce the deadlock. The p2p communicators over the pp axis
//    are lanes (parallel/p2p_route.h): one per way and sender colour, the colours making ring
//    neighbours differ (rank parity, and a third colour for the last rank of an odd ring, whose
//    successor 0 is even too). A lane carries the sends one way from ranks of its colour and the
//    matching receives on their neighbours, of other colours: on any rank each lane is either
//    send-only (on its send stream for that way) or receive-only (on the compute stream), and on
//    each the traffic between a pair of ranks is one FIFO in schedule order. Four lanes on an
//    even ring, six on an odd one.
// 4. complete() makes the compute stream wait for every send issued so far (the host does not
//    wait); the executor calls it at the end of a pipeline run, so that a step's sends are
//    delivered before the next step's work. Staging buffers return to a per-way pool when
//    their send's event has completed, or at complete() (a later staging copy runs on the
//    compute stream, after that wait). The pool is allocated before the first step
//    (reserve_sends: as many sends as the schedule keeps in flight); a send never allocates,
//    since cudaMalloc/cudaFree can synchronize the device and so wait for an NCCL kernel that
//    waits for a peer that waits for this rank. More sends in flight than reserved wait (on the
//    host) for the oldest.
// 5. At construction every p2p connection is made with a one-byte exchange, so that the first
//    ncclSend of a step never blocks the host while NCCL connects to the peer.
// Cost: one device-to-device copy per pipeline send (activations of one micro-batch; at 3 TB/s
// about 30 us per 50 MB) and the staging memory.
#include "core/check.h"
#include "parallel/nccl_comm.h"
#include "parallel/nccl_impl.h"

namespace loom {

using namespace nccl_detail;

// The p2p communicators (same order on every rank: ncclCommInitRank is collective over the
// axis), the send streams and their events, then the connections.
void NcclComm::Impl::setup_p2p(MPI_Comm mpi) {
  for (int lane = 0; lane < kP2PLanes; ++lane)
    if (p2p_lane_used(lane, size))
      p2p_comm[lane] =
          init(mpi, str(what, " p2p to ", lane_way(lane) == Ring::Next ? "next" : "previous",
                        " from ranks of colour ", lane % 3));
  int least = 0, greatest = 0;  // numerically lower is higher priority
  cuda(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
  for (int d : {0, 1}) {
    // Non-blocking: no implicit wait on the legacy default stream (a cudaMemcpy there must not
    // queue behind a send that waits for its peer).
    cuda(cudaStreamCreateWithPriority(&send_stream[d], cudaStreamNonBlocking, greatest),
         "cudaStreamCreateWithPriority");
    cuda(cudaEventCreateWithFlags(&ready[d], cudaEventDisableTiming), "cudaEventCreate");
    cuda(cudaEventCreateWithFlags(&drained[d], cudaEventDisableTiming), "cudaEventCreate");
  }
  connect_p2p();
}

// One exchange of one byte on each lane, in the same order on every rank; each rank is a sender,
// a receiver or idle on it (its colour differs from both neighbours').
void NcclComm::Impl::connect_p2p() {
  void* scratch = nullptr;
  cuda(cudaMalloc(&scratch, 2), "cudaMalloc (p2p connect)");
  cudaEvent_t done = nullptr;
  cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
  for (int lane = 0; lane < kP2PLanes; ++lane) {
    ncclComm_t c = p2p_comm[lane];
    if (c == nullptr) continue;
    const Ring way = lane_way(lane);
    const int to = ring_peer(rank, way, size);
    const int from = ring_peer(rank, way == Ring::Next ? Ring::Prev : Ring::Next, size);
    if (p2p_lane(rank, way, size) == lane) {
      check(ncclSend(scratch, 1, ncclUint8, to, c, send_stream[int(way)]), "ncclSend (connect)", c);
      cuda(cudaEventRecord(done, send_stream[int(way)]), "cudaEventRecord");
      wait(done, {c}, "ncclSend (connect)");
    } else if (p2p_lane(from, way, size) == lane) {
      char* dst = static_cast<char*>(scratch) + 1;
      check(ncclRecv(dst, 1, ncclUint8, from, c, stream), "ncclRecv (connect)", c);
      cuda(cudaEventRecord(done, stream), "cudaEventRecord");
      wait(done, {c}, "ncclRecv (connect)");
    }
  }
  cudaEventDestroy(done);
  cuda(cudaFree(scratch), "cudaFree (p2p connect)");
}

// A free staging buffer of at least `bytes` for a send one way (index into staging[way]).
size_t NcclComm::Impl::staging_slot(Ring way, size_t bytes) {
  std::vector<Staging>& pool = staging[int(way)];
  for (Staging& s : pool) {
    if (!s.busy) continue;
    const cudaError_t e = cudaEventQuery(s.sent);
    if (e == cudaSuccess)
      s.busy = false;
    else if (e != cudaErrorNotReady)
      cuda(e, "cudaEventQuery (p2p staging)");
  }
  size_t pick = pool.size();
  for (size_t i = 0; i < pool.size(); ++i)
    if (!pool[i].busy && (pick == pool.size() || pool[i].bytes >= bytes)) {
      pick = i;
      if (pool[i].bytes >= bytes) break;
    }
  LOOM_CHECK(!pool.empty() && pool[0].bytes >= bytes, "NCCL send of ", bytes, " bytes on ", what,
             " without a staging buffer reserved for it (reserve_sends: ",
             pool.empty() ? size_t(0) : pool[0].bytes, " bytes)");
  if (pick == pool.size()) {
    // Every buffer is in flight (more than the schedule was reserved for): wait for the oldest.
    pick = 0;
    for (size_t i = 1; i < pool.size(); ++i)
      if (pool[i].seq < pool[pick].seq) pick = i;
    wait(pool[pick].sent, {p2p_comm[p2p_lane(rank, way, size)]}, "ncclSend (staging buffer reuse)");
    pool[pick].busy = false;
  }
  return pick;
}

void NcclComm::reserve_sends(size_t bytes, int count) {
  Impl& m = *impl_;
  if (!m.p2p) return;
  LOOM_CHECK(count > 0 && count <= int(kMaxStaging), "reserve_sends: ", count,
             " staging buffers per way (1..", kMaxStaging, ")");
  for (int d : {0, 1}) {
    if (m.send_stream[d] == nullptr) continue;
    std::vector<Impl::Staging>& pool = m.staging[d];
    for (Impl::Staging& s : pool)  // a larger reservation replaces a smaller one (set-up only)
      if (s.bytes < bytes) {
        LOOM_CHECK(!s.busy, "reserve_sends on ", m.what, " while a send is in flight");
        m.cuda(cudaFree(s.ptr), "cudaFree (p2p staging)");
        s.ptr = nullptr;
        m.cuda(cudaMalloc(&s.ptr, bytes), "cudaMalloc (p2p staging)");
        s.bytes = bytes;
      }
    while (pool.size() < size_t(count)) {
      Impl::Staging s;
      m.cuda(cudaEventCreateWithFlags(&s.sent, cudaEventDisableTiming), "cudaEventCreate");
      m.cuda(cudaMalloc(&s.ptr, bytes), "cudaMalloc (p2p staging)");
      s.bytes = bytes;
      pool.push_back(s);
    }
  }
}

void NcclComm::send(const void* x, size_t n, DType t, int peer, Ring way) {
  Impl& m = *impl_;
  LOOM_CHECK(m.p2p, "NCCL send on ", m.what,
             ": point-to-point is set up on the pipeline axis only");
  LOOM_CHECK(peer == ring_peer(m.rank, way, m.size), "NCCL send on ", m.what, " from rank ", m.rank,
             " to ", peer, ": the neighbour that way on the ring is ",
             ring_peer(m.rank, way, m.size));
  const int d = int(way);
  const size_t bytes = n * dtype_size(t);
  if (bytes == 0) return;
  const size_t slot = m.staging_slot(way, bytes);
  Impl::Staging& s = m.staging[d][slot];
  ncclComm_t c = m.p2p_comm[p2p_lane(m.rank, way, m.size)];
  m.cuda(cudaMemcpyAsync(s.ptr, x, bytes, cudaMemcpyDeviceToDevice, m.stream),
         "cudaMemcpyAsync (p2p staging)");
  m.cuda(cudaEventRecord(m.ready[d], m.stream), "cudaEventRecord");
  m.cuda(cudaStreamWaitEvent(m.send_stream[d], m.ready[d], 0), "cudaStreamWaitEvent");
  m.check(ncclSend(s.ptr, bytes, ncclUint8, peer, c, m.send_stream[d]), "ncclSend", c);
  m.cuda(cudaEventRecord(s.sent, m.send_stream[d]), "cudaEventRecord");
  s.busy = true;
  s.seq = ++m.sends;
}

void NcclComm::recv(void* x, size_t n, DType t, int peer, Ring way) {
  Impl& m = *impl_;
  LOOM_CHECK(m.p2p, "NCCL recv on ", m.what,
             ": point-to-point is set up on the pipeline axis only");
  const Ring back = way == Ring::Next ? Ring::Prev : Ring::Next;
  LOOM_CHECK(peer == ring_peer(m.rank, back, m.size), "NCCL recv on ", m.what, " at rank ", m.rank,
             " from ", peer, ": data travelling that way comes from ",
             ring_peer(m.rank, back, m.size));
  const size_t bytes = n * dtype_size(t);
  if (bytes == 0) return;
  ncclComm_t c = m.p2p_comm[p2p_lane(peer, way, m.size)];
  m.check(ncclRecv(x, bytes, ncclUint8, peer, c, m.stream), "ncclRecv", c);
}

void NcclComm::complete() {
  Impl& m = *impl_;
  for (int d : {0, 1}) {
    if (m.send_stream[d] == nullptr) continue;
    m.cuda(cudaEventRecord(m.drained[d], m.send_stream[d]), "cudaEventRecord");
    m.cuda(cudaStreamWaitEvent(m.stream, m.drained[d], 0), "cudaStreamWaitEvent");
    for (Impl::Staging& s : m.staging[d]) s.busy = false;  // reused after that wait
  }
}

}  // namespace loom
