// The background checkpoint writer: a thread that runs write_staged, and the collective commit.
#include "ckpt/async_writer.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <csignal>

#include "core/check.h"
#include "parallel/collective.h"

namespace loom {

BackgroundJob::~BackgroundJob() {
  if (thread_.joinable()) thread_.join();
}

void BackgroundJob::start(std::function<void()> f) {
  LOOM_CHECK(!thread_.joinable(), "a background job started while another was not waited for");
  done_.store(false, std::memory_order_relaxed);
  error_ = nullptr;
  // The stop signals (train/signals.h) go to the main thread: the new thread inherits a mask
  // that blocks them, and its system calls are never interrupted by them.
  sigset_t stop, old;
  sigemptyset(&stop);
  for (int sig : {SIGTERM, SIGUSR1, SIGINT}) sigaddset(&stop, sig);
  LOOM_CHECK(pthread_sigmask(SIG_BLOCK, &stop, &old) == 0, "pthread_sigmask");
  auto body = [this, f = std::move(f)] {
    try {
      f();
    } catch (...) {
      error_ = std::current_exception();
    }
    done_.store(true, std::memory_order_release);
  };
  try {
    thread_ = std::thread(std::move(body));
  } catch (...) {
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    throw;
  }
  LOOM_CHECK(pthread_sigmask(SIG_SETMASK, &old, nullptr) == 0, "pthread_sigmask");
}

void BackgroundJob::wait() {
  if (!thread_.joinable()) return;
  thread_.join();
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void AsyncCheckpointWriter::start(StagedCheckpoint s) {
  LOOM_CHECK(!staged_, "checkpoint of step ", s.step, " started while the one of step ",
             staged_ ? staged_->step : 0, " is not committed");
  staged_ = std::make_unique<StagedCheckpoint>(std::move(s));
  StagedCheckpoint* st = staged_.get();
  job_.start([st] {
    // Training goes first: the writer runs at the lowest priority (nice 19, this thread only on
    // Linux), so on a CPU backend it takes the cycles the compute threads leave.
    setpriority(PRIO_PROCESS, pid_t(syscall(SYS_gettid)), 19);
    write_staged(*st);  // file I/O only: no MPI on this thread
  });
}

std::string AsyncCheckpointWriter::commit(const Config& cfg, ParallelCtx& pc) {
  LOOM_CHECK(staged_, "commit() without a checkpoint in flight");
  std::unique_ptr<StagedCheckpoint> s = std::move(staged_);  // in flight no more, whatever happens
  collectively([&] { job_.wait(); }, pc.world.mpi());
  const std::string dir = commit_checkpoint(cfg, *s, pc, true);
  spare_ = std::move(s->buf);
  return dir;
}

}  // namespace loom
