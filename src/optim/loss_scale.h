// Dynamic loss scaling for fp16 training: multiply the loss by `scale` so small gradients stay
// representable; when any gradient overflows (inf/nan) skip the step and halve the scale, and
// after `growth_interval` clean steps in a row double it (torch.cuda.amp.GradScaler's rule).
#pragma once
#include <cstddef>

namespace loom {

class LossScaler {
 public:
  explicit LossScaler(float init_scale = 65536.0f, float growth = 2.0f, float backoff = 0.5f,
                      int growth_interval = 2000);
  float scale() const { return scale_; }
  // Given whether this step's gradients (all ranks agreed) overflowed: returns true when the
  // optimizer step should be applied, and updates the scale for the next step.
  bool update(bool overflow);
  int skipped() const { return skipped_; }
  int clean_steps() const { return clean_; }  // clean steps in a row since the last change
  // State of a checkpoint (resume continues exactly).
  void restore(float scale, int clean_steps, int skipped);

 private:
  float scale_, growth_, backoff_;
  int interval_, clean_ = 0, skipped_ = 0;
};

// True when x (n) holds an inf or a nan.
bool has_nonfinite(const float* x, size_t n);

}  // namespace loom
