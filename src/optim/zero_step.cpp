// ZeroOptimizer's step: the step state in backend memory, sharded AdamW and the parameter
// all-gather, and the memory report.
#include <algorithm>

#include "core/check.h"
#include "optim/zero.h"

namespace loom {

cpu::StepState ZeroOptimizer::read_state() const {
  cpu::StepState s;
  be_.to_host(&s, state_.data(), sizeof(s));
  return s;
}

void ZeroOptimizer::set_update_counts(int applied, int skipped) {
  cpu::StepState s = read_state();
  s.t = applied;
  s.skipped = skipped;
  be_.from_host(state_.data(), &s, sizeof(s));
}

void ZeroOptimizer::step(const cpu::StepInputs* in) {
  be_.decide_step(state(), in, rule_);
  float* params = stage_ == 3 ? nullptr : model_->params();
  float* pshard = static_cast<float*>(param_shard_.data());
  for (const ParamSpec& p : layout_.params())
    for (const ShardPiece& o : shards_.mine()) {
      size_t lo = std::max(p.offset, o.lo), hi = std::min(p.offset + p.numel(), o.hi);
      if (lo >= hi) continue;
      size_t k = o.local + (lo - o.lo);                      // in the state buffers
      float* p_lo = stage_ == 3 ? pshard + k : params + lo;  // element lo of the flat layout
      be_.adamw_update(p_lo, grads_of(o) + (lo - o.lo), m() + k, v() + k, hi - lo,
                       &state()->coefs[p.decay ? 1 : 0], nullptr);
    }
  if ((stage_ == 1 || stage_ == 2) && shards_.contiguous()) {  // one shard each, padded buffer
    const size_t S = shards_.sizes().dense_shard;
    pc_.replicas().all_gather(params + size_t(pc_.replicas().rank()) * S, params, S);
  } else if (stage_ == 1 || stage_ == 2) {  // each run of each group, in place
    gather_range(0, layout_.total(), nullptr, params);
  }
  if (stage_ < 3) model_->refresh_compute_weights();
}

MemoryReport ZeroOptimizer::memory() const {
  MemoryReport r;
  r.params =
      (stage_ == 3 ? param_shard_.bytes() : model_->param_bytes()) + model_->compute_weight_bytes();
  r.param_buckets = layer_work_[0].bytes() + layer_work_[1].bytes() + other_work_.bytes();
  r.grads = stage_ < 2 ? model_->grad_bytes() : grad_shard_.bytes();
  r.grad_buckets = layer_stage_[0].bytes() + layer_stage_[1].bytes() + other_stage_.bytes();
  r.optimizer = m_.bytes() + v_.bytes();
  r.activations = model_->activation_bytes();
  return r;
}

}  // namespace loom
