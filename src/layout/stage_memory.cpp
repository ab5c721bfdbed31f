// Arena offsets of a pipeline stage's activations and scratch.
#include "layout/stage_memory.h"

#include "core/check.h"

namespace loom {

namespace {
// Offsets in an arena whose every reservation is rounded up to 64 bytes.
struct ArenaCounter {
  size_t size = 0;
  size_t reserve(size_t bytes) {
    const size_t off = size;
    size += (bytes + 63) / 64 * 64;
    return off;
  }
};
}  // namespace

Recompute parse_recompute(const std::string& mode) {
  if (mode == "selective") return Recompute::Selective;
  if (mode == "full") return Recompute::Full;
  LOOM_USER_CHECK(mode == "none", "train.recompute: '", mode,
                  "' is not one of none, selective, full");
  return Recompute::None;
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::None:
      return "none";
    case Recompute::Selective:
      return "selective";
    case Recompute::Full:
      return "full";
  }
  return "?";
}

size_t carve_head(HeadScratch& h, void* base, int N_, int C_, int Vl, const ActFormat& f,
                  const DeviceTraits& dev) {
  const size_t N = size_t(N_), C = size_t(C_), e = f.act;
  Carver c(base, f.align);
  h.lnf = c.take(N * C * e);
  h.dlnf = c.take(N * C * e);
  h.lnf_mean = c.floats(N);
  h.lnf_rstd = c.floats(N);
  h.maxv = c.floats(N);
  h.lmax = c.floats(N);
  h.losses = c.floats(N);
  h.sums = c.floats(2 * N);
  h.cls_work = c.floats(dev.classifier_work_floats(N_, Vl));
  h.logits = c.take(N * size_t(Vl) * e);
  if (dev.device != Device::CPU) h.targets = static_cast<int32_t*>(c.take(N * 4));
  return c.used();
}

StageArenas plan_stage_arenas(const StageShapeSpec& s, const DeviceTraits& dev) {
  const BlockDims& d = s.dims;
  StageArenas r;
  r.fmt = act_format(dev, d);
  // Ns: the rows of the stage's boundary tensors (N/tp of them with sequence parallelism).
  const size_t N = size_t(d.N()), Ns = size_t(d.Ns()), C = size_t(d.C), L = size_t(s.layers);
  const size_t e = r.fmt.act;
  // Kept per slot and layer: everything (none), everything but the attention probabilities
  // (selective), or nothing but the layer inputs (full). A device whose attention keeps only
  // row statistics (cuda) has nothing for selective to drop: it keeps them per layer.
  r.per_layer = s.recompute != Recompute::Full;
  r.keep_att = s.recompute == Recompute::None || !attention_keeps_probabilities(dev, d);
  ArenaCounter acts;
  const std::vector<int> chunks = s.per_chunk();
  for (size_t c = 0; c < chunks.size(); ++c)
    for (int i = 0; i < chunks[c]; ++i) {
      StageArenas::Slot o;
      o.chunk = int(c);
      for (size_t l = 0; l <= L; ++l) o.xs.push_back(acts.reserve(Ns * C * e));
      if (r.per_layer)
        for (size_t l = 0; l < L; ++l)
          o.layers.push_back(acts.reserve(d.acts_bytes(r.fmt, r.keep_att)));
      if (s.first && c == 0) o.tokens = acts.reserve(N * 4);
      if (s.last && c + 1 == chunks.size()) o.dfinal = acts.reserve(Ns * C * e);
      r.slots.push_back(o);
    }
  // Shared by every slot and layer: the attention probabilities (selective), or a whole layer's
  // activations and the re-run output (full), rebuilt right before each layer's backward.
  if (r.per_layer && !r.keep_att) r.shared = acts.reserve(r.fmt.att_saved * 4);
  if (s.recompute == Recompute::Full) {
    r.shared = acts.reserve(d.acts_bytes(r.fmt, true));
    r.rerun_out = acts.reserve(Ns * C * e);
  }
  r.acts_bytes = acts.size;

  // Scratch: the block backward's, two ping-pong gradients, and the head (last stage).
  ArenaCounter scratch;
  r.block_scratch = scratch.reserve(BlockScratch::bytes(d, r.fmt));
  r.dgrad[0] = scratch.reserve(Ns * C * e);
  r.dgrad[1] = scratch.reserve(Ns * C * e);
  if (s.last) {
    HeadScratch h;
    r.head = scratch.reserve(carve_head(h, nullptr, d.N(), d.C, s.vocab_local, r.fmt, dev));
  }
  r.scratch_bytes = scratch.size;
  return r;
}

}  // namespace loom
