// Checkpoint, layout and decoder set-up of loom generate and loom serve.
#include "cli/decode_setup.h"

#include <algorithm>

#include "backend/cpu_threads.h"
#include "ckpt/checkpoint.h"
#include "core/check.h"
#include "core/log.h"
#include "parallel/collective.h"
#include "parallel/device_comms.h"
#ifdef LOOM_HAVE_NCCL
#include "parallel/nccl_comm.h"
#endif

namespace loom::cli {

namespace {
// The checkpoint's config on the layout of the --set overrides: parallel.* (tp, pp, dp: by
// default one model replica per rank), device and train.dtype; anything else is refused.
Config decode_config(const std::string& command, const std::string& dir,
                     const std::vector<std::string>& overrides, int world) {
  for (const std::string& o : overrides) {
    const std::string key = o.substr(0, o.find('='));
    if (key.rfind("parallel.", 0) != 0 && key != "device" && key != "train.dtype")
      throw UserError(str("loom ", command, ": --set ", key, " is not a layout key; ", command,
                          " takes parallel.* (tp, pp, dp), device and train.dtype"));
  }
  Config c = checkpoint_config(dir);
  c.parallel = ParallelConfig{};
  c = parse_config(to_yaml(c), overrides, str("checkpoint ", dir, " with --set"));
  ParallelConfig& p = c.parallel;
  if (p.cp != 1)
    throw UserError(str("loom ", command, ": parallel.cp=", p.cp,
                        " is refused: context parallelism "
                        "splits the positions of training sequences; use tp/pp/dp"));
  if (c.model.is_moe())
    throw UserError(str("loom ", command,
                        ": the KV-cache decoder runs dense models; this checkpoint is a "
                        "Mixture of Experts (model.moe)"));
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
}  // namespace

DecodeCheckpoint open_decode_checkpoint(const std::string& command, const std::string& ckpt,
                                        const std::vector<std::string>& overrides, int world) {
  DecodeCheckpoint ck;
  collectively([&] {
    ck.dir = resolve_checkpoint_dir(ckpt);
    ck.config = decode_config(command, ck.dir, overrides, world);
    verify_checkpoint(ck.dir, ck.config.model);
    const TokenizerConfig& t = ck.config.tokenizer;
    ck.tokenizer = tok::make_tokenizer(t.type, t.vocab, t.merges);
  });
  return ck;
}

Decoder make_decoder(const DecodeCheckpoint& ck, int slots, bool use_cache) {
  const Config& c = ck.config;
  const ParallelConfig& p = c.parallel;
  Decoder d;
  d.pc = make_parallel_ctx(Grid(p.dp, p.pp, p.tp, p.order));
  ParallelCtx& pc = *d.pc;
  set_log_prefix(str("[loom r", pc.rank, " ", pc.grid.describe(pc.rank), "] "), pc.rank == 0);
  configure_cpu_threads(default_num_threads(pc.local_size));
  collectively([&] {
    int gpu = 0;
#ifdef LOOM_HAVE_NCCL
    if (c.device == "cuda")
      gpu = gpus_for_ranks(pc, visible_gpu_ids(),
                           device_comm_kind() == DeviceCommKind::Host)[size_t(pc.rank)];
#endif
    d.backend = make_backend(c.device, c.train.dtype, gpu);
  });
  if (d.backend->device() == Device::CUDA) attach_device_comms(pc, *d.backend);
  const ParamLayout layout(c.model, p.tp, pc.coord.tp, p.pp, pc.coord.pp, p.stage_layers);
  const int rows = use_cache ? std::max(slots, c.model.seq_len) : slots * c.model.seq_len;
  std::vector<float> host(layout.total());
  collectively([&] { read_checkpoint_tensors(ck.dir, layout, host.data(), nullptr, nullptr); });
  d.stage = std::make_unique<DecodeStage>(c.model, layout, pc, *d.backend, slots, rows);
  d.stage->set_params(host.data());
  return d;
}

int sample_vocab(const DecodeCheckpoint& ck) {
  return std::min(ck.tokenizer->vocab_size(), ck.config.model.vocab_size);
}

std::vector<int32_t> undecodable_ids(const DecodeCheckpoint& ck) {
  std::vector<int32_t> out;
  for (int32_t id = 0; id < sample_vocab(ck); ++id) {
    try {
      ck.tokenizer->decode(&id, 1);
    } catch (const UserError&) {
      out.push_back(id);
    }
  }
  return out;
}

}  // namespace loom::cli
