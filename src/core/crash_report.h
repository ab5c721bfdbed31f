// Fatal-signal report: a rank that crashes names itself (rank and grid coordinates), the signal
// and the faulting address, and prints a backtrace to stderr before it dies of that signal.
#pragma once
#include <string>

namespace loom {

// Installs the report for SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT, on an alternate stack
// (a stack overflow is reported too). Call after MPI_Init, whose own handlers it replaces.
// Returns false, installing nothing, in a build with AddressSanitizer (its report is better).
bool install_crash_report();

// The line start of the report ("[loom r3 dp1 pp0 tp1] "); set_log_prefix keeps it current.
void set_crash_prefix(const std::string& prefix);

}  // namespace loom
