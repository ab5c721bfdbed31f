// Page-locked host staging for a step's inputs: the host refills it once the last copy ran.
#include "backend/cuda_staging.h"

#include <cuda_runtime_api.h>

#include "core/check.h"
#include "kernels/cuda_check.h"

namespace loom {
namespace {

// Page-locked host memory for a step's inputs; the event marks the end of the last upload's copy.
class PinnedStaging final : public HostStaging {
 public:
  PinnedStaging(size_t bytes, cudaStream_t s) : bytes_(bytes), stream_(s) {
    LOOM_CUDA_CHECK(cudaMallocHost(&data_, bytes ? bytes : 1));
    LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
  }
  ~PinnedStaging() override {
    if (copied_) {
      cudaEventSynchronize(copied_);  // no copy may still read the memory freed below
      cudaEventDestroy(copied_);
    }
    cudaFreeHost(data_);
  }
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;
  void* data() override { return data_; }
  void wait_writable() override {
    if (pending_) LOOM_CUDA_CHECK(cudaEventSynchronize(copied_));
    pending_ = false;
  }
  void upload(void* dst, size_t bytes) override {
    LOOM_CHECK(bytes <= bytes_, "upload of ", bytes, " bytes from ", bytes_);
    if (!bytes) return;
    LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, data_, bytes, cudaMemcpyHostToDevice, stream_));
    LOOM_CUDA_CHECK(cudaEventRecord(copied_, stream_));
    pending_ = true;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_;
  cudaStream_t stream_;
  cudaEvent_t copied_ = nullptr;
  bool pending_ = false;
};

}  // namespace

std::unique_ptr<HostStaging> make_pinned_staging(size_t bytes, void* stream) {
  return std::make_unique<PinnedStaging>(bytes, static_cast<cudaStream_t>(stream));
}

}  // namespace loom
