// HostStagedComm under mpirun -np 4: every collective (the all-to-all too) on fp32, fp64, int32,
// bf16 and fp16 buffers, and the pipeline p2p on rings of 2, 3 and 4 (both ways, the wrap, buffers
// reused at once), on the cpu backend and, where the cuda backend runs (a GPU or the emulation), on
// it.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/buffer.h"
#include "core/check.h"
#include "kernels/cuda_device.h"
#include "parallel/host_staged_comm.h"
#include "parallel/p2p_route.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

std::vector<std::string> devices() {
  std::vector<std::string> d{"cpu"};
  if (cuda::cuda_available()) d.push_back("cuda");
  return d;
}

// A backend and its buffers; put/get copy host vectors in and out.
struct Dev {
  std::unique_ptr<Backend> be;
  std::vector<Buffer> bufs;
  explicit Dev(const std::string& device) : be(make_backend(device, "fp32", 0)) {}
  template <typename T>
  void* buf(const std::vector<T>& v) {
    bufs.emplace_back(std::max<size_t>(v.size() * sizeof(T), 1), be->device());
    put(bufs.back().data(), v);
    return bufs.back().data();
  }
  template <typename T>
  void put(void* p, const std::vector<T>& v) {
    be->from_host(p, v.data(), v.size() * sizeof(T));
  }
  template <typename T>
  std::vector<T> get(const void* p, size_t n) {
    std::vector<T> v(n);
    be->to_host(v.data(), p, n * sizeof(T));
    return v;
  }
};

uint16_t bf16(float f) { return cuda::bf16_from_float(f).bits; }
uint16_t f16(float f) { return cuda::f16_from_float(f).bits; }

TEST(HostStagedComm, Collectives) {
  const int n = test::world_size(), r = test::world_rank();
  ASSERT_EQ(n, 4);
  for (const std::string& device : devices()) {
    SCOPED_TRACE(device);
    Dev d(device);
    HostStagedComm c(MPI_COMM_WORLD, "world", *d.be);
    // all_reduce sum and max on fp32, fp64, int32.
    void* x = d.buf(std::vector<float>{float(r), float(10 * r)});
    c.all_reduce(x, 2, DType::F32, ReduceOp::Sum);
    EXPECT_EQ(d.get<float>(x, 2), (std::vector<float>{6, 60}));
    void* y = d.buf(std::vector<double>{double(r) * 0.5});
    c.all_reduce(y, 1, DType::F64, ReduceOp::Max);
    EXPECT_EQ(d.get<double>(y, 1)[0], 1.5);
    void* k = d.buf(std::vector<int32_t>{r + 1});
    c.all_reduce(k, 1, DType::I32, ReduceOp::Sum);
    EXPECT_EQ(d.get<int32_t>(k, 1)[0], 10);
    // bf16/fp16: exact fp32 sums of 1 + r/128 (4.046875), rounded once to the type: bf16 has
    // 8 significant bits, so 4.046875 lies halfway between 4.03125 and 4.0625 and rounds to the
    // even 4.0625; fp16 (11 bits) holds it exactly.
    void* hb = d.buf(std::vector<uint16_t>{bf16(1.0f + float(r) / 128), bf16(-float(r))});
    c.all_reduce(hb, 2, DType::BF16, ReduceOp::Sum);
    EXPECT_EQ(d.get<uint16_t>(hb, 2), (std::vector<uint16_t>{bf16(4.0625f), bf16(-6.0f)}));
    void* hh = d.buf(std::vector<uint16_t>{f16(1.0f + float(r) / 128)});
    c.all_reduce(hh, 1, DType::F16, ReduceOp::Sum);
    EXPECT_EQ(d.get<uint16_t>(hh, 1)[0], f16(4.046875f));
    void* hm = d.buf(std::vector<uint16_t>{bf16(float(r) - 2.5f)});
    c.all_reduce(hm, 1, DType::BF16, ReduceOp::Max);
    EXPECT_EQ(d.get<uint16_t>(hm, 1)[0], bf16(0.5f));
    // reduce to rank 2 in place; the others keep their data.
    void* z = d.buf(std::vector<float>{1.0f, float(r)});
    c.reduce(z, 2, DType::F32, 2);
    EXPECT_EQ(d.get<float>(z, 2),
              r == 2 ? (std::vector<float>{4, 6}) : (std::vector<float>{1.0f, float(r)}));
    // reduce_scatter: rank r gets the sum of everyone's slice r (value 100*slice + rank).
    std::vector<float> all(8);
    for (int s = 0; s < 4; ++s) all[size_t(2 * s)] = all[size_t(2 * s + 1)] = float(100 * s + r);
    void* rs_in = d.buf(all);
    void* rs_out = d.buf(std::vector<float>(2, -1.0f));
    c.reduce_scatter(rs_in, rs_out, 2, DType::F32);
    EXPECT_EQ(d.get<float>(rs_out, 2), std::vector<float>(2, float(400 * r + 6)));
    std::vector<uint16_t> all16(4);
    for (int s = 0; s < 4; ++s) all16[size_t(s)] = bf16(float(s + r));
    void* rb_in = d.buf(all16);
    void* rb_out = d.buf(std::vector<uint16_t>(1, 0));
    c.reduce_scatter(rb_in, rb_out, 1, DType::BF16);
    EXPECT_EQ(d.get<uint16_t>(rb_out, 1)[0], bf16(float(4 * r + 6)));
    // all_gather, in place (send is recv's own slice) as the model's gathers are.
    void* g = d.buf(std::vector<float>(8, -1.0f));
    d.put(static_cast<float*>(g) + 2 * r, std::vector<float>{float(r), float(r + 10)});
    c.all_gather(static_cast<float*>(g) + 2 * r, g, 2, DType::F32);
    EXPECT_EQ(d.get<float>(g, 8), (std::vector<float>{0, 10, 1, 11, 2, 12, 3, 13}));
    // all_gatherv: rank k contributes k elements of value k at displs with a gap at 0, which
    // stays as it was.
    const std::vector<int> counts{0, 1, 2, 3}, displs{1, 1, 2, 4};
    void* gv = d.buf(std::vector<float>(7, -1.0f));
    void* mine = d.buf(std::vector<float>(size_t(std::max(r, 1)), float(r)));
    c.all_gatherv(mine, gv, counts, displs, DType::F32);
    EXPECT_EQ(d.get<float>(gv, 7), (std::vector<float>{-1, 1, 2, 2, 3, 3, 3}));
    // all_to_allv: rank r sends q + 1 values 100 r + q to rank q (packed in q order); rank q
    // receives them from every r in r order, each at a slot one element after the last, so
    // gaps stay as they were.
    std::vector<int> sc(4), sd(4), rc(4), rd(4);
    std::vector<float> out;
    for (int q = 0, at = 0; q < 4; ++q) {
      sc[size_t(q)] = q + 1, sd[size_t(q)] = at, at += q + 1;
      out.insert(out.end(), size_t(q + 1), float(100 * r + q));
    }
    for (int src = 0; src < 4; ++src) rc[size_t(src)] = r + 1, rd[size_t(src)] = src * (r + 2);
    void* a2a_in = d.buf(out);
    void* a2a_out = d.buf(std::vector<float>(size_t(4 * (r + 2)), -1.0f));
    c.all_to_allv(a2a_in, sc, sd, a2a_out, rc, rd, DType::F32);
    std::vector<float> want;
    for (int src = 0; src < 4; ++src) {
      want.insert(want.end(), size_t(r + 1), float(100 * src + r));
      want.push_back(-1.0f);
    }
    EXPECT_EQ(d.get<float>(a2a_out, want.size()), want);
    // broadcast from rank 3.
    void* b = d.buf(std::vector<int32_t>{r, 7 * r});
    c.broadcast(b, 2 * sizeof(int32_t), 3);
    EXPECT_EQ(d.get<int32_t>(b, 2), (std::vector<int32_t>{3, 21}));
  }
}

