// ParamLayout: which parameters a rank holds (its pipeline stage and tensor-parallel shard),
// their canonical names and shapes, and where each lives in the rank's flat buffer.
// A pure function of (model config, tp, tp_rank, stage split, stage, virtual stages): no MPI,
// no allocation. With v virtual stages the layers form pp*v equal chunks, chunk c on stage
// c % pp; tensors keep their global layer index, so the names do not depend on the split.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"

namespace loom {

// How a canonical tensor (seen as 2-D: 1-D tensors are one row) is split over TP ranks.
enum class Shard {
  Replicated,  // every TP rank holds it whole (layernorms, row-parallel biases, wpe)
  Rows,        // split along rows (row-parallel weights: attn.c_proj, mlp.c_proj)
  Cols,        // split along columns (column-parallel: mlp.c_fc weight and bias)
  QKVCols,     // columns in parts q|k|v (n_head, kv, kv heads), each split by whole heads (c_attn)
  GateUpCols,  // columns in two equal parts gate|up, each split evenly (llama's mlp.c_fc)
  VocabRows,   // rows of the padded vocab; rows >= vocab_size are padding (wte, lm_head)
  ExpertRows,  // E equal row blocks (one per expert), each split along rows (experts' c_proj)
};

struct ParamSpec {
  std::string name;      // canonical name (Hugging Face GPT-2's), e.g. "h.3.attn.c_attn.weight"
  int64_t rows, cols;    // canonical shape as 2-D (1-D tensors: rows = 1)
  int ndim;              // canonical rank (1 or 2)
  int64_t lrows, lcols;  // this rank's shard
  Shard shard;
  bool decay;       // weight decay applies (ndim >= 2)
  bool norm_owner;  // counts toward the global gradient norm on this rank (replicas once)
  size_t offset;    // element offset in the flat buffer
  int layer;        // transformer layer, -1 for embeddings / final norm
  // An expert tensor (mlp.experts.*): this rank holds its expert-parallel rank's E/ep experts,
  // and the expert replicas (ParallelCtx::expert_replicas()) sum its gradient.
  bool expert = false;
  size_t numel() const { return size_t(lrows) * size_t(lcols); }
};

// A rectangle of a shard: local [lrow, lrow+rows) x [lcol, lcol+cols) holds canonical
// [grow, grow+rows) x [gcol, gcol+cols). Padding rows of the vocab are in no block.
struct ShardBlock {
  int64_t grow, gcol, lrow, lcol, rows, cols;
};

struct StageRange {
  int first_layer, num_layers;
};

// Layers per stage: `stage_layers` when given, else as even as possible (earlier stages get
// the extra layers).
std::vector<int> split_layers(int n_layer, int pp, const std::vector<int>& stage_layers);

// The layer ranges of `stage`, one per chunk in chunk order: chunk c of the stage is global
// chunk c*pp + stage of n_layer/(pp*v) layers (v > 1 needs divisibility and no stage_layers),
// or the stage's one range of split_layers (v == 1).
std::vector<StageRange> stage_chunks(int n_layer, int pp, int stage, int v,
                                     const std::vector<int>& stage_layers = {});

class ParamLayout {
 public:
  ParamLayout(const ModelConfig& m, int tp, int tp_rank, int pp, int stage,
              const std::vector<int>& stage_layers = {});
  // With v virtual stages (chunks) per pipeline stage, and the experts split over ep ranks
  // (this rank holds experts [ep_rank*E/ep, (ep_rank+1)*E/ep)).
  ParamLayout(const ModelConfig& m, int tp, int tp_rank, int pp, int stage, int v,
              const std::vector<int>& stage_layers, int ep = 1, int ep_rank = 0);

  const std::vector<ParamSpec>& params() const { return params_; }
  const ParamSpec& get(const std::string& name) const;
  const ParamSpec* find(const std::string& name) const;
  size_t total() const { return total_; }  // elements in the flat buffer
  // The stage's layers, one range per chunk; the flat buffer holds them in this order.
  const std::vector<StageRange>& chunks() const { return chunks_; }
  int virtual_stages() const { return int(chunks_.size()); }
  StageRange layers() const;  // the one range of a stage with one chunk (InternalError else)
  int num_layers() const;     // over all chunks
  // Index of global layer `layer` among this stage's layers (chunk order); InternalError when
  // the stage does not hold it.
  int local_layer(int layer) const;
  std::vector<int> layer_list() const;  // global indices of the stage's layers, chunk order
  // Flat [begin, end) of each of the stage's layers (a layer's tensors are contiguous), in
  // layer_list() order.
  std::vector<std::pair<size_t, size_t>> layer_ranges() const;
  const ModelConfig& model() const { return m_; }
  int stage() const { return stage_; }
  int stages() const { return pp_; }
  bool first_stage() const { return stage_ == 0; }
  bool last_stage() const { return stage_ == pp_ - 1; }
  int tp() const { return tp_; }
  int tp_rank() const { return tp_rank_; }
  int padded_vocab() const { return vpad_; }
  int vocab_local() const { return vpad_ / tp_; }
  int vocab_start() const { return tp_rank_ * (vpad_ / tp_); }
  int ep() const { return ep_; }
  int ep_rank() const { return ep_rank_; }
  int local_experts() const { return m_.moe.num_experts / ep_; }  // E / ep

  std::vector<ShardBlock> blocks(const ParamSpec& p) const;
  // Flat [begin, end) cut into maximal runs of expert tensors and of the others (their gradients
  // sum over different groups under expert parallelism); one run when the model has no experts.
  struct FlatRun {
    size_t lo, hi;
    bool expert;
  };
  std::vector<FlatRun> expert_runs(size_t begin, size_t end) const;
  // The canonical column parts of a QKVCols/GateUpCols tensor, each split evenly over TP
  // ({cols} for others).
  std::vector<int64_t> col_parts(const ParamSpec& p) const;

 private:
  void add(const std::string& name, int64_t rows, int64_t cols, int ndim, Shard shard, int layer);
  std::vector<ShardBlock> tp_blocks(const ParamSpec& p) const;  // blocks() before the ep split

  ModelConfig m_;
  int tp_, tp_rank_, pp_, stage_, vpad_, ep_, ep_rank_;
  std::vector<StageRange> chunks_;
  std::vector<ParamSpec> params_;
  size_t total_ = 0;
};

}  // namespace loom
