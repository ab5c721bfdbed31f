// bench_overlap_probe: how much of a non-blocking DP collective hides behind compute, with and
// without MPI_Test polls.
#include <cblas.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/timer.h"
#include "parallel/comm.h"

namespace {

const char* kUsage =
    "usage: mpirun -np N bench_overlap_probe [--op allreduce|reduce|allgather] [--mb MiB]\n"
    "                                        [--chunks K] [--reps R]\n"
    "  One DP-style collective of MiB (default 16; all-gather: MiB in total) per round "
    "(all-reduce\n"
    "  by default; reduce: to rank 0, ZeRO 2; all-gather: all_gatherv, ZeRO 3), against compute\n"
    "  (square sgemm, 1 thread) of about the blocking collective's own duration split into K\n"
    "  pieces (default 16). Rounds, interleaved R times (default 7), median ms on rank 0:\n"
    "    comm      the blocking collective alone\n"
    "    nb        the non-blocking collective alone (start, wait)\n"
    "    blocking  compute, then the blocking collective (parallel.overlap: false)\n"
    "    nb-wait   start, compute, wait: MPI moves data only inside MPI calls\n"
    "    nb-poll   start, compute with an MPI_Test between pieces, wait\n"
    "  hidden = share of `comm` that disappeared from the round: (blocking - x) / comm.\n";

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Gemm {
  int n = 256;
  std::vector<float> a, b, c;
  Gemm() : a(size_t(n) * n, 0.5f), b(a), c(a) {}
  void run() {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
  }
};

int run(int argc, char** argv) {
  using namespace loom;
  std::string op = "allreduce";
  double mib = 16;
  int chunks = 16, reps = 7;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") return std::fputs(kUsage, stdout), 0;
    if (i + 1 >= argc)
      return std::fprintf(stderr, "bench_overlap_probe: %s needs a value\n", argv[i]), 2;
    if (a == "--op")
      op = argv[++i];
    else if (a == "--mb")
      mib = std::atof(argv[++i]);
    else if (a == "--chunks")
      chunks = std::atoi(argv[++i]);
    else if (a == "--reps")
      reps = std::atoi(argv[++i]);
    else
      return std::fprintf(stderr, "bench_overlap_probe: unknown option '%s'\n", a.c_str()), 2;
  }
  Comm comm(MPI_COMM_WORLD, "world");
  const size_t n = size_t(mib * (1 << 20) / sizeof(float));
  std::vector<float> x(n, 1.0f), all(n, 0.0f);
  Gemm g;
  const int P = comm.size();
  std::vector<int> counts(static_cast<size_t>(P), int(n / size_t(P)));
  std::vector<int> displs(static_cast<size_t>(P), 0);
  for (int d = 0; d < P; ++d) displs[size_t(d)] = d * counts[0];
  auto start = [&] {
    if (op == "reduce") return comm.start_reduce(x.data(), n, 0);
    if (op == "allgather") return comm.start_all_gatherv(x.data(), all.data(), counts, displs);
    return comm.start_all_reduce(x.data(), n, ReduceOp::Sum);
  };
  if (op != "allreduce" && op != "reduce" && op != "allgather")
    return std::fprintf(stderr, "bench_overlap_probe: unknown --op '%s'\n", op.c_str()), 2;

  // Calibrate: GEMMs per piece so that the compute lasts about one blocking collective.
  auto allreduce = [&] {
    if (op == "reduce")
      comm.reduce(x.data(), n, 0);
    else if (op == "allgather")
      comm.all_gatherv(x.data(), all.data(), counts, displs);
    else
      comm.all_reduce(x.data(), n, ReduceOp::Sum);
  };
  allreduce();
  Stopwatch sw;
  allreduce();
  double t_comm = sw.ms();
  sw = Stopwatch();
  for (int i = 0; i < 8; ++i) g.run();
  double t_gemm = sw.ms() / 8;
  double t[2] = {t_comm, t_gemm};
  comm.all_reduce(t, 2, ReduceOp::Max);
  const int per_piece = std::max(1, int(t[0] / t[1] / chunks + 0.5));

  auto compute = [&](CommRequest* poll) {
    for (int k = 0; k < chunks; ++k) {
      for (int j = 0; j < per_piece; ++j) g.run();
      if (poll) comm.test(*poll);
    }
  };
  std::vector<double> comm_ms, nb_ms, blocking, nb_wait, nb_poll, compute_ms;
  for (int r = 0; r < reps; ++r) {
    comm.barrier();
    sw = Stopwatch();
    allreduce();
    comm_ms.push_back(sw.ms());
    comm.barrier();
    sw = Stopwatch();
    CommRequest alone = start();
    comm.wait(alone);
    nb_ms.push_back(sw.ms());
    comm.barrier();
    sw = Stopwatch();
    compute(nullptr);
    compute_ms.push_back(sw.ms());
    allreduce();
    blocking.push_back(sw.ms());
    comm.barrier();
    sw = Stopwatch();
    CommRequest q = start();
    compute(nullptr);
    comm.wait(q);
    nb_wait.push_back(sw.ms());
    comm.barrier();
    sw = Stopwatch();
    q = start();
    compute(&q);
    comm.wait(q);
    nb_poll.push_back(sw.ms());
  }
  if (comm.rank() == 0) {
    const double c = median(comm_ms), b = median(blocking);
    std::printf(
        "op=%s ranks=%d mib=%.1f chunks=%d compute_ms=%.1f comm_ms=%.1f blocking_ms=%.1f "
        "nb_ms=%.1f nb_wait_ms=%.1f nb_poll_ms=%.1f hidden_wait=%.2f hidden_poll=%.2f\n",
        op.c_str(), comm.size(), mib, chunks, median(compute_ms), c, b, median(nb_ms),
        median(nb_wait), median(nb_poll), (b - median(nb_wait)) / c, (b - median(nb_poll)) / c);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 2;
  try {
    rc = run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_overlap_probe: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return rc;
}
