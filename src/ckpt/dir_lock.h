// An exclusive lock on a checkpoint directory for the life of a run: flock on <dir>/loom.lock,
// so a second run pointed at the same directory stops with a clear error instead of writing
// over the first one's checkpoints. The kernel drops the lock when the holder dies.
#pragma once
#include <string>

namespace loom {

class DirLock {
 public:
  DirLock() = default;
  // Creates `dir` if needed and takes the lock, waiting up to `wait_s` seconds for a holder
  // that is exiting (a job just killed). UserError naming the directory and the holder (pid,
  // host, start time) when another process keeps it. A filesystem without flock support is
  // warned about and not locked.
  explicit DirLock(const std::string& dir, double wait_s = 5.0);
  ~DirLock();
  DirLock(DirLock&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }
  DirLock& operator=(DirLock&& o) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  bool held() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }  // <dir>/loom.lock

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace loom
