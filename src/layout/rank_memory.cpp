// The memory model of one rank: every buffer loom allocates, counted from the layout.
#include "layout/rank_memory.h"

#include <algorithm>
#include <map>

#include "layout/step_inputs.h"

namespace loom {

StageParams stage_params(const ParamLayout& layout) {
  StageParams sh;
  sh.stage = layout.stage();
  sh.num_layers = layout.num_layers();
  sh.chunks = layout.virtual_stages();
  sh.first = layout.first_stage();
  sh.last = layout.last_stage();
  sh.total = layout.total();
  sh.vocab_local = layout.vocab_local();
  sh.tied_across_stages = layout.model().tie_embeddings && layout.stages() > 1;
  std::map<int, uint64_t> per_layer;
  sh.layer_begin = layout.total();
  for (const ParamSpec& p : layout.params()) {
    if (p.layer >= 0) {
      sh.layer_begin = std::min<uint64_t>(sh.layer_begin, p.offset);
      per_layer[p.layer] += p.numel();
      sh.layer_elems += p.numel();
    } else {
      sh.other += p.numel();
      if (p.name == "wte.weight") sh.wte = p.numel();
    }
    if (p.expert) sh.expert += p.numel();
  }
  for (const auto& kv : per_layer) sh.widest_layer = std::max(sh.widest_layer, kv.second);
  return sh;
}

StageShapeSpec stage_shape_spec(const StageParams& p, const BlockDims& dims, int slots,
                                Recompute r) {
  StageShapeSpec s;
  s.dims = dims;
  s.layers = p.num_layers / p.chunks;
  s.slots = slots;
  s.recompute = r;
  s.first = p.first;
  s.last = p.last;
  s.vocab_local = p.vocab_local;
  return s;
}

StageShapeSpec stage_shape_spec(const StageParams& p, const BlockDims& dims,
                                const std::vector<int>& chunk_slots, Recompute r) {
  int total = 0;
  for (int n : chunk_slots) total += n;
  StageShapeSpec s = stage_shape_spec(p, dims, total, r);
  if (chunk_slots.size() > 1) s.chunk_slots = chunk_slots;
  return s;
}

RankMemory plan_rank_memory(const MemorySpec& s, const DeviceTraits& dev) {
  return plan_rank_memory(s, dev, plan_stage_arenas(s.stage, dev));
}

RankMemory plan_rank_memory(const MemorySpec& s, const DeviceTraits& dev,
                            const StageArenas& arenas) {
  const StageParams& p = s.params;
  RankMemory r;
  r.zero = zero_sizes(p.total, p.expert, s.dp, s.dp_rank, s.ep, s.zero);
  // ZeRO 1/2 all-gather one contiguous shard per rank in place (padded buffer), or each run of
  // the two groups (the buffer itself).
  const uint64_t gathered =
      r.zero.split ? p.total : uint64_t(s.dp) * zero_shard_size(p.total, s.dp);
  r.param_elems = s.zero < 3 ? gathered : r.zero.shard_elems;
  r.grad_elems = s.zero < 2 ? p.total : r.zero.shard_elems;
  if (s.zero >= 2) {
    r.layer_buffers = s.overlap ? 2 : 1;
    r.layer_buffer_elems = p.widest_layer;
    r.other_buffer_elems = p.other;
  }
  // Every chunk but the model's first sends its input gradient back (one buffer per slot);
  // every chunk but the model's last receives its output gradient, right before its backward.
  const std::vector<int> chunks = s.stage.per_chunk();
  for (size_t c = 0; c < chunks.size(); ++c)
    if (!(s.stage.first && c == 0)) r.sent_grads += chunks[c];
  const bool sends_grads = !(s.stage.first && chunks.size() == 1);
  const bool sends_acts = !(s.stage.last && chunks.size() == 1);
  r.recv_grads = sends_acts ? (s.overlap ? 2 : 1) : 0;
  if (dev.device == Device::CUDA) {
    r.send_directions = (sends_grads ? 1 : 0) + (sends_acts ? 1 : 0);
    r.staged_sends = r.send_directions > 0 ? s.stage.slots + 1 : 0;
  }
  r.arenas = arenas;

  const uint64_t f32 = sizeof(float), act = dev.act_size();
  const uint64_t layer_bufs =
      uint64_t(r.layer_buffers) * r.layer_buffer_elems + r.other_buffer_elems;
  r.master_params = r.param_elems * f32;
  if (dev.lowp()) r.compute_weights = r.param_elems * act;
  if (s.zero >= 3) r.param_gather = layer_bufs * f32;
  r.grads = r.grad_elems * f32;
  if (s.zero >= 2) r.grad_buckets = layer_bufs * f32;
  r.optimizer = 2 * r.zero.state_elems * f32;
  r.activations = r.arenas.acts_bytes;
  const BlockDims& d = s.stage.dims;
  if (s.stage.last) r.logits = uint64_t(d.N()) * uint64_t(s.stage.vocab_local) * act;
  r.scratch = r.arenas.scratch_bytes - r.logits;
  const uint64_t NC = uint64_t(d.Ns()) * uint64_t(d.C) * act;  // (Ns, C) boundary tensors
  r.pipeline = uint64_t(r.sent_grads + r.recv_grads + r.send_directions * r.staged_sends) * NC;
  r.step_inputs = StepInputsLayout(s.microbatches, d.N()).bytes;
  return r;
}

uint64_t RankMemory::total() const {
  uint64_t t = 0;
  for (const auto& p : parts("")) t += p.second;
  return t;
}

std::vector<std::pair<std::string, uint64_t>> RankMemory::parts(const std::string& dtype) const {
  const std::string lowp = dtype.empty() || dtype == "fp32" ? "compute" : dtype;
  return {{"fp32 master weights", master_params},
          {lowp + " compute weights", compute_weights},
          {"ZeRO-3 gather", param_gather},
          {"fp32 gradients", grads},
          {"gradient buckets", grad_buckets},
          {"AdamW moments", optimizer},
          {"activations", activations},
          {"backward scratch", scratch},
          {"logits", logits},
          {"pipeline buffers", pipeline},
          {"step inputs", step_inputs}};
}

}  // namespace loom
