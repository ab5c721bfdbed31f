// ZeRO stages 0-3 over the data-parallel group: shard arithmetic, gradient reduction and
// placement (blocking, or started early with parallel.overlap), sharded AdamW and the parameter
// all-gather.
#include "optim/zero.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "core/check.h"

namespace loom {

ZeroOptimizer::ZeroOptimizer(const RunLayout& run, const RankMemory& mem,
                             const OptimizerConfig& cfg, ParallelCtx& pc, Backend& be)
    : layout_(run.params()),
      cfg_(cfg),
      pc_(pc),
      be_(be),
      stage_(run.zero_stage()),
      dp_(run.replicas()),
      overlap_(run.overlap()),
      tied_across_stages_(run.tied_across_stages()),
      shards_(run.params(), run.replicas(), run.coord().dp * run.cp() + run.coord().cp,
              run.zero_stage()),
      param_capacity_(mem.param_elems) {
  LOOM_CHECK(pc.replicas().size() == dp_ && pc.replicas().rank() == pc.replica_index(),
             "data-parallel group of ", pc.replicas().size(), " ranks (this one ",
             pc.replicas().rank(), ") for a layout of dp x cp = ", dp_, " at dp", run.coord().dp,
             " cp", run.coord().cp);
  LOOM_CHECK(shards_.sizes().state_elems == mem.zero.state_elems &&
                 shards_.sizes().shard_elems == mem.zero.shard_elems,
             "memory model and optimizer disagree on the ZeRO shards: ", mem.zero.state_elems,
             " / ", mem.zero.shard_elems, " and ", shards_.sizes().state_elems, " / ",
             shards_.sizes().shard_elems, " elements");
  LOOM_CHECK(!shards_.sizes().split ||
                 (pc.ep > 1 && pc.expert_replicas().size() == shards_.groups()[1].ranks &&
                  pc.expert_replicas().rank() == shards_.groups()[1].rank),
             "experts' ZeRO group of ", shards_.groups().back().ranks, " ranks (this one ",
             shards_.groups().back().rank, ") and expert replicas of ", pc.expert_replicas().size(),
             " (this one ", pc.expert_replicas().rank(), ") at ep ", pc.ep);
  const Device dev = be_.device();
  const size_t state = shards_.sizes().state_elems;
  m_ = Buffer(state * sizeof(float), dev);
  v_ = Buffer(state * sizeof(float), dev);
  m_.zero();
  v_.zero();
  state_ = Buffer(sizeof(cpu::StepState), dev);
  state_.zero();
  rule_ =
      cpu::StepRule{float(cfg.beta1), float(cfg.beta2), float(cfg.eps), float(cfg.weight_decay)};

  // Each local layer's flat range; the rest (embeddings, final norm, head) apart.
  for (const auto& [begin, end] : layout_.layer_ranges()) {
    layer_begin_.push_back(begin);
    layer_end_.push_back(end);
  }
  size_t other = 0;
  for (const ParamSpec& p : layout_.params())
    if (p.layer < 0) {
      other_offset_[p.offset] = other;
      other += p.numel();
    }
  if (stage_ < 2) return;

  // Stage 2: the reduced gradient shard, a staging buffer for one layer (two with overlap), one
  // for the rest; stage 3 also the parameter shard and working buffers of the same sizes.
  LOOM_CHECK(mem.grad_elems == shards_.sizes().shard_elems && mem.other_buffer_elems == other,
             "memory model and optimizer disagree on the gradient buffers");
  grad_shard_ = Buffer(mem.grad_elems * sizeof(float), dev);
  for (int b = 0; b < mem.layer_buffers; ++b)
    layer_stage_[b] = Buffer(mem.layer_buffer_elems * sizeof(float), dev);
  other_stage_ = Buffer(mem.other_buffer_elems * sizeof(float), dev);
  if (stage_ == 3) {
    param_shard_ = Buffer(mem.param_elems * sizeof(float), dev);
    param_shard_.zero();
    for (int b = 0; b < mem.layer_buffers; ++b)
      layer_work_[b] = Buffer(mem.layer_buffer_elems * sizeof(float), dev);
    other_work_ = Buffer(mem.other_buffer_elems * sizeof(float), dev);
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
  h.where = [this](const ParamSpec& p) {
    if (p.layer >= 0)
      return static_cast<float*>(layer_work_[buf(p.layer)].data()) +
             (p.offset - layer_begin_[local(p.layer)]);
    return static_cast<float*>(other_work_.data()) + other_offset_.at(p.offset);
  };
  h.gather = [this](int layer) {
    if (layer >= 0) {
      const int b = buf(layer);
      InFlight& f = fetched_[b];
      wait_all(f.reqs);      // this layer's prefetch, or another's
      if (f.layer != layer)  // not prefetched: gather now
        gather_range(layer_begin_[local(layer)], layer_end_[local(layer)], param_shard(),
                     static_cast<float*>(layer_work_[b].data()));
      f = InFlight{};
      return;
    }
    for (const ParamSpec& p : layout_.params())
      if (p.layer < 0)
        gather_range(p.offset, p.offset + p.numel(), param_shard(),
                     static_cast<float*>(other_work_.data()) + other_offset_.at(p.offset));
  };
  h.release = [](int) {};  // the working buffers are simply reused by the next gather
  if (!overlap_) return h;
  // The announced layer goes to the other working buffer, which no compute is reading: the
  // current layer computes from its own (layers alternate between the two).
  h.prefetch = [this](int layer) {
    InFlight& f = fetched_[buf(layer)];
    if (f.layer == layer) return;
    wait_all(f.reqs);
    gather_range(layer_begin_[local(layer)], layer_end_[local(layer)], param_shard(),
                 static_cast<float*>(layer_work_[buf(layer)].data()), &f.reqs);
    f.layer = layer;
  };
  return h;
}

void ZeroOptimizer::wait_all(Pending& p) {
  for (auto& [c, r] : p) c->wait(r);
  p.clear();
}

// Every owner's part of the run as all_gatherv counts and displacements; returns this rank's
// part in `state` (any pointer into it when the rank owns none of the run).
const float* ZeroOptimizer::gather_args(const ShardGroup& g, ShardRange run, const float* state,
                                        std::vector<int>& counts, std::vector<int>& displs) const {
  counts.assign(size_t(g.ranks), 0);
  displs.assign(size_t(g.ranks), 0);
  const float* mine = state;
  for (int d = 0; d < g.ranks; ++d)
    for (const ShardPiece& o : shards_.owned(g, run.lo, run.hi, d)) {  // at most one per run
      counts[size_t(d)] = int(o.hi - o.lo);
      displs[size_t(d)] = int(o.lo - run.lo);
      if (d == g.rank && state) mine = state + g.base + o.local;
    }
  return mine;
}

void ZeroOptimizer::gather_range(size_t begin, size_t end, const float* state, float* out,
                                 Pending* pending) {
  for (const ShardGroup& g : shards_.groups()) {
    Comm& c = group(g.expert);
    for (const ShardRange& run : shards_.runs(g, begin, end)) {
      std::vector<int> counts, displs;
      const float* mine = gather_args(g, run, state, counts, displs);
      float* dst = out + (run.lo - begin);
      if (!state) mine = dst + displs[size_t(g.rank)];  // in place
      if (pending)
        pending->emplace_back(&c,
                              c.start_all_gatherv(mine, dst, std::move(counts), std::move(displs)));
      else
        c.all_gatherv(mine, dst, counts, displs);
    }
  }
}

bool ZeroOptimizer::receives_state(bool everywhere) const {
  if (stage_ == 0 || everywhere) return true;
  for (const ShardGroup& g : shards_.groups())
    if (g.rank == 0) return true;
  return false;
}

size_t ZeroOptimizer::state_gather_elems() const {
  const ShardGroup& g = shards_.groups()[0];
  const size_t total = layout_.total();
  return stage_ > 0 && shards_.contiguous() ? std::max(total, g.shard * size_t(g.ranks)) : total;
}

void ZeroOptimizer::gather_state(const float* state, float* full, bool everywhere) {
  const size_t total = layout_.total();
  if (stage_ == 0) {  // every rank holds it all
    if (full) be_.to_host(full, state, total * sizeof(float));
    return;
  }
  LOOM_CHECK(full || !receives_state(everywhere), "no room for the gathered state");
  auto gather = [&](const ShardGroup& g, const float* mine, float* all) {
    LOOM_CHECK(g.shard <= size_t(INT_MAX), "ZeRO shard of ", g.shard, " elements");
    const MPI_Comm mc = group(g.expert).mpi();
    if (everywhere)
      LOOM_MPI(MPI_Allgather(mine, int(g.shard), MPI_FLOAT, all, int(g.shard), MPI_FLOAT, mc));
    else
      LOOM_MPI(MPI_Gather(mine, int(g.shard), MPI_FLOAT, all, int(g.shard), MPI_FLOAT, 0, mc));
  };
  // Host copies of every rank's shard slots through MPI. Only the slots a rank holds exist in
  // its state (the last shards are shorter); the rest are sent as zeros.
  const size_t held_total = shards_.sizes().state_elems;
  if (shards_.contiguous()) {  // the shards, in rank order, are the flat buffer (padded)
    const ShardGroup& g = shards_.groups()[0];
    std::vector<float> mine(g.shard, 0.0f);
    be_.to_host(mine.data(), state, held_total * sizeof(float));
    gather(g, mine.data(), full);
    return;
  }
  if (full) std::fill(full, full + total, 0.0f);
  for (const ShardGroup& g : shards_.groups()) {
    const bool receives = everywhere || g.rank == 0;
    std::vector<float> mine(g.shard, 0.0f);
    const size_t held = std::min(g.shard, held_total - std::min(held_total, g.base));
    if (held > 0) be_.to_host(mine.data(), state + g.base, held * sizeof(float));
    std::vector<float> all(receives ? g.shard * size_t(g.ranks) : 0);
    gather(g, mine.data(), all.data());
    if (!receives) continue;
    for (int d = 0; d < g.ranks; ++d)  // each owner's pieces to their flat place
      for (const ShardPiece& o : shards_.owned(g, 0, total, d))
        std::copy_n(all.data() + size_t(d) * g.shard + o.local, o.hi - o.lo, full + o.lo);
  }
}

void ZeroOptimizer::set_full_params(const float* full) {
  if (stage_ < 3) {
    be_.from_host(model_->params(), full, layout_.total() * sizeof(float));
    model_->refresh_compute_weights();
    return;
  }
  float* shard = static_cast<float*>(param_shard_.data());
  for (const ShardPiece& o : shards_.mine())
    be_.from_host(shard + o.local, full + o.lo, (o.hi - o.lo) * sizeof(float));
}

void ZeroOptimizer::get_full_params(float* full) {
  if (stage_ < 3) {
    be_.to_host(full, model_->params(), layout_.total() * sizeof(float));
    return;
  }
  if (be_.device() == Device::CPU) return gather_range(0, layout_.total(), param_shard(), full);
  Buffer dev_full(layout_.total() * sizeof(float), be_.device());  // checkpoint/export only
  gather_range(0, layout_.total(), param_shard(), static_cast<float*>(dev_full.data()));
  be_.to_host(full, dev_full.data(), dev_full.bytes());
}

GradHooks ZeroOptimizer::grad_hooks() {
  GradHooks h;
  if (stage_ < 2) {
    if (!overlap_) return h;
    // The model's flat buffer. During the last micro-batch's backward a layer's gradients are
    // final once it is done: start its all-reduce; the non-layer tensors at the end of that
    // backward (the tied embedding waits for the embed group, in reduce_grads_and_norm).
    h.layer_done = [this](int layer, bool last) {
      if (last) start_all_reduce(layer_begin_[local(layer)], layer_end_[local(layer)]);
    };
    h.backward_done = [this](bool last) {
      LOOM_CHECK(!last_backward_done_, "a backward after the step's last micro-batch");
      if (!last) return;
      last_backward_done_ = true;
      for (const ParamSpec& p : layout_.params())
        if (p.layer < 0 && !deferred(p)) start_all_reduce(p.offset, p.offset + p.numel());
    };
    return h;
  }
  h.where = [this](const ParamSpec& p) {
    if (p.layer >= 0)
      return static_cast<float*>(layer_stage_[buf(p.layer)].data()) +
             (p.offset - layer_begin_[local(p.layer)]);
    return static_cast<float*>(other_stage_.data()) + other_offset_.at(p.offset);
  };
  h.layer_done = [this](int layer, bool) {
    const size_t l = local(layer);
    const int b = buf(layer);
    float* data = static_cast<float*>(layer_stage_[b].data());
    if (!overlap_) {
      reduce_to_owners(layer_begin_[l], layer_end_[l], data);
      be_.zero(data, (layer_end_[l] - layer_begin_[l]) * sizeof(float));
      return;
    }
    // In flight until the buffer is needed again (layer_begin of the next layer using it) or
    // the step's gradients are (reduce_grads_and_norm).
    LOOM_CHECK(staged_[b].layer < 0, "staging buffer ", b, " reused before its reduce finished");
    for (const ShardGroup& g : shards_.groups()) {
      Comm& c = group(g.expert);
      for (int d = 0; d < g.ranks; ++d)
        for (const ShardPiece& o : shards_.owned(g, layer_begin_[l], layer_end_[l], d))
          for (size_t off = o.lo; off < o.hi; off += kZeroBucketElems)
            staged_[b].reqs.emplace_back(&c,
                                         c.start_reduce(data + (off - layer_begin_[l]),
                                                        std::min(kZeroBucketElems, o.hi - off), d));
    }
    staged_[b].layer = layer;
  };
  if (overlap_) h.layer_begin = [this](int layer) { settle(buf(layer)); };
  h.backward_done = [this](bool) {
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
  last_backward_done_ = false;
  for (auto& [c, r] : reduces_) c->wait(r);  // none unless a step was cut short
  reduces_.clear();
  if (stage_ < 2) {
    model_->zero_grads();
    return;
  }
  settle(0);
  settle(1);
  be_.zero(grad_shard_.data(), grad_shard_.bytes());
  for (Buffer& b : layer_stage_) be_.zero(b.data(), b.bytes());
  be_.zero(other_stage_.data(), other_stage_.bytes());
}

// Sums data (elements [begin, end) of the flat layout) over each group into the owners'
// gradient shards: one in-place reduce per owned piece the range touches.
void ZeroOptimizer::reduce_to_owners(size_t begin, size_t end, float* data) {
  for (const ShardGroup& g : shards_.groups()) {
    Comm& c = group(g.expert);
    for (int d = 0; d < g.ranks; ++d)
      for (const ShardPiece& o : shards_.owned(g, begin, end, d)) {
        float* piece = data + (o.lo - begin);
        c.reduce(piece, o.hi - o.lo, d);
        if (d == g.rank)
          be_.add_inplace(static_cast<float*>(grad_shard_.data()) + g.base + o.local, piece,
                          o.hi - o.lo);
      }
  }
}

void ZeroOptimizer::start_all_reduce(size_t begin, size_t end) {
  for (const ParamLayout::FlatRun& r : layout_.expert_runs(begin, end)) {
    Comm& g = group(r.expert);
    for (size_t off = r.lo; off < r.hi; off += kZeroBucketElems)
      reduces_.emplace_back(
          &g, g.start_all_reduce(model_->grads() + off, std::min(kZeroBucketElems, r.hi - off),
                                 ReduceOp::Sum));
  }
}

// Completes the reduces from staging buffer b as reduce_to_owners would have: the owned part of
// the layer's range is added to the gradient shard, and the buffer is zeroed for its next layer.
void ZeroOptimizer::settle(int b) {
  InFlight& s = staged_[b];
  if (s.layer < 0) return;
  wait_all(s.reqs);
  const size_t begin = layer_begin_[local(s.layer)], end = layer_end_[local(s.layer)];
  float* data = static_cast<float*>(layer_stage_[b].data());
  for (const ShardPiece& o : shards_.mine(begin, end))
    be_.add_inplace(static_cast<float*>(grad_shard_.data()) + o.local, data + (o.lo - begin),
                    o.hi - o.lo);
  be_.zero(data, (end - begin) * sizeof(float));
  s = InFlight{};
}

void ZeroOptimizer::progress() {
  for (auto& [c, r] : reduces_) c->test(r);
  for (InFlight* f : {&staged_[0], &staged_[1], &fetched_[0], &fetched_[1]})
    for (auto& [c, r] : f->reqs) c->test(r);
}

const float* ZeroOptimizer::grads_of(const ShardPiece& p) const {
  if (stage_ < 2) return model_->grads() + p.lo;
  return static_cast<const float*>(grad_shard_.data()) + p.local;
}

void ZeroOptimizer::reduce_grads_and_norm() {
  const bool started = overlap_ && last_backward_done_;  // stages 0/1: during backward
  if (stage_ < 2) {
    float* grads = model_->grads();
    if (tied_across_stages_ && pc_.embed.size() > 1) {
      const ParamSpec& wte = layout_.get("wte.weight");
      pc_.embed.all_reduce(grads + wte.offset, wte.numel(), ReduceOp::Sum);
      if (started) start_all_reduce(wte.offset, wte.offset + wte.numel());
    }
    if (!started) {
      LOOM_CHECK(reduces_.empty(), "gradient reductions started for an unfinished step");
      for (const ParamLayout::FlatRun& r : layout_.expert_runs(0, layout_.total()))
        for (size_t off = r.lo; off < r.hi; off += kZeroBucketElems)
          group(r.expert).all_reduce(grads + off, std::min(kZeroBucketElems, r.hi - off),
                                     ReduceOp::Sum);
    }
    for (auto& [c, r] : reduces_) c->wait(r);
    reduces_.clear();
  }
  if (stage_ >= 2) {  // the last layers' reduces in flight (overlap)
    settle(0);
    settle(1);
  }
  if (stage_ >= 2 && tied_across_stages_ && pc_.embed.size() > 1) {
    const ParamSpec& wte = layout_.get("wte.weight");
    float* data = static_cast<float*>(other_stage_.data()) + other_offset_.at(wte.offset);
    pc_.embed.all_reduce(data, wte.numel(), ReduceOp::Sum);
    reduce_to_owners(wte.offset, wte.offset + wte.numel(), data);
    be_.zero(data, wte.numel() * sizeof(float));
  }
  // Each element once: TP replicas and the tied copy by their owner (norm_owner), DP replicas
  // by the shard owner (stage 0: dp rank 0 holds the one "shard"; with expert parallelism the
  // experts' tensors by the first expert replica, dp < ep).
  double* sq = &state()->norm_sq;
  be_.zero(sq, sizeof(double));
  for (const ParamSpec& p : layout_.params()) {
    if (!p.norm_owner) continue;
    if (stage_ == 0 && (p.expert ? pc_.expert_replica_index() : pc_.replicas().rank()) != 0)
      continue;
    for (const ShardPiece& o : shards_.mine()) {
      size_t lo = std::max(p.offset, o.lo), hi = std::min(p.offset + p.numel(), o.hi);
      if (lo < hi) be_.sum_squares(sq, grads_of(o) + (lo - o.lo), hi - lo);
    }
  }
  pc_.world.all_reduce(sq, 1, DType::F64, ReduceOp::Sum);
}

}  // namespace loom
