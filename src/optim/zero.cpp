// ZeRO stages 0-2 over the data-parallel group: shard arithmetic, gradient reduction and
// placement, sharded AdamW and the parameter all-gather.
#include "optim/zero.h"

#include <algorithm>
#include <cmath>


namespace loom {

namespace {
constexpr size_t kBucket = size_t(1) << 24;  // elements per data-parallel all-reduce call
}

size_t zero_shard_size(size_t total, int dp) { return (total + size_t(dp) - 1) / size_t(dp); }

ShardRange zero_shard(size_t total, int dp, int rank) {
  size_t s = zero_shard_size(total, dp);
  return {std::min(total, size_t(rank) * s), std::min(total, size_t(rank + 1) * s)};
}

ZeroOptimizer::ZeroOptimizer(const ParamLayout& layout, const Config& cfg, ParallelCtx& pc,
                             Backend* be)
    : layout_(layout), cfg_(cfg.optimizer), pc_(pc), be_(be ? *be : cpu_backend()),
      stage_(cfg.optimizer.zero_stage), dp_(pc.dp.size()) {
  const Device dev = be_.device();
  tied_across_stages_ = cfg.model.tie_embeddings && pc.grid.size(Axis::PP) > 1;
  shard_size_ = zero_shard_size(layout.total(), dp_);
  shard_ = stage_ == 0 ? ShardRange{0, layout.total()} : zero_shard(layout.total(), dp_, pc.dp.rank());
  const size_t state = shard_.hi - shard_.lo;
  m_ = Buffer(state * sizeof(float), dev);
  v_ = Buffer(state * sizeof(float), dev);
  m_.zero();
  v_.zero();
  if (stage_ < 2) return;

  // Stage 2: the reduced gradient shard, a staging buffer for one layer, one for the rest.
  grad_shard_ = Buffer(shard_size_ * sizeof(float), dev);
  std::map<int, std::pair<size_t, size_t>> layers;  // global layer -> flat [begin, end)
  size_t other = 0;
  for (const ParamSpec& p : layout.params()) {
    if (p.layer >= 0) {
      auto it = layers.emplace(p.layer, std::make_pair(p.offset, p.offset)).first;
      it->second.second = p.offset + p.numel();
    } else {
      other_offset_[p.offset] = other;
      other += p.numel();
    }
  }
  size_t widest = 0;
  for (auto& [l, r] : layers) {
    layer_begin_.push_back(r.first);
    layer_end_.push_back(r.second);
    widest = std::max(widest, r.second - r.first);
  }
  layer_stage_ = Buffer(widest * sizeof(float), dev);
  other_stage_ = Buffer(other * sizeof(float), dev);
  if (stage_ == 3) {
    param_shard_ = Buffer(shard_size_ * sizeof(float), dev);
    param_shard_.zero();
    layer_work_ = Buffer(widest * sizeof(float), dev);
    other_work_ = Buffer(other * sizeof(float), dev);
  }
}

bool ZeroOptimizer::deferred(const ParamSpec& p) const {
  // The tied embedding must be summed between the first and last stage before the DP
  // reduction; it stays whole in its staging buffer until the end of the step.
  return tied_across_stages_ && p.name == "wte.weight";
}

ParamHooks ZeroOptimizer::param_hooks() {
  if (stage_ < 3) return {};
  ParamHooks h;
  const int first_layer = layout_.layers().first_layer;
  h.where = [this, first_layer](const ParamSpec& p) {
    if (p.layer >= 0)
      return static_cast<float*>(layer_work_.data()) +
             (p.offset - layer_begin_[size_t(p.layer - first_layer)]);
    return static_cast<float*>(other_work_.data()) + other_offset_.at(p.offset);
  };
  h.gather = [this, first_layer](int layer) {
    if (layer >= 0) {
      size_t l = size_t(layer - first_layer);
      gather_range(layer_begin_[l], layer_end_[l], static_cast<float*>(layer_work_.data()));
      return;
    }
    for (const ParamSpec& p : layout_.params())
      if (p.layer < 0)
        gather_range(p.offset, p.offset + p.numel(),
                     static_cast<float*>(other_work_.data()) + other_offset_.at(p.offset));
  };
  h.release = [](int) {};  // the working buffers are simply reused by the next gather
  return h;
}

// out (end - begin) = elements [begin, end) of the flat layout, from every DP rank's shard.
void ZeroOptimizer::gather_range(size_t begin, size_t end, float* out) {
  std::vector<int> counts(static_cast<size_t>(dp_)), displs(counts.size());
  for (int d = 0; d < dp_; ++d) {
    size_t lo = std::max(begin, size_t(d) * shard_size_);
    size_t hi = std::min(end, size_t(d + 1) * shard_size_);
    counts[size_t(d)] = lo < hi ? int(hi - lo) : 0;
    displs[size_t(d)] = lo < hi ? int(lo - begin) : 0;
  }
  size_t lo = std::max(begin, shard_.lo);
  const float* mine = param_shard() + (lo < shard_.hi ? lo - shard_.lo : 0);
  pc_.dp.all_gatherv(mine, out, counts, displs);
}

void ZeroOptimizer::set_full_params(const float* full) {
  if (stage_ < 3) {
    be_.from_host(model_->params(), full, layout_.total() * sizeof(float));
    model_->refresh_compute_weights();
    return;
  }
  be_.from_host(param_shard_.data(), full + shard_.lo, (shard_.hi - shard_.lo) * sizeof(float));
}

void ZeroOptimizer::get_full_params(float* full) {
  if (stage_ < 3) {
    be_.to_host(full, model_->params(), layout_.total() * sizeof(float));
    return;
  }
  if (be_.device() == Device::CPU) return gather_range(0, layout_.total(), full);
  Buffer dev_full(layout_.total() * sizeof(float), be_.device());  // checkpoint/export only
  gather_range(0, layout_.total(), static_cast<float*>(dev_full.data()));
  be_.to_host(full, dev_full.data(), dev_full.bytes());
}

GradHooks ZeroOptimizer::grad_hooks() {
  if (stage_ < 2) return {};
  GradHooks h;
  const int first_layer = layout_.layers().first_layer;
  h.where = [this, first_layer](const ParamSpec& p) {
    if (p.layer >= 0)
      return static_cast<float*>(layer_stage_.data()) +
             (p.offset - layer_begin_[size_t(p.layer - first_layer)]);
    return static_cast<float*>(other_stage_.data()) + other_offset_.at(p.offset);
  };
  h.layer_done = [this, first_layer](int layer) {
    size_t l = size_t(layer - first_layer);
    float* data = static_cast<float*>(layer_stage_.data());
    reduce_to_owners(layer_begin_[l], layer_end_[l], data);
    be_.zero(data, (layer_end_[l] - layer_begin_[l]) * sizeof(float));
  };
  h.backward_done = [this] {
    for (const ParamSpec& p : layout_.params()) {
      if (p.layer >= 0 || deferred(p)) continue;
      float* data = static_cast<float*>(other_stage_.data()) + other_offset_.at(p.offset);
      reduce_to_owners(p.offset, p.offset + p.numel(), data);
      be_.zero(data, p.numel() * sizeof(float));
    }
  };
  return h;
}

void ZeroOptimizer::attach(GPTStage& stage) {
  LOOM_CHECK(stage_ == 3 || stage.param_bytes() >= param_capacity() * sizeof(float),
             "parameter buffer of ", stage.param_bytes(), " bytes is smaller than ZeRO needs");
  model_ = &stage;
}

void ZeroOptimizer::zero_grad() {
  if (stage_ < 2) {
    model_->zero_grads();
    return;
  }
  be_.zero(grad_shard_.data(), grad_shard_.bytes());
  be_.zero(layer_stage_.data(), layer_stage_.bytes());
  be_.zero(other_stage_.data(), other_stage_.bytes());
}

// Sums data (elements [begin, end) of the flat layout) over the DP group into the owners'
// gradient shards: one in-place reduce per shard the range touches.
void ZeroOptimizer::reduce_to_owners(size_t begin, size_t end, float* data) {
  const int me = pc_.dp.rank();
  for (int d = 0; d < dp_; ++d) {
    size_t lo = std::max(begin, size_t(d) * shard_size_);
    size_t hi = std::min(end, size_t(d + 1) * shard_size_);
    if (lo >= hi) continue;
    float* piece = data + (lo - begin);
    pc_.dp.reduce(piece, hi - lo, d);
    if (d == me) {
      float* dst = static_cast<float*>(grad_shard_.data()) + (lo - shard_.lo);
      be_.add_inplace(dst, piece, hi - lo);
    }
  }
}

const float* ZeroOptimizer::shard_grads() const {
  if (stage_ < 2) return model_->grads() + shard_.lo;
  return static_cast<const float*>(grad_shard_.data());
}

double ZeroOptimizer::reduce_grads_and_norm() {
  if (stage_ < 2) {
    float* grads = model_->grads();
    if (tied_across_stages_ && pc_.embed.size() > 1) {
      const ParamSpec& wte = layout_.get("wte.weight");
      pc_.embed.all_reduce(grads + wte.offset, wte.numel(), ReduceOp::Sum);
    }
    for (size_t off = 0; off < layout_.total(); off += kBucket)
      pc_.dp.all_reduce(grads + off, std::min(kBucket, layout_.total() - off), ReduceOp::Sum);
  } else if (tied_across_stages_ && pc_.embed.size() > 1) {
    const ParamSpec& wte = layout_.get("wte.weight");
    float* data = static_cast<float*>(other_stage_.data()) + other_offset_.at(wte.offset);
    pc_.embed.all_reduce(data, wte.numel(), ReduceOp::Sum);
    reduce_to_owners(wte.offset, wte.offset + wte.numel(), data);
    be_.zero(data, wte.numel() * sizeof(float));
  }
  // Each element once: TP replicas and the tied copy by their owner (norm_owner), DP replicas
  // by the shard owner (stage 0: dp rank 0 holds the one "shard").
  if (stage_ > 0 || pc_.dp.rank() == 0) {
    const float* g = shard_grads();
    for (const ParamSpec& p : layout_.params()) {
      if (!p.norm_owner) continue;
      size_t lo = std::max(p.offset, shard_.lo), hi = std::min(p.offset + p.numel(), shard_.hi);
      if (lo < hi) be_.sum_squares_acc(g + (lo - shard_.lo), hi - lo);
    }
  }
  double sq = be_.sum_squares_take();
  pc_.world.all_reduce(&sq, 1, ReduceOp::Sum);
  return std::sqrt(sq);
}

void ZeroOptimizer::step(double lr, float grad_scale, int step) {
  float* params = stage_ == 3 ? nullptr : model_->params();
  float* pshard = static_cast<float*>(param_shard_.data());
  const float* g = shard_grads();
  for (const ParamSpec& p : layout_.params()) {
    size_t lo = std::max(p.offset, shard_.lo), hi = std::min(p.offset + p.numel(), shard_.hi);
    if (lo >= hi) continue;
    cpu::AdamWParams a{float(lr), float(cfg_.beta1), float(cfg_.beta2), float(cfg_.eps),
                       p.decay ? float(cfg_.weight_decay) : 0.0f, step, grad_scale};
    size_t k = lo - shard_.lo;
    float* p_lo = stage_ == 3 ? pshard + k : params + lo;  // element lo of the flat layout
    be_.adamw_update(p_lo, g + k, m() + k, v() + k, hi - lo, a, nullptr);
  }
  if (stage_ == 1 || stage_ == 2) {
    float* mine = params + size_t(pc_.dp.rank()) * shard_size_;
    pc_.dp.all_gather(mine, params, shard_size_);
  }
  if (stage_ < 3) model_->refresh_compute_weights();
}

MemoryReport ZeroOptimizer::memory() const {
  MemoryReport r;
  r.params = (stage_ == 3 ? param_shard_.bytes() : model_->param_bytes()) +
             model_->compute_weight_bytes();
  r.param_buckets = layer_work_.bytes() + other_work_.bytes();
  r.grads = stage_ < 2 ? model_->grad_bytes() : grad_shard_.bytes();
  r.grad_buckets = layer_stage_.bytes() + other_stage_.bytes();
  r.optimizer = m_.bytes() + v_.bytes();
  r.activations = model_->activation_bytes();
  return r;
}

}  // namespace loom
