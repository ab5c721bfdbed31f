// The checkpoint directory lock: a second holder is refused with the first one's pid, and a
// holder killed by SIGKILL leaves no stale lock.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "ckpt/dir_lock.h"
#include "core/check.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("loom_lock_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d.string();
}

std::string refusal(const std::string& dir, double wait_s) {
  try {
    DirLock second(dir, wait_s);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(DirLock, SecondHolderIsRefusedNamingTheFirst) {
  const std::string dir = fresh_dir("second");
  {
    DirLock first(dir);  // creates the directory
    ASSERT_TRUE(first.held());
    const auto t0 = std::chrono::steady_clock::now();
    const std::string msg = refusal(dir, 0.3);
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(msg.find("checkpoint.dir '" + dir + "' is in use by another run (pid " +
                       std::to_string(::getpid()) + " on "),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find(dir + "/loom.lock"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_GE(waited, 0.3);  // it waited for an exiting holder first
  }
  DirLock again(dir, 0);  // released with the first holder
  EXPECT_TRUE(again.held());
  fs::remove_all(dir);
}

TEST(DirLock, KilledHolderLeavesNoStaleLock) {
  const std::string dir = fresh_dir("killed");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // holds the lock until killed
    DirLock held(dir);
    char c = 1;
    if (::write(ready[1], &c, 1) != 1) _exit(1);
    for (;;) ::pause();
  }
  char c = 0;
  EXPECT_EQ(::read(ready[0], &c, 1), 1);  // the child holds the lock (kill it in any case)
  EXPECT_NE(refusal(dir, 0).find("pid " + std::to_string(child)), std::string::npos);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_TRUE(fs::exists(dir + "/loom.lock"));  // the file stays; the lock does not
  DirLock after(dir, 0);
  EXPECT_TRUE(after.held());
  ::close(ready[0]);
  ::close(ready[1]);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace loom