// Rings of 2, 3 and 4 (the first ranks of the world): each rank sends 3 messages each way and
// overwrites the buffer right after each send, then receives the Prev messages before the Next
// ones (the reverse of the send order): one FIFO per way, so each arrives where it belongs.
TEST(HostStagedComm, PointToPointBothWaysOnRings) {
  const int r = test::world_rank();
  for (const std::string& device : devices())
    for (int n : {2, 3, 4}) {
      SCOPED_TRACE(device + ", ring of " + std::to_string(n));
      MPI_Comm sub;
      MPI_Comm_split(MPI_COMM_WORLD, r < n ? 0 : MPI_UNDEFINED, r, &sub);
      if (r >= n) continue;
      {
        Dev d(device);
        HostStagedComm c(sub, "pp", *d.be);
        const size_t len = 3000;  // 12 kB: beyond MPI's eager limit on shared memory
        c.reserve_sends(len * sizeof(float), 3);  // the 3 sends each way in flight
        void* out = d.buf(std::vector<float>(len, 0.0f));
        for (int m = 0; m < 3; ++m)
          for (Ring way : {Ring::Next, Ring::Prev}) {
            const float v = float(1000 * m + 10 * r + (way == Ring::Next ? 1 : 2));
            d.put(out, std::vector<float>(len, v));
            c.send(out, len, DType::F32, ring_peer(r, way, n), way);
            d.put(out, std::vector<float>(len, -5.0f));  // overwritten at once
          }
        void* in = d.buf(std::vector<float>(len, 0.0f));
        for (Ring way : {Ring::Prev, Ring::Next}) {
          const int from = ring_peer(r, way == Ring::Next ? Ring::Prev : Ring::Next, n);
          for (int m = 0; m < 3; ++m) {
            c.recv(in, len, DType::F32, from, way);
            const std::vector<float> got = d.get<float>(in, len);
            const float want = float(1000 * m + 10 * from + (way == Ring::Next ? 1 : 2));
            EXPECT_EQ(got[0], want);
            EXPECT_EQ(got[len - 1], want);
          }
        }
        c.complete();
      }
      MPI_Comm_free(&sub);
    }
}

// Misuse is one clear error: a peer that is not the neighbour that way, a send with no staging
// reserved, a receive of the wrong size.
TEST(HostStagedComm, MisuseIsAnError) {
  const int r = test::world_rank();
  Dev d("cpu");
  HostStagedComm c(MPI_COMM_WORLD, "pp", *d.be);
  void* x = d.buf(std::vector<float>(4, 1.0f));
  EXPECT_THROW(c.send(x, 4, DType::F32, (r + 2) % 4, Ring::Next), InternalError);
  EXPECT_THROW(c.send(x, 4, DType::F32, (r + 1) % 4, Ring::Next), InternalError);  // no staging
  c.reserve_sends(4 * sizeof(float), 1);
  c.send(x, 2, DType::F32, (r + 1) % 4, Ring::Next);
  EXPECT_THROW(c.recv(x, 4, DType::F32, (r + 3) % 4, Ring::Next), InternalError);  // 2 arrive
  c.complete();
}

}  // namespace
}  // namespace loom
