// Comm over MPI on 4 ranks: every collective and p2p call against exact expected values.
#include <gtest/gtest.h>

#include <numeric>

#include "parallel/parallel_ctx.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

TEST(CommMpi, CollectivesOnEveryAxisOfA2x2Grid) {
  ASSERT_EQ(test::world_size(), 4);
  auto pc = make_parallel_ctx(Grid(2, 1, 2));  // dp2 x tp2
  const int r = pc->rank;
  // all_reduce sum/max over tp: partners are r^1.
  std::vector<float> x = {float(r), float(10 * r)};
  pc->tp.all_reduce(x.data(), 2, ReduceOp::Sum);
  int partner = r ^ 1;
  EXPECT_EQ(x[0], float(r + partner));
  EXPECT_EQ(x[1], float(10 * (r + partner)));
  double m = r;
  pc->dp.all_reduce(&m, 1, ReduceOp::Max);
  EXPECT_EQ(m, double(std::max(r, r ^ 2)));  // dp partners are r^2
  // world sum of 0..3.
  float w = float(r);
  pc->world.all_reduce(&w, 1, ReduceOp::Sum);
  EXPECT_EQ(w, 6.0f);

  // reduce_scatter over the world: rank j sends value (j+1)*(k+1) for chunk k of 3 elements.
  std::vector<float> send(12), recv(3);
  for (int k = 0; k < 4; ++k)
    for (int e = 0; e < 3; ++e) send[size_t(k * 3 + e)] = float((r + 1) * (k + 1) + e);
  pc->world.reduce_scatter(send.data(), recv.data(), 3);
  for (int e = 0; e < 3; ++e) EXPECT_EQ(recv[size_t(e)], float(10 * (r + 1) + 4 * e));

  // all_gather, out of place and in place.
  std::vector<float> mine = {float(r), float(-r)}, all(8);
  pc->world.all_gather(mine.data(), all.data(), 2);
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(all[size_t(2 * j)], float(j));
    EXPECT_EQ(all[size_t(2 * j + 1)], float(-j));
  }
  std::vector<float> inplace(8, 0.0f);
  inplace[size_t(2 * r)] = float(r + 100);
  inplace[size_t(2 * r + 1)] = 1.0f;
  pc->world.all_gather(inplace.data() + 2 * r, inplace.data(), 2);
  for (int j = 0; j < 4; ++j) EXPECT_EQ(inplace[size_t(2 * j)], float(j + 100));

  // broadcast from dp rank 1.
  int64_t v = pc->coord.dp == 1 ? 4242 + pc->coord.tp : -1;
  pc->dp.broadcast(&v, sizeof v, 1);
  EXPECT_EQ(v, 4242 + pc->coord.tp);
  pc->world.barrier();
  EXPECT_GT(pc->world.bytes_sent(), 0u);
}

TEST(CommMpi, PointToPointRingDoesNotDeadlock) {
  auto pc = make_parallel_ctx(Grid(1, 4, 1));  // pp4: a ring over the pipeline axis
  const int r = pc->pp.rank(), n = pc->pp.size();
  // Every rank sends first (non-blocking), then receives: a blocking-send ring would deadlock
  // for large messages.
  std::vector<float> out(1 << 18), in(1 << 18);
  std::iota(out.begin(), out.end(), float(r));
  MPI_Request req = pc->pp.isend(out.data(), out.size(), (r + 1) % n, 7);
  pc->pp.recv(in.data(), in.size(), (r + n - 1) % n, 7);
  pc->pp.wait(&req);
  int from = (r + n - 1) % n;
  EXPECT_EQ(in[0], float(from));
  EXPECT_EQ(in[1000], float(from + 1000));
}

TEST(CommMpi, ReceivingTheWrongSizeIsAnError) {
  auto pc = make_parallel_ctx(Grid(1, 4, 1));
  const int r = pc->pp.rank();
  if (r == 0) {
    std::vector<float> out(8, 1.0f);
    MPI_Request req = pc->pp.isend(out.data(), 8, 1, 3);
    pc->pp.wait(&req);
  } else if (r == 1) {
    std::vector<float> in(16);
    EXPECT_THROW(pc->pp.recv(in.data(), 16, 0, 3), InternalError);
  }
}

}  // namespace
}  // namespace loom
