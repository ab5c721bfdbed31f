// The experiment configuration: YAML sections as plain structs with their defaults.
// Parsing, --set overrides and validation live in config.cpp / validate.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace loom {

struct RunConfig {
  std::string name = "loom";
  std::string dir;  // "" -> runs/<name>
};

// Mixture of Experts (docs/moe.md): num_experts 0 is a dense model.
struct MoeConfig {
  int num_experts = 0;           // experts per MoE layer (every layer); 0: dense MLPs
  int top_k = 2;                 // experts per token
  double capacity_factor = 0.0;  // 0: dropless; > 0: ceil(f*T*k/E) assignments per expert and
                                 // sequence, the rest dropped
  double aux_loss_coef = 0.01;   // load-balancing loss (Switch/GShard form, per sequence)
  double z_loss_coef = 0.0;      // router z-loss
};

struct ModelConfig {
  std::string arch = "gpt2";  // gpt2 | llama (RMSNorm, RoPE, SwiGLU, grouped-query attention)
  int n_layer = 12;
  int n_head = 12;
  int n_kv_head = 0;  // key/value heads (llama); 0 -> n_head
  int d_model = 768;
  int ffn_hidden = 0;      // MLP hidden size; 0 -> 4*d_model (gpt2), llama_ffn(d_model) (llama)
  int vocab_size = 50257;  // the tokenizer's; padded internally to a multiple of 128*tp
  int seq_len = 1024;
  int max_positions = 0;        // rows of wpe (gpt2); 0 -> seq_len
  double rope_theta = 10000.0;  // RoPE base (llama)
  double norm_eps = 1e-5;       // RMSNorm epsilon (llama); gpt2's LayerNorm uses 1e-5
  bool tie_embeddings = true;   // when absent from the file: true for gpt2, false for llama
  double dropout = 0.0;
  MoeConfig moe;

  bool llama() const { return arch == "llama"; }
  bool is_moe() const { return moe.num_experts > 0; }
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int head_dim() const { return n_head > 0 ? d_model / n_head : 0; }
  int ffn() const {
    return ffn_hidden > 0 ? ffn_hidden : llama() ? llama_ffn(d_model) : 4 * d_model;
  }
  // Llama's default SwiGLU width: 2/3 of 4*d_model, rounded up to a multiple of 256.
  static int llama_ffn(int d_model) { return (8 * d_model / 3 + 255) / 256 * 256; }
  int positions() const { return max_positions > 0 ? max_positions : seq_len; }
  int padded_vocab(int tp) const {
    int m = 128 * tp;
    return (vocab_size + m - 1) / m * m;
  }
};

struct ParallelConfig {
  int tp = 1;
  int pp = 1;
  int dp = 0;  // 0 -> world / (tp * pp * cp)
  int micro_batch_size = 1;
  std::string schedule = "1f1b";  // 1f1b | gpipe
  std::string order = "tp-dp-pp"; // innermost axis first
  std::vector<int> stage_layers;  // optional uneven split: layers per stage, sums to n_layer
  int virtual_stages = 1;         // model chunks per pipeline rank (interleaved 1F1B when > 1)
  double comm_timeout = 600;      // seconds a blocking collective/recv may wait before the
                                  // watchdog names it and aborts the job; 0 disables
  bool strict_topology = false;   // a TP group spanning nodes: false warns, true is an error
  bool overlap = false;           // start DP reductions, ZeRO-3 gathers and pipeline receives
                                  // early and wait where needed (docs/overlap.md)
  bool sequence_parallel = false;  // with tp > 1: norms and residuals on N/tp token rows per TP
                                   // rank, all-gather/reduce-scatter (docs/sequence-parallel.md)
  int cp = 1;  // context parallel: ranks splitting each sequence, ring attention
               // (docs/context-parallel.md)
  int ep = 1;  // expert parallel: ranks splitting the experts (Mixture of Experts)
};

