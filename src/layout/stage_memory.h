// The activation memory of one pipeline stage, as offsets into its two arenas: what GPTStage
// allocates and carves, and what loom plan and the device-fit check count. One function computes
// both, so the estimate and the allocation agree by construction.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "backend/device_traits.h"
#include "layout/block_memory.h"

namespace loom {

// Activation recomputation (train.recompute): none keeps every layer's activations per
// in-flight micro-batch; selective drops the attention probabilities (B, NH, T, T) and
// recomputes them from q, k in backward; full keeps only each layer's input and re-runs the
// layer's forward before its backward.
enum class Recompute { None, Selective, Full };
Recompute parse_recompute(const std::string& mode);
const char* recompute_name(Recompute r);

// The last stage's head scratch: final LayerNorm output and gradient, row statistics, the
// classifier's work area and this rank's logits, and (off the cpu) a device copy of the targets.
struct HeadScratch {
  void *lnf = nullptr, *dlnf = nullptr, *logits = nullptr;    // (N, C), (N, C), (N, Vl) act dtype
  float *lnf_mean = nullptr, *lnf_rstd = nullptr;             // (N), (N)
  float *maxv = nullptr, *lmax = nullptr, *losses = nullptr;  // (N) each
  float* sums = nullptr;                                      // (N, 2)
  float* cls_work = nullptr;   // DeviceTraits::classifier_work_floats(N, Vl)
  int32_t* targets = nullptr;  // (N), off the cpu only
};
// Carves a HeadScratch out of base (null: measures); returns its bytes.
size_t carve_head(HeadScratch& h, void* base, int N, int C, int Vl, const ActFormat& f,
                  const DeviceTraits& dev);

// What a stage keeps: its blocks' dims on this TP rank, its layer count per chunk (virtual
// stage), micro-batches in flight, recomputation, whether it is the first/last stage, and its
// local vocab rows. The first stage's chunk 0 holds the embedding, the last stage's last chunk
// the head.
struct StageShapeSpec {
  BlockDims dims{1, 1, 1, 1, 1};
  int layers = 0;                // per chunk
  int slots = 1;                 // micro-batches in flight, all chunks together
  std::vector<int> chunk_slots;  // slots of each chunk (sum: slots); empty: one chunk
  std::vector<int> per_chunk() const {
    return chunk_slots.empty() ? std::vector<int>{slots} : chunk_slots;
  }
  Recompute recompute = Recompute::None;
  bool first = false, last = false;
  int vocab_local = 0;
};

// Byte offsets, each reserved rounded up to 64 bytes, in the activation arena (per slot and
// shared) and the scratch arena (shared by every layer and micro-batch).
struct StageArenas {
  struct Slot {  // the slots of chunk 0, then of chunk 1, ...
    int chunk = 0;
    std::vector<size_t> xs;      // L+1 (Ns, C): layer inputs and the chunk output
    std::vector<size_t> layers;  // L BlockActs (none under full recompute)
    size_t tokens = 0;           // (N) int32, first stage's chunk 0
    size_t dfinal = 0;           // (Ns, C), last stage's last chunk: gradient of its output
  };
  ActFormat fmt;
  bool per_layer = true;  // each slot keeps each layer's BlockActs (recompute != full)
  bool keep_att = true;   // ... with its attention state (else one shared copy, recomputed)
  std::vector<Slot> slots;
  size_t shared = 0;     // the recomputed attention state (selective) or a layer's acts (full)
  size_t rerun_out = 0;  // (Ns, C) full recompute: the re-run layer's output
  size_t acts_bytes = 0;
  size_t block_scratch = 0, dgrad[2] = {0, 0}, head = 0;
  size_t scratch_bytes = 0;
  size_t bytes() const { return acts_bytes + scratch_bytes; }
};
StageArenas plan_stage_arenas(const StageShapeSpec& s, const DeviceTraits& dev);

}  // namespace loom
