// flock-based exclusive lock of a checkpoint directory, with the holder written into the file.
#include "ckpt/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <thread>

#include "core/check.h"
#include "core/log.h"

namespace loom {

namespace {
std::string holder_text(int fd) {
  char buf[256] = {0};
  ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string s(buf, n > 0 ? size_t(n) : 0);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  for (char& c : s)
    if (c == '\n') c = ' ';
  return s.empty() ? "another process" : s;
}
}  // namespace

DirLock::DirLock(const std::string& dir, double wait_s) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw UserError(str("checkpoint.dir '", dir, "' cannot be created (", ec.message(),
                        "); check the path and permissions"));
  path_ = (std::filesystem::path(dir) / "loom.lock").string();
  int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    throw UserError(str("cannot open the checkpoint lock '", path_, "': ", std::strerror(errno),
                        " (check that checkpoint.dir is writable)"));
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    if (e == EINTR) continue;
    if (e != EWOULDBLOCK) {  // ENOLCK, EOPNOTSUPP, ...: a filesystem without flock
      ::close(fd);
      warn("checkpoint.dir '", dir, "' cannot be locked (", std::strerror(e),
           "): a second run pointed at it would not be detected");
      return;
    }
    if (std::chrono::steady_clock::now() >= until) {
      const std::string who = holder_text(fd);
      ::close(fd);
      throw UserError(str("checkpoint.dir '", dir, "' is in use by another run (", who,
                          "; lock file ", path_,
                          "): two runs writing one checkpoint directory would corrupt each "
                          "other; stop that run or set checkpoint.dir to another directory"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  char when[64] = {0};
  const std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  const std::string me = str("pid ", ::getpid(), " on ", host, " since ", when, "\n");
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != ssize_t(me.size()))
    warn("cannot write the holder into ", path_, ": ", std::strerror(errno));
  fd_ = fd;
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the lock
}

DirLock& DirLock::operator=(DirLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

}  // namespace loom
