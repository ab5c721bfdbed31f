// What the memory layout of a step needs to know about a device without running on it: element
// size, alignment, and the work sizes of its attention and classifier kernels. A Backend reports
// its own (Backend::traits()); loom plan and the device-fit check build one for the device they
// model, so that every estimate and the allocation count the same bytes.
#pragma once
#include <cstddef>

#include "core/dtype.h"

namespace loom {

struct DeviceTraits {
  Device device = Device::CPU;
  DType act = DType::F32;  // activations and compute weights (fp32 master weights apart)

  size_t act_size() const { return dtype_size(act); }
  bool lowp() const { return act != DType::F32; }
  // Alignment of each sub-tensor carved from an arena: 4 on cpu (packed), 16 on cuda (128-bit
  // loads).
  size_t align() const { return device == Device::CPU ? 4 : 16; }
  // True when attention saves the (T, T) probabilities for backward (cpu), so that
  // train.recompute: selective has something to drop; cuda keeps one log-sum-exp per row.
  bool attention_saves_probabilities() const { return device == Device::CPU; }
  // Floats attention_forward saves for backward: (B, NH, T, T) probabilities on cpu, the
  // (B, NH, T) log-sum-exp on cuda.
  size_t attention_saved_floats(int B, int NH, int T) const;
  // Floats of attention_backward's scratch for NH query and NKV kv heads of size D: the same
  // shapes, and on cpu with NKV < NH also the per-head dK, dV before their group sum.
  size_t attention_scratch_floats(int B, int NH, int NKV, int T, int D) const;
  // Floats of one ring-attention step's work (context parallelism; T query and T key rows): the
  // score tiles on cpu, none on cuda.
  size_t ring_attention_work_floats(int B, int NH, int T) const;
  // Floats of classifier_forward's work area for N rows and Vl local vocab columns (per-chunk
  // softmax statistics on cpu; none on cuda).
  size_t classifier_work_floats(int N, int Vl) const;
};

}  // namespace loom
