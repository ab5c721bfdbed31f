// NcclComm in one process (size-1 communicators, the "one GPU" path) and through Comm's device
// dispatch after attach_nccl; skipped without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cuda_device.h"
#include "parallel/nccl_comm.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

void ok(cudaError_t e) { ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e); }

class NcclOne : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::cuda_available()) GTEST_SKIP() << cuda::cuda_unavailable_reason();
    test::ensure_mpi();
    ok(cudaSetDevice(0));
    ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ok(cudaMalloc(&dev_, 64 * sizeof(float)));
  }
  void TearDown() override {
    if (dev_) cudaFree(dev_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  void put(const std::vector<float>& v, size_t at = 0) {
    ok(cudaMemcpyAsync(dev_ + at, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice,
                       stream_));
  }
  std::vector<float> get(size_t n, size_t at = 0) {
    std::vector<float> v(n);
    ok(cudaMemcpyAsync(v.data(), dev_ + at, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    ok(cudaStreamSynchronize(stream_));
    return v;
  }
  cudaStream_t stream_ = nullptr;
  float* dev_ = nullptr;
};

TEST_F(NcclOne, SizeOneCollectivesKeepOrCopyTheData) {
  NcclComm c(MPI_COMM_SELF, "self", stream_, false);
  EXPECT_EQ(c.size(), 1);
  put({1, 2, 3, 4});
  c.all_reduce(dev_, 4, DType::F32, ReduceOp::Sum);
  c.all_reduce(dev_, 4, DType::F32, ReduceOp::Max);
  c.reduce(dev_, 4, DType::F32, 0);
  c.broadcast(dev_, 4 * sizeof(float), 0);
  EXPECT_EQ(get(4), (std::vector<float>{1, 2, 3, 4}));
  c.all_gather(dev_, dev_ + 8, 4, DType::F32);  // out of place: a copy
  EXPECT_EQ(get(4, 8), (std::vector<float>{1, 2, 3, 4}));
  c.reduce_scatter(dev_, dev_ + 16, 4, DType::F32);
  EXPECT_EQ(get(4, 16), (std::vector<float>{1, 2, 3, 4}));
  c.all_gatherv(dev_, dev_ + 24, {3}, {2}, DType::F32);  // 3 elements at offset 2
  EXPECT_EQ(get(3, 26), (std::vector<float>{1, 2, 3}));
  c.complete();  // no sends: returns at once
}

TEST_F(NcclOne, CommDispatchesDevicePointersToNccl) {
  auto pc = make_parallel_ctx(Grid(1, 1, 1), MPI_COMM_SELF);
  attach_nccl(*pc, stream_);
  ASSERT_NE(pc->tp.device_comm(), nullptr);
  ASSERT_NE(pc->embed.device_comm(), nullptr);
  put({5, 6});
  pc->tp.all_reduce(static_cast<void*>(dev_), 2, DType::F32, ReduceOp::Sum);
  pc->dp.all_gatherv(dev_, dev_ + 4, {2}, {0});
  EXPECT_EQ(get(2, 4), (std::vector<float>{5, 6}));
  EXPECT_EQ(pc->tp.bytes_sent(), 2 * sizeof(float));
  pc->pp.wait_sends();
  detach_nccl(*pc);
  EXPECT_EQ(pc->tp.device_comm(), nullptr);
}

TEST(NcclIds, VisibleGpuIdsAreUuidsOrEmptyWithoutAGpu) {
  const std::vector<std::string> ids = visible_gpu_ids();
  if (!cuda::cuda_available()) return;  // no driver or no device: may be empty
  ASSERT_FALSE(ids.empty());
  for (const auto& id : ids) EXPECT_EQ(id.size(), 4u + 36u) << id;  // GPU-8-4-4-4-12
}

}  // namespace
}  // namespace loom
