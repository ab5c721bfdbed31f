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
// 2. One send stream per direction (to rank+1: activations; to rank-1: gradients), so sends in
//    one direction never queue behind sends in the other. Within a direction the k-th send to
//    the peer matches the peer's k-th receive from us, and the peer's receives are in schedule
//    order on its compute stream, so FIFO order adds no wait the schedule does not already have.
//    This is the simulator's model: a send waits only for the data it carries.
// 3. Communicators. NCCL serializes the operations of one communicator on a rank, and using one
//    communicator from two streams at once is not supported; operations on a communicator must
//    also match in order across its ranks. So no communicator may carry both a rank's sends
//    (send stream) and its receives (compute stream): a receive queued behind a send on the
//    same communicator would reintroduce the deadlock. Four p2p communicators over the pp axis,
//    p2p[dir][parity], carry the sends in direction dir from ranks of that parity, and the
//    matching receives on their neighbours (of the other parity). On any rank each of them is
//    either send-only (on its send stream for that direction) or receive-only (on the compute
//    stream), and on each the traffic between a pair of ranks is one FIFO in schedule order.
//    Only the communicators some pair uses are made (two for pp = 2, four for pp >= 3).
// 4. complete() makes the compute stream wait for every send issued so far (the host does not
//    wait); the executor calls it at the end of a pipeline run, so that a step's sends are
//    delivered before the next step's work. Staging buffers return to a per-direction pool when
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

namespace {

// Whether some rank of a size-n axis sends in direction d from a rank of parity p (the first
// candidate: rank p upward, rank 1 or 2 downward).
bool p2p_used(Dir d, int p, int n) { return d == Dir::Up ? p + 1 < n : (p == 1 ? 1 : 2) < n; }

}  // namespace

// The p2p communicators (same order on every rank: ncclCommInitRank is collective over the
// axis), the send streams and their events, then the connections.
void NcclComm::Impl::setup_p2p(MPI_Comm mpi) {
  for (Dir d : {Dir::Up, Dir::Down})
    for (int p : {0, 1})
      if (p2p_used(d, p, size))
        p2p_comm[int(d)][p] = init(mpi, str(what, " p2p to ", d == Dir::Up ? "next" : "previous",
                                            " from ", p ? "odd" : "even", " ranks"));
  int least = 0, greatest = 0;  // numerically lower is higher priority
  cuda(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
  for (Dir d : {Dir::Up, Dir::Down}) {
    const int peer = d == Dir::Up ? rank + 1 : rank - 1;
    if (peer < 0 || peer >= size) continue;
    // Non-blocking: no implicit wait on the legacy default stream (a cudaMemcpy there must not
    // queue behind a send that waits for its peer).
    cuda(cudaStreamCreateWithPriority(&send_stream[int(d)], cudaStreamNonBlocking, greatest),
         "cudaStreamCreateWithPriority");
    cuda(cudaEventCreateWithFlags(&ready[int(d)], cudaEventDisableTiming), "cudaEventCreate");
    cuda(cudaEventCreateWithFlags(&drained[int(d)], cudaEventDisableTiming), "cudaEventCreate");
  }
  connect_p2p();
}

// One exchange of one byte on each p2p communicator, in the same order on every rank; each rank
// is the sender, the receiver or idle on it.
void NcclComm::Impl::connect_p2p() {
  void* scratch = nullptr;
  cuda(cudaMalloc(&scratch, 2), "cudaMalloc (p2p connect)");
  cudaEvent_t done = nullptr;
  cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
  for (Dir d : {Dir::Up, Dir::Down})
    for (int p : {0, 1}) {
      ncclComm_t c = p2p_comm[int(d)][p];
      if (c == nullptr) continue;
      const int to = d == Dir::Up ? rank + 1 : rank - 1, from = d == Dir::Up ? rank - 1 : rank + 1;
      if (rank % 2 == p && to >= 0 && to < size) {
        check(ncclSend(scratch, 1, ncclUint8, to, c, send_stream[int(d)]), "ncclSend (connect)", c);
        cuda(cudaEventRecord(done, send_stream[int(d)]), "cudaEventRecord");
        wait(done, {c}, "ncclSend (connect)");
      } else if (from >= 0 && from < size && from % 2 == p) {
        char* dst = static_cast<char*>(scratch) + 1;
        check(ncclRecv(dst, 1, ncclUint8, from, c, stream), "ncclRecv (connect)", c);
        cuda(cudaEventRecord(done, stream), "cudaEventRecord");
        wait(done, {c}, "ncclRecv (connect)");
      }
    }
  cudaEventDestroy(done);
  cuda(cudaFree(scratch), "cudaFree (p2p connect)");
}

// A free staging buffer of at least `bytes` for a send in direction d (index into staging[d]).
size_t NcclComm::Impl::staging_slot(Dir d, size_t bytes) {
  std::vector<Staging>& pool = staging[int(d)];
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
    wait(pool[pick].sent, {p2p_comm[int(d)][rank % 2]}, "ncclSend (staging buffer reuse)");
    pool[pick].busy = false;
  }
  return pick;
}

