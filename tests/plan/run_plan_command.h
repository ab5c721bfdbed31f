// Runs `loom plan` in-process (cli::cmd_plan) with stdout captured, for the plan tests.
#pragma once
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "cli/plan_command.h"
#include "core/check.h"
#include "parallel/collective.h"
#include "tests/support/mpi_test_env.h"

namespace loom::test {

// Runs cmd_plan with stdout captured; returns the output, the exit code in *code and a thrown
// UserError's message in *error.
inline std::string run_plan_command(const cli::Args& a, int* code, std::string* error) {
  test::ensure_mpi();
  std::fflush(stdout);
  char path[] = "/tmp/loom_plan_outXXXXXX";
  const int fd = mkstemp(path);
  const int saved = dup(1);
  dup2(fd, 1);
  *code = -1;
  error->clear();
  try {
    *code = cli::cmd_plan(a);
  } catch (const UserError& e) {
    *error = e.what();
  } catch (const ReportedError& e) {
    *code = e.code;
  }
  std::fflush(stdout);
  dup2(saved, 1);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path);
  return out;
}

}  // namespace loom::test
