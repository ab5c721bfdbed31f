// loom generate: any checkpoint on any (dp, pp, tp) layout, batched prompts, a KV cache.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/decode_setup.h"
#include "cli/prompts.h"
#include "core/check.h"
#include "core/log.h"
#include "parallel/collective.h"
#include "serve/completion_text.h"
#include "serve/serve_loop.h"
#include "train/generate.h"

namespace loom::cli {

namespace {
using json = nlohmann::json;

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
    for (int32_t t : ids)
      if (t < 0 || t >= c.model.vocab_size)
        throw UserError(str("loom generate: prompt ", i + 1, " holds token id ", t,
                            ", which the model's ", c.model.vocab_size,
                            "-entry vocabulary (model.vocab_size) lacks: the checkpoint's "
                            "tokenizer does not match its model"));
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
  const DecodeCheckpoint ck = open_decode_checkpoint("generate", ckpt, a.overrides, world);
  const Config& c = ck.config;
  const tok::Tokenizer* tk = ck.tokenizer.get();
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
  const int per_dp = int((reqs.size() + size_t(p.dp) - 1) / size_t(p.dp));
  const int slots = std::max(1, std::min(batch, per_dp));
  Decoder d = make_decoder(ck, slots, use_cache);
  ParallelCtx* pc = d.pc.get();
  DecodeStage& stage = *d.stage;
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

  auto stop = [&](const GenSequence& s) {
    return serve::hits_stop(*tk, s, stops[size_t(s.req.id)]);
  };
  Generator gen(stage, *pc, sample_vocab(ck), stop, use_cache);
  gen.block_ids(undecodable_ids(ck));
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
    const std::string text =
        serve::cut_at_stop(tk->decode(ids.data(), ids.size()), stops[size_t(s.req.id)]);
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
