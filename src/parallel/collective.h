// Collective error agreement: work that may fail on some ranks only ends every rank cleanly.
#pragma once
#include <mpi.h>

#include <functional>

namespace loom {

// Thrown after an error was already printed and every rank agreed to stop: exit non-zero.
struct ReportedError {
  int code = 1;
};

// Runs f on every rank of `comm`, then agrees: if any rank threw, the lowest such rank prints
// "loom: error: <message>" and every rank throws ReportedError. Use for work that may fail on
// some ranks only (files), so no rank hangs in a later collective.
void collectively(const std::function<void()>& f, MPI_Comm comm = MPI_COMM_WORLD);

}  // namespace loom
