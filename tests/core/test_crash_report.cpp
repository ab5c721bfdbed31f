// The fatal-signal report: a child process crashes three ways (null dereference, stack
// overflow, abort); its stderr must name the rank prefix, the signal and carry a backtrace, and
// the child must still die of that signal (so mpirun/srun report it as a crash).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <string>

#include "core/crash_report.h"

namespace loom {
namespace {

struct Crash {
  std::string err;  // what the child wrote to stderr
  int signal = 0;   // the signal it died of (0: it exited)
};

// Runs crash() in a child with the report installed and its stderr on a pipe.
Crash run_child(const std::function<void()>& crash) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], STDERR_FILENO);
    set_crash_prefix("[loom r5 dp1 pp0 tp1] ");
    if (!install_crash_report()) _exit(3);
    crash();
    _exit(4);  // not reached
  }
  close(fds[1]);
  Crash c;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) c.err.append(buf, size_t(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) c.signal = WTERMSIG(status);
  return c;
}

int count_lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }

// Recursion past any stack (the limit is only read at run time, so it is neither a loop nor,
// to the compiler, infinite).
volatile int g_depth_limit = 1 << 30;
int deep(volatile int* p, int n) {
  volatile char pad[1024];
  pad[0] = char(n);
  if (n >= g_depth_limit) return pad[0];
  return deep(p, n + 1) + pad[0] + *p;
}

class CrashReport : public ::testing::Test {
 protected:
  void SetUp() override {
#if defined(__SANITIZE_ADDRESS__)
    GTEST_SKIP() << "AddressSanitizer builds keep the sanitizer's own report";
#endif
  }
};

TEST_F(CrashReport, NullDereferenceNamesRankSignalAddressAndBacktrace) {
  Crash c = run_child([] {
    volatile int* p = nullptr;
    *p = 1;
  });
  EXPECT_EQ(c.signal, SIGSEGV) << c.err;
  EXPECT_NE(c.err.find("[loom r5 dp1 pp0 tp1] fatal: SIGSEGV"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("at address 0x0;"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("backtrace (innermost first):\n"), std::string::npos) << c.err;
  EXPECT_GE(count_lines(c.err), 4) << "a header and at least 3 frames:\n" << c.err;
}

TEST_F(CrashReport, StackOverflowIsReportedFromTheAlternateStack) {
  Crash c = run_child([] {
    volatile int zero = 0;
    std::exit(deep(&zero, 0));
  });
  EXPECT_EQ(c.signal, SIGSEGV) << c.err;
  EXPECT_NE(c.err.find("[loom r5 dp1 pp0 tp1] fatal: SIGSEGV"), std::string::npos) << c.err;
  EXPECT_GE(count_lines(c.err), 4) << c.err;
}

TEST_F(CrashReport, AbortIsReportedWithoutAnAddress) {
  Crash c = run_child([] { std::abort(); });
  EXPECT_EQ(c.signal, SIGABRT) << c.err;
  EXPECT_NE(c.err.find("[loom r5 dp1 pp0 tp1] fatal: SIGABRT (abort); backtrace"),
            std::string::npos)
      << c.err;
}

}  // namespace
}  // namespace loom
