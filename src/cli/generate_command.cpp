// loom generate: any checkpoint on any (dp, pp, tp) layout, batched prompts, a KV cache.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "backend/cpu_threads.h"
#include "ckpt/checkpoint.h"
#include "cli/commands.h"
#include "cli/prompts.h"
#include "core/check.h"
#include "core/log.h"
#include "data_tools/tokenizer.h"
#include "parallel/collective.h"
#include "parallel/device_comms.h"
#ifdef LOOM_HAVE_NCCL
#include "parallel/nccl_comm.h"
#endif
#include "train/generate.h"

namespace loom::cli {

namespace {
using json = nlohmann::json;

int world_size() {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  return world;
}

// The checkpoint's config on the layout of the --set overrides: parallel.* (tp, pp, dp: by
// default one model replica per rank), device and train.dtype; anything else is refused.
Config generation_config(const std::string& dir, const std::vector<std::string>& overrides,
                         int world) {
  for (const std::string& o : overrides) {
    const std::string key = o.substr(0, o.find('='));
    if (key.rfind("parallel.", 0) != 0 && key != "device" && key != "train.dtype")
      throw UserError(str("loom generate: --set ", key,
                          " is not a layout key; generate takes "
                          "parallel.* (tp, pp, dp), device and train.dtype"));
  }
  Config c = checkpoint_config(dir);
  c.parallel = ParallelConfig{};
  c = parse_config(to_yaml(c), overrides, str("checkpoint ", dir, " with --set"));
  ParallelConfig& p = c.parallel;
  if (p.cp != 1)
    throw UserError(str("loom generate: parallel.cp=", p.cp,
                        " is refused: context parallelism "
                        "splits the positions of training sequences; use tp/pp/dp"));
  if (c.model.is_moe())
    throw UserError(
        "loom generate: the KV-cache decoder runs dense models; this checkpoint is a "
        "Mixture of Experts (model.moe)");
  if (p.dp == 0 && world % (p.tp * p.pp) == 0) p.dp = world / (p.tp * p.pp);
  // Training-only settings the checks would hold against the layout: one sequence per
  // micro-batch, one micro-batch per rank, one chunk per stage, no sequence parallelism.
  p.micro_batch_size = 1, p.virtual_stages = 1, p.sequence_parallel = false;
  if (c.device == "cpu") c.train.dtype = "fp32";  // the cpu backend computes in fp32
  c.train.global_batch_size = std::max(p.dp, 1);
  std::vector<std::string> errors = validate(c, world);
  if (!errors.empty()) {
    std::string all;
    for (const std::string& e : errors) all += (all.empty() ? "" : "\n") + e;
    throw UserError(all);
  }
  return c;
}

SampleOptions sample_options(const Args& a) {
  SampleOptions s;
  s.temperature = float(option_double(a, "--temperature", 1.0));
  s.top_k = option_int(a, "--top-k", 0);
  s.top_p = float(option_double(a, "--top-p", 1.0));
  s.seed = uint64_t(option_int(a, "--seed", 1));
  const std::string bad = sample_options_problem(s);
  if (!bad.empty()) throw UserError("loom generate: --" + bad);
  return s;
}

// What rank 0 decided (the tokenized requests and their stop strings) as JSON for every rank.
json requests_json(const Args& a, const Config& c, const tok::Tokenizer& tk) {
  PromptFile pf;
  if (a.options.count("--prompt"))
    pf.prompts.push_back(PromptLine{option(a, "--prompt", ""), -1, {}});
  else
    pf = read_prompts(option(a, "--prompts", ""));
  const int max_tokens = option_int(a, "--max-tokens", 64);
  if (max_tokens < 1)
    throw UserError(str("loom generate: --max-tokens ", max_tokens, " must be >= 1"));
  const std::string stop = option(a, "--stop", "");
  auto enc = tk.make_encoder();
  json out = json::array();
  for (size_t i = 0; i < pf.prompts.size(); ++i) {
    const PromptLine& p = pf.prompts[i];
    std::vector<int32_t> ids;
    enc->encode(p.text, ids);
    if (ids.empty()) ids.push_back(tk.eod());  // an empty prompt starts a new document
    const int n = p.max_tokens > 0 ? p.max_tokens : max_tokens;
    if (int(ids.size()) + n > c.model.seq_len)
      throw UserError(str("loom generate: prompt ", i + 1, " is ", ids.size(), " tokens and asks ",
                          "for ", n, " more; the model's context (model.seq_len) is ",
                          c.model.seq_len, " tokens: shorten the prompt or lower --max-tokens"));
    std::vector<std::string> stops = p.stop;
    if (!stop.empty()) stops.push_back(stop);
    out.push_back(json{{"text", p.text}, {"ids", ids}, {"max_tokens", n}, {"stop", stops}});
  }
  return json{{"json", pf.json}, {"requests", out}};
}

// The generated text up to the first stop string (npos: none).
size_t stop_at(const std::string& text, const std::vector<std::string>& stops) {
  size_t at = std::string::npos;
  for (const std::string& s : stops) at = std::min(at, text.find(s));
  return at;
}
}  // namespace

int cmd_generate(const Args& a, Phase& phase) {
  const int world = world_size();
  const std::string ckpt = option(a, "--checkpoint", "");
  if (ckpt.empty() || !a.operands.empty() ||
      a.options.count("--prompt") == a.options.count("--prompts"))
    throw UserError(
        "loom generate needs --checkpoint DIR and one of --prompt TEXT or --prompts "
        "FILE (see loom --help)");
  const SampleOptions sample = sample_options(a);
  const int batch = option_int(a, "--batch", 32);
  if (batch < 1) throw UserError(str("loom generate: --batch ", batch, " must be >= 1"));
  const bool use_cache = !a.options.count("--no-cache");
  std::string dir;
  Config c;
  std::unique_ptr<tok::Tokenizer> tk;
  collectively([&] {
    dir = resolve_checkpoint_dir(ckpt);
    c = generation_config(dir, a.overrides, world);
    verify_checkpoint(dir, c.model);
    tk = tok::make_tokenizer(c.tokenizer.type, c.tokenizer.vocab, c.tokenizer.merges);
  });
  // Rank 0 reads and tokenizes the prompts; every rank gets its decisions.
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string wire;
  collectively([&] {
    if (rank == 0) wire = requests_json(a, c, *tk).dump();
  });
  uint64_t len = wire.size();
  LOOM_MPI(MPI_Bcast(&len, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD));
  wire.resize(len);
  LOOM_MPI(MPI_Bcast(wire.data(), int(len), MPI_CHAR, 0, MPI_COMM_WORLD));
  const json in = json::parse(wire);
  std::vector<GenRequest> reqs;
  std::vector<std::vector<std::string>> stops;
  for (const json& r : in["requests"]) {
    GenRequest q;
    q.id = reqs.size();
    q.prompt = r["ids"].get<std::vector<int32_t>>();
    q.max_tokens = r["max_tokens"].get<int>();
    q.sample = sample;
    q.stop_token = tk->eod();
    reqs.push_back(q);
    stops.push_back(r["stop"].get<std::vector<std::string>>());
  }

  const ParallelConfig& p = c.parallel;
  auto pc = make_parallel_ctx(Grid(p.dp, p.pp, p.tp, p.order));
  set_log_prefix(str("[loom r", pc->rank, " ", pc->grid.describe(pc->rank), "] "), pc->rank == 0);
  configure_cpu_threads(default_num_threads(pc->local_size));
  std::unique_ptr<Backend> be;
  collectively([&] {
    int gpu = 0;
#ifdef LOOM_HAVE_NCCL
    if (c.device == "cuda")
      gpu = gpus_for_ranks(*pc, visible_gpu_ids(),
                           device_comm_kind() == DeviceCommKind::Host)[size_t(pc->rank)];
#endif
    be = make_backend(c.device, c.train.dtype, gpu);
  });
  if (be->device() == Device::CUDA) attach_device_comms(*pc, *be);
  const ParamLayout layout(c.model, p.tp, pc->coord.tp, p.pp, pc->coord.pp, p.stage_layers);
  const int per_dp = int((reqs.size() + size_t(p.dp) - 1) / size_t(p.dp));
  const int slots = std::max(1, std::min(batch, per_dp));
  const int rows = use_cache ? std::max(slots, c.model.seq_len) : slots * c.model.seq_len;
  std::vector<float> host(layout.total());
  collectively([&] { read_checkpoint_tensors(dir, layout, host.data(), nullptr, nullptr); });
  DecodeStage stage(c.model, layout, *pc, *be, slots, rows);
  stage.set_params(host.data());
  host = {};
  // Messages go to stderr: stdout holds only the generated text.
  if (pc->rank == 0)
    std::fprintf(stderr,
                 "loom generate: %zu prompts on dp=%d pp=%d tp=%d, %d sequences at a time per "
                 "replica, KV cache %s\n",
                 reqs.size(), p.dp, p.pp, p.tp, slots,
                 use_cache
                     ? str(double(stage.cache_bytes()) / double(1 << 20), " MiB per rank").c_str()
                     : "off");
  phase = Phase::Running;

  const int sample_vocab = std::min(tk->vocab_size(), c.model.vocab_size);
  auto stop = [&](const GenSequence& s) {
    const std::vector<std::string>& st = stops[size_t(s.req.id)];
    return !st.empty() && stop_at(tk->decode(s.out.data(), s.out.size()), st) != std::string::npos;
  };
  Generator gen(stage, *pc, sample_vocab, stop, use_cache);
  const std::vector<GenSequence> done = generate_all(gen, *pc, reqs);
  if (pc->rank != 0) return 0;
  std::fprintf(stderr,
               "loom generate: prefill %lld tokens in %.3f s (%.1f tokens/s), decode %lld tokens "
               "in %.3f s (%.1f tokens/s) on the replica of rank 0\n",
               (long long)gen.prefill_tokens, gen.prefill_s,
               gen.prefill_s > 0 ? double(gen.prefill_tokens) / gen.prefill_s : 0.0,
               (long long)gen.decode_tokens, gen.decode_s,
               gen.decode_s > 0 ? double(gen.decode_tokens) / gen.decode_s : 0.0);
  for (const GenSequence& s : done) {
    std::vector<int32_t> ids = s.out;
    if (!ids.empty() && ids.back() == s.req.stop_token) ids.pop_back();
    std::string text = tk->decode(ids.data(), ids.size());
    text = text.substr(0, stop_at(text, stops[size_t(s.req.id)]));
    const std::string prompt = in["requests"][s.req.id]["text"].get<std::string>();
    if (a.options.count("--prompt")) {
      std::printf("%s%s\n", prompt.c_str(), text.c_str());
      continue;
    }
    const json line{{"prompt", prompt},
                    {"text", text},
                    {"finish", finish_name(s.finish)},
                    {"tokens", s.out.size()}};
    std::printf("%s\n", line.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
  }
  return 0;
}

}  // namespace loom::cli