struct TrainConfig {
  int global_batch_size = 8;  // sequences per optimizer step
  int steps = 10;
  uint64_t seed = 1234;
  std::string init_from;  // canonical .h5 weights, optional
  double grad_clip = 1.0; // 0 disables clipping
  int log_interval = 1;
  int eval_interval = 0;  // 0 -> no eval during training
  int eval_iters = 10;
  std::string recompute = "none"; // none | selective | full
  std::string dtype = "fp32";     // fp32 | bf16 | fp16
  // Loss scaling: auto (dynamic for fp16, none otherwise) | dynamic | none | a positive
  // number (static). Dynamic starts at initial_loss_scale, halves on overflow (the step is
  // skipped) and doubles after loss_scale_window clean steps.
  std::string loss_scale = "auto";
  double initial_loss_scale = 65536.0;
  int loss_scale_window = 2000;
  // Capture the step in a CUDA graph after the first step and replay it (one GPU: device cuda,
  // one rank, a fixed loss scale; the log's time breakdown then has no forward/backward split).
  bool cuda_graph = false;
};

struct OptimizerConfig {
  double lr = 6e-4;
  double min_lr = 0.0;
  int warmup_steps = 0;
  int decay_steps = 0;  // 0 -> train.steps
  std::string schedule = "cosine";  // cosine | linear | constant
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  int zero_stage = 0;
};

struct DataSource {
  std::string prefix;  // PREFIX of PREFIX.bin / PREFIX.idx
  double weight = 1.0;
};

struct DataConfig {
  std::vector<DataSource> train;
  std::vector<DataSource> valid;
  bool shuffle = true;
  std::string split;  // e.g. "969,30,1": train/valid/test split of the train prefixes
};

struct TokenizerConfig {
  std::string type = "bytes";  // bytes | gpt2
  std::string vocab;           // vocab.json or encoder.json (gpt2)
  std::string merges;          // merges.txt or vocab.bpe (gpt2)
};

struct CheckpointConfig {
  std::string dir;  // "" -> checkpoints/<run.name>
  int save_interval = 0;
  int keep_last = 0;  // 0 keeps all
  std::string resume = "none";  // auto | none | PATH
  bool async = false;           // write saves on a background thread (docs/checkpoints.md)
};

struct LogConfig {
  double peak_flops = 0.0;  // per device, for MFU; 0 -> built-in table / measured
  bool tensorboard = false;
  bool timers = true;  // per-step time breakdown
};

struct Config {
  RunConfig run;
  ModelConfig model;
  ParallelConfig parallel;
  TrainConfig train;
  OptimizerConfig optimizer;
  DataConfig data;
  TokenizerConfig tokenizer;
  CheckpointConfig checkpoint;
  LogConfig log;
  std::string device = "cpu";  // cpu | cuda
  std::string source;          // the file it was read from (for messages)

  std::string run_dir() const { return run.dir.empty() ? "runs/" + run.name : run.dir; }
  std::string checkpoint_dir() const {
    return checkpoint.dir.empty() ? "checkpoints/" + run.name : checkpoint.dir;
  }
};

// Reads a YAML file, applies "a.b=v" overrides in order, converts to a Config. Throws UserError
// naming the file, the key and the fix (unknown keys get a did-you-mean; wrong types name the
// expected type). Does not validate values: call validate().
Config load_config(const std::string& path, const std::vector<std::string>& overrides);
// Same from YAML text (tests, embedded defaults); `source` names it in messages.
Config parse_config(const std::string& yaml_text, const std::vector<std::string>& overrides,
                    const std::string& source);

// Every problem with the values, one line each (empty: valid). world_size <= 0 skips the checks
// that need it (dp*pp*tp == world). Files are not opened here.
std::vector<std::string> validate(const Config& cfg, int world_size);

// The resolved config as YAML text (for the start-up banner, metrics and checkpoints).
std::string to_yaml(const Config& cfg);

}  // namespace loom
