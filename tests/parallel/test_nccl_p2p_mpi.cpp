// NCCL under mpirun, one GPU per rank (skipped with fewer GPUs than ranks): collectives, and the
// pipeline p2p pattern that deadlocks when sends block the compute stream.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cuda_device.h"
#include "layout/schedule.h"
#include "parallel/nccl_comm.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

void ok(cudaError_t e) { ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e); }

class NcclRanks : public ::testing::Test {
 protected:
  void SetUp() override {
    int gpus = 0;
    if (cuda::cuda_available() && cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
    if (gpus < test::world_size())
      GTEST_SKIP() << test::world_size() << " ranks need as many GPUs; this machine has " << gpus
                   << " (" << cuda::cuda_unavailable_reason() << ")";
    ok(cudaSetDevice(test::world_rank()));
    ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    for (float* p : bufs_) cudaFree(p);
    if (stream_) cudaStreamDestroy(stream_);
  }
  float* buf(const std::vector<float>& v) {
    float* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, v.size() * sizeof(float)), cudaSuccess);
    bufs_.push_back(p);
    put(p, v);
    return p;
  }
  void put(float* p, const std::vector<float>& v) {
    ok(cudaMemcpyAsync(p, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
  }
  std::vector<float> get(const float* p, size_t n) {
    std::vector<float> v(n);
    ok(cudaMemcpyAsync(v.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    ok(cudaStreamSynchronize(stream_));
    return v;
  }
  cudaStream_t stream_ = nullptr;
  std::vector<float*> bufs_;
};

TEST_F(NcclRanks, CollectivesOverTheWorld) {
  const int n = test::world_size(), r = test::world_rank();
  auto pc = make_parallel_ctx(Grid(n, 1, 1));
  attach_nccl(*pc, stream_);
  float* x = buf({float(r), float(10 * r)});
  pc->world.all_reduce(static_cast<void*>(x), 2, DType::F32, ReduceOp::Sum);
  const float sum = float(n * (n - 1) / 2);
  EXPECT_EQ(get(x, 2), (std::vector<float>{sum, 10 * sum}));
  // all_gatherv: rank k contributes k elements of value k (rank 0 none), packed in rank order.
  std::vector<int> counts, displs;
  int total = 0;
  for (int k = 0; k < n; ++k) {
    counts.push_back(k);
    displs.push_back(total);
    total += k;
  }
  float* mine = buf(std::vector<float>(size_t(std::max(r, 1)), float(r)));
  float* all = buf(std::vector<float>(size_t(std::max(total, 1)), -1.0f));
  pc->dp.all_gatherv(mine, all, counts, displs);
  std::vector<float> want;
  for (int k = 0; k < n; ++k) want.insert(want.end(), size_t(k), float(k));
  EXPECT_EQ(get(all, size_t(total)), want);
  // reduce to the last rank, in place; other ranks keep their data.
  float* y = buf({1.0f, float(r)});
  pc->world.reduce(y, 2, n - 1);
  EXPECT_EQ(get(y, 2), r == n - 1 ? (std::vector<float>{float(n), sum})
                                  : (std::vector<float>{1.0f, float(r)}));
  detach_nccl(*pc);
}

// Every stage sends first and receives second, both ways at once: stage i sends its activation
// to i+1 and waits for i+1's gradient while i+1 sends its gradient and waits for the activation.
// Each send buffer is overwritten right after the send (the staging copy must have the data).
TEST_F(NcclRanks, SendsNeverBlockTheComputeStream) {
  const int n = test::world_size(), r = test::world_rank();
  auto pc = make_parallel_ctx(Grid(1, n, 1));
  attach_nccl(*pc, stream_);
  const size_t len = 1 << 20;  // 4 MiB: beyond any eager buffering inside NCCL
  pc->pp.reserve_sends(len * sizeof(float), 2);
  float* out = buf(std::vector<float>(len, 0.0f));
  float* in_prev = buf(std::vector<float>(len, 0.0f));
  float* in_next = buf(std::vector<float>(len, 0.0f));
  for (int round = 0; round < 20; ++round) {
    const float v = float(1000 * round + r);
    put(out, std::vector<float>(len, v));
    if (r + 1 < n) pc->pp.isend(out, len, DType::F32, r + 1, 0, Ring::Next);
    if (r > 0) pc->pp.isend(out, len, DType::F32, r - 1, 0, Ring::Prev);
    ok(cudaMemsetAsync(out, 0, len * sizeof(float), stream_));  // overwrite at once
    if (r > 0) pc->pp.recv(in_prev, len, DType::F32, r - 1, 0, Ring::Next);
    if (r + 1 < n) pc->pp.recv(in_next, len, DType::F32, r + 1, 0, Ring::Prev);
    if (r > 0) {
      EXPECT_EQ(get(in_prev, len)[len - 1], float(1000 * round + r - 1));
    }
    if (r + 1 < n) {
      EXPECT_EQ(get(in_next, len)[0], float(1000 * round + r + 1));
    }
  }
  pc->pp.wait_sends();
  detach_nccl(*pc);
}

// The 1F1B schedule of every stage, as the executor runs it: receive, "compute" (add 1 on the
// host side of the data), send; activations forward, gradients back.
TEST_F(NcclRanks, OneFOneBScheduleRunsToTheEnd) {
  const int n = test::world_size(), r = test::world_rank(), m = 6;
  auto pc = make_parallel_ctx(Grid(1, n, 1));
  attach_nccl(*pc, stream_);
  const size_t len = 1 << 18;
  pc->pp.reserve_sends(len * sizeof(float), 2 * m);
  float* act = buf(std::vector<float>(len, 0.0f));
  float* grad = buf(std::vector<float>(len, 0.0f));
  for (const PipeAction& a : make_1f1b(n, r, m)) {
    if (a.op == PipeOp::Forward) {
      if (r > 0) {
        pc->pp.recv(act, len, DType::F32, r - 1, a.mb, Ring::Next);
        EXPECT_EQ(get(act, len)[0], float(100 * a.mb + r - 1));
      }
      put(act, std::vector<float>(len, float(100 * a.mb + r)));
      if (r + 1 < n) pc->pp.isend(act, len, DType::F32, r + 1, a.mb, Ring::Next);
    } else {
      if (r + 1 < n) {
        pc->pp.recv(grad, len, DType::F32, r + 1, a.mb, Ring::Prev);
        EXPECT_EQ(get(grad, len)[0], float(-100 * a.mb - (r + 1)));
      }
      put(grad, std::vector<float>(len, float(-100 * a.mb - r)));
      if (r > 0) pc->pp.isend(grad, len, DType::F32, r - 1, a.mb, Ring::Prev);
    }
  }
  pc->pp.wait_sends();
  detach_nccl(*pc);
}

}  // namespace
}  // namespace loom
