// StepFeed: the step's inputs, filled on the host and uploaded at once.
#include "train/step_feed.h"

#include <cstring>

namespace loom {

StepFeed::StepFeed(Backend& be, int microbatches, int tokens_per_micro_batch)
    : be_(be),
      layout_(microbatches, tokens_per_micro_batch),
      host_(be.make_host_staging(layout_.bytes)),
      dev_(layout_.bytes, be.device()) {
  dev_.zero();
}

void StepFeed::load(const cpu::StepInputs& scalars, const BatchFn& batch) {
  host_->wait_writable();
  auto* base = static_cast<unsigned char*>(host_->data());
  std::memset(base, 0, StepInputsLayout::kScalarBytes);
  std::memcpy(base, &scalars, sizeof scalars);
  auto* tokens = reinterpret_cast<int32_t*>(base + layout_.tokens_at);
  auto* targets = reinterpret_cast<int32_t*>(base + layout_.targets_at);
  for (int mb = 0; mb < layout_.microbatches; ++mb)
    batch(mb, tokens + size_t(mb) * layout_.tokens, targets + size_t(mb) * layout_.tokens);
  host_->upload(dev_.data(), layout_.bytes);
}

const cpu::StepInputs* StepFeed::scalars() const {
  return static_cast<const cpu::StepInputs*>(dev_.data());
}

StepTokens StepFeed::tokens() const {
  const auto* base = static_cast<const unsigned char*>(dev_.data());
  return StepTokens{reinterpret_cast<const int32_t*>(base + layout_.tokens_at),
                    reinterpret_cast<const int32_t*>(base + layout_.targets_at)};
}

}  // namespace loom
