// The fatal-signal handler: async-signal-safe writes of a fixed prefix, the signal and a backtrace.
#include "core/crash_report.h"

#include <execinfo.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstring>

namespace loom {

namespace {

char g_crash_prefix[160] = "[loom] ";
// The alternate stack the handler runs on, so that a stack overflow still gets its report.
alignas(16) char g_alt_stack[64 * 1024];

void put(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w, n -= size_t(w);
  }
}

// "0x" and the lowercase hex digits of v, without printf (not async-signal-safe).
void put_hex(uintptr_t v) {
  char buf[2 + 2 * sizeof v + 1];
  char* p = buf + sizeof buf - 1;
  *p = '\0';
  do {
    *--p = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v != 0);
  *--p = 'x';
  *--p = '0';
  put(p);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV (invalid memory access)";
    case SIGBUS:
      return "SIGBUS (bus error: a mapped file shrank, or a misaligned access)";
    case SIGFPE:
      return "SIGFPE (arithmetic fault)";
    case SIGILL:
      return "SIGILL (illegal instruction: built for another processor?)";
    case SIGABRT:
      return "SIGABRT (abort)";
    default:
      return "a fatal signal";
  }
}

extern "C" void on_fatal_signal(int sig, siginfo_t* info, void*) {
  put(g_crash_prefix);
  put("fatal: ");
  put(signal_name(sig));
  // A fault the kernel raised (si_code > 0) has an address; a signal sent by abort() or kill
  // (SI_USER, SI_TKILL) has none: its si_addr field holds the sender's pid.
  if (info != nullptr && info->si_code > 0) {
    put(" at address ");
    put_hex(reinterpret_cast<uintptr_t>(info->si_addr));
  }
  put("; backtrace (innermost first):\n");
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
  // SA_RESETHAND restored the default action: die of the same signal (a fault repeats on
  // return; a raised signal is delivered again once the handler returns).
  ::raise(sig);
}

}  // namespace

bool install_crash_report() {
#if defined(__SANITIZE_ADDRESS__)
  return false;
#else
  // The first backtrace() loads the unwinder (it may allocate): do it now, not in the handler.
  void* warm[1];
  ::backtrace(warm, 1);
  stack_t ss{};
  ss.ss_sp = g_alt_stack;
  ss.ss_size = sizeof g_alt_stack;
  const bool alt = ::sigaltstack(&ss, nullptr) == 0;
  struct sigaction sa {};
  sa.sa_sigaction = on_fatal_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND | (alt ? SA_ONSTACK : 0);
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::sigaction(sig, &sa, nullptr);
  return true;
#endif
}

void set_crash_prefix(const std::string& prefix) {
  const size_t n = std::min(prefix.size(), sizeof g_crash_prefix - 1);
  std::memcpy(g_crash_prefix, prefix.data(), n);
  g_crash_prefix[n] = '\0';
}

}  // namespace loom
