// Asynchronous checkpoint saves (checkpoint.async): the staged state is written to its files by
// a background thread while training goes on; completion is agreed and committed on the main
// thread, which alone calls MPI (docs/checkpoints.md, "Asynchronous saves").
#pragma once
#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "ckpt/checkpoint_save.h"

namespace loom {

// One function run on a background thread: started, polled, waited for. Its exception is kept
// and rethrown by wait(). The destructor waits for a running function.
class BackgroundJob {
 public:
  BackgroundJob() = default;
  BackgroundJob(const BackgroundJob&) = delete;
  BackgroundJob& operator=(const BackgroundJob&) = delete;
  ~BackgroundJob();
  // Starts f; InternalError when a job was started and not waited for.
  void start(std::function<void()> f);
  bool started() const { return thread_.joinable(); }
  // Whether the started function has returned or thrown (false when none was started).
  bool done() const { return done_.load(std::memory_order_acquire); }
  // Joins the started function and rethrows its exception, if any; nothing when none started.
  void wait();

 private:
  std::thread thread_;
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
};

// At most one checkpoint in flight: staged, written in the background, not yet committed.
class AsyncCheckpointWriter {
 public:
  // Starts writing s (stage_checkpoint) on the background thread; InternalError when a save is
  // still in flight (commit() it first).
  void start(StagedCheckpoint s);
  // A save was started and is not committed; the same on every rank (saves start collectively).
  bool in_flight() const { return staged_ != nullptr; }
  // This rank has nothing left to write for the save in flight (its shard is written, the
  // write failed, or it writes no shard).
  bool written() const { return !staged_ || job_.done(); }
  // Collective over the world, on every rank at the same point: waits for this rank's write,
  // agrees on errors (a failed write anywhere: every rank throws ReportedError and the save stays
  // uncommitted), then commits (commit_checkpoint). Returns the step directory.
  std::string commit(const Config& cfg, ParallelCtx& pc);
  // The host buffers of the last committed save, for the next one (stage_checkpoint's reuse).
  StagingBuffers take_buffers() { return std::move(spare_); }

 private:
  StagingBuffers spare_;
  std::unique_ptr<StagedCheckpoint> staged_;
  BackgroundJob job_;  // after staged_: destroyed (joined) first
};

}  // namespace loom