void NcclComm::reserve_sends(size_t bytes, int count) {
  Impl& m = *impl_;
  if (!m.p2p) return;
  LOOM_CHECK(count > 0 && count <= int(kMaxStaging), "reserve_sends: ", count,
             " staging buffers per direction (1..", kMaxStaging, ")");
  for (Dir d : {Dir::Up, Dir::Down}) {
    if (m.send_stream[int(d)] == nullptr) continue;
    std::vector<Impl::Staging>& pool = m.staging[int(d)];
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

void NcclComm::send(const void* x, size_t n, DType t, int peer) {
  Impl& m = *impl_;
  LOOM_CHECK(m.p2p, "NCCL send on ", m.what,
             ": point-to-point is set up on the pipeline axis only");
  LOOM_CHECK(peer == m.rank + 1 || peer == m.rank - 1, "NCCL send on ", m.what, " from rank ",
             m.rank, " to ", peer, ": only adjacent ranks (pipeline neighbours) are supported");
  const Dir d = peer == m.rank + 1 ? Dir::Up : Dir::Down;
  const size_t bytes = n * dtype_size(t);
  if (bytes == 0) return;
  const size_t slot = m.staging_slot(d, bytes);
  Impl::Staging& s = m.staging[int(d)][slot];
  ncclComm_t c = m.p2p_comm[int(d)][m.rank % 2];
  m.cuda(cudaMemcpyAsync(s.ptr, x, bytes, cudaMemcpyDeviceToDevice, m.stream),
         "cudaMemcpyAsync (p2p staging)");
  m.cuda(cudaEventRecord(m.ready[int(d)], m.stream), "cudaEventRecord");
  m.cuda(cudaStreamWaitEvent(m.send_stream[int(d)], m.ready[int(d)], 0), "cudaStreamWaitEvent");
  m.check(ncclSend(s.ptr, bytes, ncclUint8, peer, c, m.send_stream[int(d)]), "ncclSend", c);
  m.cuda(cudaEventRecord(s.sent, m.send_stream[int(d)]), "cudaEventRecord");
  s.busy = true;
  s.seq = ++m.sends;
}

void NcclComm::recv(void* x, size_t n, DType t, int peer) {
  Impl& m = *impl_;
  LOOM_CHECK(m.p2p, "NCCL recv on ", m.what,
             ": point-to-point is set up on the pipeline axis only");
  LOOM_CHECK(peer == m.rank + 1 || peer == m.rank - 1, "NCCL recv on ", m.what, " at rank ", m.rank,
             " from ", peer, ": only adjacent ranks (pipeline neighbours) are supported");
  const Dir d = peer == m.rank - 1 ? Dir::Up : Dir::Down;  // the direction the data travels
  const size_t bytes = n * dtype_size(t);
  if (bytes == 0) return;
  ncclComm_t c = m.p2p_comm[int(d)][peer % 2];
  m.check(ncclRecv(x, bytes, ncclUint8, peer, c, m.stream), "ncclRecv", c);
}

void NcclComm::complete() {
  Impl& m = *impl_;
  for (Dir d : {Dir::Up, Dir::Down}) {
    if (m.send_stream[int(d)] == nullptr) continue;
    m.cuda(cudaEventRecord(m.drained[int(d)], m.send_stream[int(d)]), "cudaEventRecord");
    m.cuda(cudaStreamWaitEvent(m.stream, m.drained[int(d)], 0), "cudaStreamWaitEvent");
    for (Impl::Staging& s : m.staging[int(d)]) s.busy = false;  // reused after that wait
  }
}

}  // namespace loom
