// Work sizes of each device's kernels, for the memory layout of a step.
#include "backend/device_traits.h"

#include "kernels/attention.h"
#include "kernels/attention_ring.h"
#include "kernels/classifier.h"

namespace loom {

size_t DeviceTraits::attention_saved_floats(int B, int NH, int T) const {
  const size_t rows = size_t(B) * size_t(NH) * size_t(T);
  return device == Device::CPU ? rows * size_t(T) : rows;
}

size_t DeviceTraits::attention_scratch_floats(int B, int NH, int NKV, int T, int D) const {
  if (device == Device::CPU) return cpu::attention_backward_scratch_floats(B, T, NH, NKV, D);
  return attention_saved_floats(B, NH, T);  // delta (B, NH, T)
}

size_t DeviceTraits::ring_attention_work_floats(int B, int NH, int T) const {
  if (device != Device::CPU) return 0;
  return cpu::ring_attention_work_floats(cpu::RingDims{B, T, T, NH, NH, 1, 1, 1});
}

size_t DeviceTraits::classifier_work_floats(int N, int Vl) const {
  return device == Device::CPU ? cpu::classifier_work_floats(N, Vl) : 0;
}

}  // namespace loom
