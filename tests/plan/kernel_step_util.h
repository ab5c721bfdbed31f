// Helpers of the kernel-model tests: totals over a modelled step.
#pragma once
#include "plan/kernel_model.h"

namespace loom::test {

// The FLOPs of every kernel of step k held against roof u.
inline double sum_flops(const plan::KernelStep& k, plan::Unit u) {
  double f = 0;
  for (const auto& c : k.kernels)
    if (c.unit == u) f += c.flops;
  return f;
}

}  // namespace loom::test
