// Comm over MPI on 4 ranks: every collective and p2p call against exact expected values.
#include <gtest/gtest.h>

#include <numeric>

#include "parallel/parallel_ctx.h"
#include "core/check.h"
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

// The non-blocking twins (parallel.overlap): several in flight at once on one communicator,
// completed out of start order, equal to the blocking results; test() polls to completion.
TEST(CommMpi, NonBlockingCollectivesAndEarlyReceive) {
  auto pc = make_parallel_ctx(Grid(4, 1, 1));  // dp4
  Comm& dp = pc->dp;
  const int r = dp.rank();
  std::vector<float> a(1000, float(r + 1)), b(3, float(10 * r)), red(5, float(r));
  CommRequest ra = dp.start_all_reduce(a.data(), a.size(), ReduceOp::Sum);
  CommRequest rb = dp.start_all_reduce(b.data(), b.size(), ReduceOp::Max);
  CommRequest rr = dp.start_reduce(red.data(), red.size(), 2);
  // all_gatherv: rank j contributes j elements of value j, packed in rank order.
  const std::vector<float> mine(static_cast<size_t>(r), float(r));
  std::vector<float> all(6, -1.0f);
  CommRequest rg = dp.start_all_gatherv(mine.data(), all.data(), {0, 1, 2, 3}, {0, 0, 1, 3});
  EXPECT_TRUE(ra.active());
  dp.wait(rg);
  dp.wait(rr);
  while (!dp.test(rb)) {
  }
  dp.wait(ra);
  EXPECT_FALSE(ra.active());
  EXPECT_EQ(a[0], 10.0f);
  EXPECT_EQ(a[999], 10.0f);
  EXPECT_EQ(b[2], 30.0f);
  if (r == 2) {
    EXPECT_EQ(red[4], 6.0f);
  }
  EXPECT_EQ(all, (std::vector<float>{1, 2, 2, 3, 3, 3}));

  // A receive posted before its sender sends, completed by wait; a wrong size is an error.
  std::vector<float> in(4, 0.0f), out(4, float(r));
  const int from = (r + 3) % 4, to = (r + 1) % 4;
  CommRequest rin = dp.start_recv(in.data(), in.size(), DType::F32, from, 5, Ring::Next);
  dp.barrier();
  MPI_Request s = dp.isend(out.data(), out.size(), to, 5);
  dp.wait(rin);
  dp.wait(&s);
  EXPECT_EQ(in[3], float(from));
  CommRequest bad = dp.start_recv(in.data(), 2, DType::F32, from, 6, Ring::Next);
  std::vector<float> one(1, 0.0f);
  s = dp.isend(one.data(), 1, to, 6);
  EXPECT_THROW(dp.wait(bad), InternalError);
  dp.wait(&s);
}

}  // namespace
}  // namespace loom
