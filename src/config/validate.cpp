// validate(): each problem with a Config's values as one line naming the key, the value and a fix.
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "config/checker.h"
#include "config/config.h"
#include "config/did_you_mean.h"
#include "config/fields.h"
#include "core/check.h"

namespace loom {

namespace {

// The highest ZeRO stage implemented. Raise it when stage 1/2 land: the "not supported yet"
// message below follows it, and it is the only place that knows.
constexpr int kMaxSupportedZeroStage = 3;

using namespace validation;

// Checks the 3D layout; returns the data-parallel size (0 when it cannot be known yet).
long long check_parallel(const Config& cfg, int world, Checker& c) {
  const ParallelConfig& p = cfg.parallel;
  const ModelConfig& m = cfg.model;
  c.at_least("parallel.tp", p.tp, 1, "set the tensor-parallel size, e.g. 1");
  c.at_least("parallel.pp", p.pp, 1, "set the pipeline-parallel size, e.g. 1");
  c.at_least("parallel.dp", p.dp, 0,
             "set the data-parallel size, or 0 / omit it for world/(tp*pp)");
  c.at_least("parallel.micro_batch_size", p.micro_batch_size, 1,
             "set the sequences per micro-batch, e.g. 1");
  c.one_of("parallel.schedule", p.schedule, {"1f1b", "gpipe"});
  const std::vector<std::string> axes = split(p.order, '-');
  bool perm = axes.size() == 3 || axes.size() == 4;
  for (const char* axis : {"tp", "dp", "pp", "cp"}) {
    int n = 0;
    for (const auto& a : axes) n += a == axis;
    perm = perm && (n == 1 || (n == 0 && axes.size() == 3 && std::string(axis) == "cp"));
  }
  if (!perm)
    c.add(str("parallel.order: ", quoted(p.order),
              " must name tp, dp and pp once each (cp too, or it follows tp), innermost first, ",
              "joined by '-'; e.g. tp-dp-pp or tp-cp-dp-pp"));
  if (p.tp < 1 || p.pp < 1 || p.dp < 0) return 0;

  const long long tp = p.tp, pp = p.pp, cp = p.cp >= 1 ? p.cp : 1, model_ranks = tp * pp * cp;
  // The ranks of one model replica, as the messages name them.
  const std::string replica =
      cp > 1 ? str("tp=", tp, " x pp=", pp, " x cp=", cp) : str("tp=", tp, " x pp=", pp);
  long long dp = p.dp;
  if (world > 0 && dp > 0 && model_ranks * dp != world) {
    const long long want = model_ranks * dp;
    std::string fix = world % model_ranks == 0
                          ? str("set dp=", world / model_ranks, " or launch ", want, " ranks")
                          : str("launch ", want, " ranks, or choose ",
                                cp > 1 ? "tp x pp x cp" : "tp x pp", " dividing ", world);
    c.add(str("parallel: ", replica, " x dp=", dp, " = ", model_ranks * dp,
              " ranks but the job has ", world, "; ", fix));
  }
  if (world > 0 && dp == 0) {
    if (world % model_ranks != 0)
      c.add(str("parallel: ", replica, " = ", model_ranks,
                " ranks per model replica does not divide the job's ", world,
                " ranks (dp is automatic); launch a multiple of ", model_ranks, " ranks or choose ",
                cp > 1 ? "tp x pp x cp" : "tp x pp", " dividing ", world));
    else
      dp = world / model_ranks;
  }

  // Tensor parallelism splits whole query and kv heads, the hidden size and the MLP width. Kv
  // heads are never replicated: tp > n_kv_head is refused.
  if (m.n_head > 0 && m.d_model > 0 && m.kv_heads() > 0 && m.ffn() > 0) {
    const int kv = m.kv_heads(), F = m.ffn();
    std::vector<std::string> ok;
    for (int t = 1; t <= m.n_head; ++t)
      if (m.n_head % t == 0 && m.d_model % t == 0 && kv % t == 0 && F % t == 0)
        ok.push_back(std::to_string(t));
    const std::string fix = "; choose tp from " + join(ok);
    if (m.n_head % p.tp != 0)
      c.add(str("parallel.tp: ", p.tp, " does not divide model.n_head=", m.n_head, fix));
    else if (kv % p.tp != 0)
      c.add(str("parallel.tp: ", p.tp, " does not divide the ", kv,
                " kv heads (model.n_kv_head); each rank needs whole kv heads of its own (they are ",
                "split, never replicated)", fix));
    if (m.d_model % p.tp != 0)
      c.add(str("parallel.tp: ", p.tp, " does not divide model.d_model=", m.d_model, fix));
    if (F % p.tp != 0)
      c.add(str("parallel.tp: ", p.tp, " does not divide the MLP width ", F,
                m.ffn_hidden > 0 ? " (model.ffn_hidden)" : " (the default model.ffn_hidden)", fix));
  }
  if (p.sequence_parallel && p.tp == 1)
    c.add(
        "parallel.sequence_parallel needs parallel.tp > 1; set parallel.tp > 1 or "
        "parallel.sequence_parallel: false");
  else if (p.sequence_parallel && p.micro_batch_size >= 1 && m.seq_len >= 1 &&
           (long long)p.micro_batch_size * m.seq_len / cp % p.tp != 0)
    c.add(str("parallel.sequence_parallel: micro_batch_size=", p.micro_batch_size,
              " x model.seq_len=", m.seq_len, cp > 1 ? str(" / cp=", cp) : std::string(), " = ",
              (long long)p.micro_batch_size * m.seq_len / cp,
              " token rows do not split over tp=", p.tp, "; choose micro_batch_size x seq_len",
              cp > 1 ? " / cp" : "", " divisible by tp"));
  if (m.n_layer > 0 && m.n_layer < p.pp)
    c.add(str("parallel.pp: ", p.pp, " is more than model.n_layer=", m.n_layer,
              " (each pipeline stage needs a layer); set pp <= ", m.n_layer));
  const std::vector<int>& sl = p.stage_layers;
  if (!sl.empty()) {
    long long sum = 0;
    bool all_positive = true;
    for (int n : sl) {
      sum += n;
      all_positive = all_positive && n >= 1;
    }
    if (static_cast<long long>(sl.size()) != pp)
      c.add(str("parallel.stage_layers: ", list_text(sl), " has ", sl.size(),
                " entries but parallel.pp=", pp, "; give one layer count per stage"));
    if (!all_positive)
      c.add(str("parallel.stage_layers: ", list_text(sl),
                " has a stage with fewer than 1 layer; give every stage >= 1 layer"));
    if (sum != m.n_layer)
      c.add(str("parallel.stage_layers: ", list_text(sl), " sums to ", sum, " but model.n_layer=",
                m.n_layer, "; make the counts sum to ", m.n_layer));
  }
  return dp;
}

void check_train(const Config& cfg, long long dp, Checker& c) {
  const TrainConfig& t = cfg.train;
  const int mbs = cfg.parallel.micro_batch_size;
  c.at_least("train.global_batch_size", t.global_batch_size, 1,
             "set the sequences per optimizer step, e.g. 8");
  if (t.global_batch_size >= 1 && mbs >= 1) {
    if (dp >= 1 && t.global_batch_size % (dp * mbs) != 0)
      c.add(str("train.global_batch_size: ", t.global_batch_size, " is not divisible by dp=", dp,
                " x micro_batch_size=", mbs, " = ", dp * mbs, "; set it to ",
                nearest_multiples(t.global_batch_size, dp * mbs)));
    else if (dp < 1 && t.global_batch_size % mbs != 0)
      c.add(str("train.global_batch_size: ", t.global_batch_size,
                " is not divisible by parallel.micro_batch_size=", mbs, "; set it to ",
                nearest_multiples(t.global_batch_size, mbs)));
  }
  c.at_least("train.steps", t.steps, 1, "set the number of optimizer steps, e.g. 100");
  c.at_least("train.log_interval", t.log_interval, 1, "log every N steps, e.g. 1");
  c.at_least("train.eval_interval", t.eval_interval, 0, "set 0 to disable eval, or every N steps");
  c.at_least("train.eval_iters", t.eval_iters, 1, "set the batches per evaluation, e.g. 10");
  c.non_negative("train.grad_clip", t.grad_clip, "set 0 to disable clipping, e.g. 1.0");
  c.one_of("train.recompute", t.recompute, {"none", "selective", "full"});
  if (c.one_of("train.dtype", t.dtype, {"fp32", "bf16", "fp16"}) && t.dtype != "fp32" &&
      cfg.device == "cpu")
    c.add(str("train.dtype: ", t.dtype,
              " needs device: cuda; set train.dtype: fp32 or device: cuda"));
  if (t.loss_scale != "auto" && t.loss_scale != "dynamic" && t.loss_scale != "none") {
    char* end = nullptr;
    const double v = std::strtod(t.loss_scale.c_str(), &end);
    if (end == t.loss_scale.c_str() || *end != '\0' || !(v > 0) || !std::isfinite(v))
      c.add(str("train.loss_scale: '", t.loss_scale,
                "' is not auto, dynamic, none or a positive number; e.g. auto"));
  }
  c.positive("train.initial_loss_scale", t.initial_loss_scale, "e.g. 65536");
  if (t.cuda_graph) {  // a captured step replays the same work with no host decision inside
    if (cfg.device != "cuda")
      c.add(str("train.cuda_graph: true needs device: cuda (device is ", cfg.device,
                "); set train.cuda_graph: false"));
    if (dp >= 1 && dp * cfg.parallel.tp * cfg.parallel.pp != 1)
      c.add(str("train.cuda_graph: true captures a single-GPU step, but the grid has ",
                dp * cfg.parallel.tp * cfg.parallel.pp,
                " ranks; run one rank or set train.cuda_graph: false"));
    if (t.loss_scale == "dynamic" || (t.loss_scale == "auto" && t.dtype == "fp16"))
      c.add(
          "train.cuda_graph: true with dynamic loss scaling (the host reads every step's "
          "overflow); use bf16, or a fixed train.loss_scale such as 1024");
  }
  c.at_least("train.loss_scale_window", t.loss_scale_window, 1, "clean steps before the scale doubles, e.g. 2000");
}

void check_optimizer(const OptimizerConfig& o, const std::string& dtype, Checker& c) {
  c.positive("optimizer.lr", o.lr, "set a positive peak learning rate, e.g. 6e-4");
  if (o.lr > 0 && !(o.min_lr >= 0 && o.min_lr <= o.lr))
    c.add(str("optimizer.min_lr: ", format_double(o.min_lr), " must be between 0 and optimizer.lr=",
              format_double(o.lr), "; set it to 0 or e.g. ", format_double(o.lr / 10)));
  c.at_least("optimizer.warmup_steps", o.warmup_steps, 0, "set 0 for no warmup");
  c.at_least("optimizer.decay_steps", o.decay_steps, 0, "set 0 to decay over train.steps");
  c.one_of("optimizer.schedule", o.schedule, {"cosine", "linear", "constant"});
  if (!(o.beta1 >= 0 && o.beta1 < 1))
    c.add(str("optimizer.beta1: ", format_double(o.beta1), " must be in [0, 1); e.g. 0.9"));
  if (!(o.beta2 >= 0 && o.beta2 < 1))
    c.add(str("optimizer.beta2: ", format_double(o.beta2), " must be in [0, 1); e.g. 0.95"));
  c.positive("optimizer.eps", o.eps, "e.g. 1e-8");
  c.non_negative("optimizer.weight_decay", o.weight_decay, "e.g. 0.1, or 0 to disable");
  if (o.zero_stage == 3 && dtype != "fp32")
    c.add(str("optimizer.zero_stage: 3 with train.dtype: ", dtype,
              " is not supported yet; use zero_stage 2 or train.dtype: fp32"));
  if (o.zero_stage < 0 || o.zero_stage > 3)
    c.add(str("optimizer.zero_stage: ", o.zero_stage, " is not valid; choose one of 0, 1, 2, 3"));
  else if (o.zero_stage > kMaxSupportedZeroStage)
    c.add(str("optimizer.zero_stage: ", o.zero_stage, " is not supported yet; set ",
              kMaxSupportedZeroStage));
}

void check_sources(const std::string& key, const std::vector<DataSource>& v, Checker& c) {
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = str(key, "[", i, "]");
    if (v[i].prefix.empty())
      c.add(at + ".prefix: '' is empty; set the PREFIX of PREFIX.bin/PREFIX.idx");
    if (!(v[i].weight > 0))
      c.add(str(at, ".weight: ", format_double(v[i].weight),
                " must be > 0; give every dataset a positive sampling weight, e.g. 1"));
  }
}

void check_data(const Config& cfg, Checker& c) {
  const DataConfig& d = cfg.data;
  if (d.train.empty())
    c.add("data.train: [] is empty; list at least one dataset prefix, e.g. "
          "data.train: [data/corpus/kjv_train] (made by loom-preprocess)");
  check_sources("data.train", d.train, c);
  check_sources("data.valid", d.valid, c);
  if (!d.split.empty()) {
    const std::vector<std::string> parts = split(d.split, ',');
    bool ok = parts.size() == 3;
    for (size_t i = 0; ok && i < parts.size(); ++i) {
      char* end = nullptr;
      const double v = std::strtod(parts[i].c_str(), &end);
      ok = !parts[i].empty() && *end == '\0' && v >= 0 && (i > 0 || v > 0);
    }
    if (!ok)
      c.add(str("data.split: ", quoted(d.split), " must be three non-negative numbers ",
                "train,valid,test with train > 0; e.g. 969,30,1"));
  }
}

void check_tokenizer(const Config& cfg, Checker& c) {
  const TokenizerConfig& t = cfg.tokenizer;
  const bool file_kind = t.type.rfind("tiktoken:", 0) == 0 || t.type.rfind("hf:", 0) == 0;
  if (file_kind) {  // the file itself is read (and checked) by the tokenizer
    if (t.type.find(':') + 1 == t.type.size())
      c.add(str("tokenizer.type: '", t.type, "' names no file; e.g. ", t.type,
                t.type[0] == 't' ? "data/tokenizer/cl100k_base.tiktoken"
                                 : "data/tokenizer/llama3/tokenizer.json"));
    if (!t.vocab.empty() || !t.merges.empty())
      c.add(str("tokenizer.vocab/merges are for tokenizer.type gpt2; ", t.type,
                " reads everything from its file: leave them empty"));
    return;
  }
  if (!c.one_of("tokenizer.type", t.type, {"bytes", "gpt2", "tiktoken:FILE", "hf:FILE"})) return;
  if (t.type == "gpt2") {
    if (t.vocab.empty())
      c.add("tokenizer.vocab: '' is empty but tokenizer.type is gpt2; set the encoder.json path, "
            "e.g. data/tokenizer/gpt2/encoder.json");
    if (t.merges.empty())
      c.add("tokenizer.merges: '' is empty but tokenizer.type is gpt2; set the vocab.bpe path, "
            "e.g. data/tokenizer/gpt2/vocab.bpe");
  } else if (cfg.model.vocab_size > 0 && cfg.model.vocab_size < 257) {
    c.add(str("model.vocab_size: ", cfg.model.vocab_size,
              " is too small for tokenizer.type bytes (256 bytes + end-of-document = 257 ids); "
              "set model.vocab_size to 257 or more"));
  }
}

void check_run(const Config& cfg, Checker& c) {
  const std::string& name = cfg.run.name;
  std::string safe = name;
  bool ok = !name.empty() && name != "." && name != "..";
  for (char& ch : safe) {
    const bool good = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                      (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
    if (!good) ch = '_';
    ok = ok && good;
  }
  if (name.empty())
    c.add("run.name: '' is empty; set a name of letters, digits, '.', '_' or '-', e.g. gpt2_small");
  else if (!ok)
    c.add(str("run.name: ", quoted(name),
              " may only use letters, digits, '.', '_' and '-' (it names directories); e.g. ",
              safe == "." || safe == ".." ? std::string("run1") : safe));
}

void check_checkpoint(const CheckpointConfig& k, Checker& c) {
  c.at_least("checkpoint.save_interval", k.save_interval, 0,
             "set 0 for no periodic checkpoints");
  c.at_least("checkpoint.keep_last", k.keep_last, 0, "set 0 to keep every checkpoint");
  if (k.resume.empty()) {
    c.add("checkpoint.resume: '' is empty; use auto, none or a checkpoint directory");
  } else if (k.resume != "auto" && k.resume != "none" && k.resume.find('/') == std::string::npos) {
    const std::string guess = closest_match(k.resume, {"auto", "none"});
    if (!guess.empty())
      c.add(str("checkpoint.resume: ", quoted(k.resume),
                " would be read as a checkpoint path; did you mean ", quoted(guess),
                "? (use auto, none or a path)"));
  }
}

#ifdef LOOM_HAVE_CUDA
constexpr bool kBuiltWithCuda = true;
#else
constexpr bool kBuiltWithCuda = false;
#endif

// Keys that parse but whose feature has not landed yet: rejected with one clear line each, in
// this one place, so enabling a feature means deleting its check here.
void check_not_yet_implemented(const Config& cfg, Checker& c) {
  if (cfg.train.eval_interval > 0 && cfg.data.valid.empty() && cfg.data.split.empty())
    c.add(str("train.eval_interval: ", cfg.train.eval_interval,
              " needs validation data; set data.valid or data.split, or eval_interval: 0"));
  if (cfg.device == "cuda" && cfg.model.n_head > 0 && cfg.model.d_model % cfg.model.n_head == 0) {
    const int hs = cfg.model.d_model / cfg.model.n_head;
    if (hs != 16 && hs != 32 && hs != 64 && hs != 128)
      c.add(str("model.d_model / model.n_head = ", hs, " (head size) is not supported by the cuda "
                "attention kernel; choose n_head so the head size is 16, 32, 64 or 128"));
  }
  if (cfg.device == "cuda" && !kBuiltWithCuda)
    c.add("device: cuda, but this loom was built without CUDA (LOOM_CUDA=OFF or no nvcc at "
          "build time); rebuild with ./scripts/build.sh -DLOOM_CUDA=ON, or use device: cpu");
}

}  // namespace

std::vector<std::string> validate(const Config& cfg, int world_size) {
  Checker c;
  check_run(cfg, c);
  check_model(cfg.model, c);
  const long long dp = check_parallel(cfg, world_size, c);
  check_train(cfg, dp, c);
  check_virtual_stages(cfg, dp, c);
  check_context_parallel(cfg, c);
  check_moe_layout(cfg, dp, c);
  check_optimizer(cfg.optimizer, cfg.train.dtype, c);
  check_data(cfg, c);
  check_tokenizer(cfg, c);
  check_checkpoint(cfg.checkpoint, c);
  c.non_negative("log.peak_flops", cfg.log.peak_flops, "set 0 to use the built-in table");
  c.non_negative("parallel.comm_timeout", cfg.parallel.comm_timeout,
                 "seconds, e.g. 600; 0 disables the watchdog");
  c.one_of("device", cfg.device, {"cpu", "cuda"});
  check_not_yet_implemented(cfg, c);
  return c.out;
}

}  // namespace loom
