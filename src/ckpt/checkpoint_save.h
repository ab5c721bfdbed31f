// Checkpoint saves in three phases (docs/checkpoints.md, "Asynchronous saves"): stage
// (collective: the training state copied to host memory on the ranks that write), write (file
// I/O only, no MPI: may run on a background thread) and commit (collective: meta.json, rename,
// `latest` and pruning on world rank 0). save_checkpoint() (checkpoint.h) runs all three.
#pragma once
#include <cstdint>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/checkpoint.h"

namespace loom {

// Elements are left uninitialised on resize (every staged element is overwritten by a copy), so
// new pages are first touched by the copy itself, after they were advised to be huge pages.
template <class T>
struct NoInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = NoInitAllocator<U>;
  };
  NoInitAllocator() = default;
  template <class U>
  NoInitAllocator(const NoInitAllocator<U>&) {}
  template <class U, class... A>
  void construct(U* p, A&&... a) {
    if constexpr (sizeof...(A) == 0)
      ::new (static_cast<void*>(p)) U;
    else
      ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
};
using HostFloats = std::vector<float, NoInitAllocator<float>>;

// Sizes b to n elements; memory newly allocated is advised to use transparent huge pages
// (madvise), which makes its first touch far cheaper than 4 KiB page faults.
void size_staging_buffer(HostFloats& b, size_t n);

// The host copies of a staged checkpoint: (layout total) whole-stage parameters and AdamW
// moments on a writing rank, empty elsewhere. Asynchronous saves hand them from one save to the
// next, so that later saves copy into memory already mapped.
struct StagingBuffers {
  HostFloats params, m, v;
};

// A checkpoint copied to host memory at its save point and not yet committed.
struct StagedCheckpoint {
  int step = 0;
  int64_t consumed_samples = 0;
  TrainerState state;
  int zero_stage = 0;
  std::string root, tmp_dir, final_dir;  // checkpoint.dir, step_NNNNNNN.tmp, step_NNNNNNN
  const ParamLayout* layout = nullptr;   // the trainer's; outlives the write
  bool writes = false;        // this rank writes a shard (the first expert replica of its (pp, tp))
  bool experts_only = false;  // a rank of that replica other than dp0: its experts only
  std::string file;           // that shard, under tmp_dir
  StagingBuffers buf;         // released by write_staged once written, unless keep_buffers
  bool keep_buffers = false;
  // Fault injection (LOOM_FAULT_KILL_IN_ASYNC_WRITE=STEP): SIGKILL this process half way
  // through writing its shard.
  bool kill_mid_write = false;
  // Test hook (LOOM_TEST_ASYNC_WRITE_DELAY_MS=N): the asynchronous write starts N ms late, so a
  // test can find a save in flight at a chosen moment.
  int delay_ms = 0;
  std::string record;  // after the write: the shard's JSON record (file, bytes, crc32, blocks)
  double stage_s = 0;  // seconds the caller spent in stage_checkpoint (training paused)
};

// Collective over the world: rank 0 creates <dir>/step_NNNNNNN.tmp; ZeRO-sharded moments (and
// ZeRO-3 parameters) are gathered to replica 0 of each (pp, tp), which copies the rest from the
// device (Backend::to_host). Nothing of the device is referenced afterwards. `async` only arms
// the hooks of the asynchronous writer and keeps the buffers after the write; `reuse`: the
// buffers of the previous asynchronous save.
StagedCheckpoint stage_checkpoint(const Config& cfg, int step, int64_t consumed_samples,
                                  const ParamLayout& layout, GPTStage& model, ZeroOptimizer& opt,
                                  ParallelCtx& pc, const TrainerState& state, bool async,
                                  StagingBuffers reuse = {});

// Writes this rank's shard of s (nothing on ranks that do not write): HDF5, fsync, CRC-32 read
// back. No MPI; holds h5::serial() throughout. Throws on an I/O error.
void write_staged(StagedCheckpoint& s);

// Collective over the world, after every rank's write_staged returned: gathers the shard records
// and world rank 0 writes meta.json, renames step_NNNNNNN.tmp to step_NNNNNNN, rewrites `latest`
// and prunes beyond keep_last. Logs the save; `async` selects the line's wording. Returns the
// step directory.
std::string commit_checkpoint(const Config& cfg, const StagedCheckpoint& s, ParallelCtx& pc,
                              bool async);

}  // namespace loom
