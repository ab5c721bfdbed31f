// One measured training step per layout for the plan's agreement tests.
#include "tests/plan/plan_test_util.h"

#include <unistd.h>

#include <cstdio>

#include "parallel/parallel_ctx.h"
#include "tests/parallel/equivalence_util.h"
#include "train/trainer.h"

namespace loom::test {

Measured measure_step(const Config& cfg, MPI_Comm world) {
  Grid grid(cfg.parallel.dp, cfg.parallel.pp, cfg.parallel.tp, cfg.parallel.order, cfg.parallel.cp);
  auto pc = make_parallel_ctx(grid, world);
  Trainer trainer(cfg, *pc, synthetic_samples(cfg.model.vocab_size, cfg.model.seq_len));
  trainer.init_weights();
  Measured out;
  // dp: the gradient replicas' communicator (dp x cp ranks with context parallelism) and, with
  // expert parallelism (the Trainer made its groups), the expert replicas'.
  const bool ep = pc->ep > 1;
  const uint64_t tp0 = pc->tp.bytes_sent(), pp0 = pc->pp.bytes_sent();
  const uint64_t dp0 = pc->replicas().bytes_sent(), cp0 = pc->cp.bytes_sent();
  const uint64_t edp0 = ep ? pc->edp.bytes_sent() : 0, ep0 = ep ? pc->ep_group.bytes_sent() : 0;
  const uint64_t em0 = pc->embed.bytes_sent(), w0 = pc->world.bytes_sent();
  trainer.train_step(1);
  out.tp = pc->tp.bytes_sent() - tp0;
  out.pp = pc->pp.bytes_sent() - pp0;
  out.dp = pc->replicas().bytes_sent() - dp0 + (ep ? pc->edp.bytes_sent() - edp0 : 0);
  out.ep = ep ? pc->ep_group.bytes_sent() - ep0 : 0;
  out.cp = pc->cp.bytes_sent() - cp0;
  out.embed = pc->embed.bytes_sent() - em0;
  out.world = pc->world.bytes_sent() - w0;
  out.memory = trainer.optimizer().memory();
  out.activation_bytes = trainer.stage().activation_bytes();
  out.stage = pc->coord.pp;
  out.dp_rank = pc->replica_index();
  out.microbatches =
      cfg.train.global_batch_size / (cfg.parallel.dp * cfg.parallel.micro_batch_size);
  return out;
}

plan::ClusterSpec cpu_cluster() {
  return plan::parse_cluster(
      "name: test-cpu\ndevice: cpu\nnodes: 1\ngpus_per_node: 8\ngpu_memory_gib: 10\n"
      "peak_flops: 56e9\nintra_node: {bandwidth_gbps: 40, latency_us: 1}\n"
      "inter_node: {bandwidth_gbps: 10, latency_us: 50}\n",
      "test-cpu.yaml");
}

plan::Candidate candidate_of(const Config& cfg) {
  plan::Candidate c;
  c.dp = cfg.parallel.dp, c.pp = cfg.parallel.pp, c.tp = cfg.parallel.tp, c.cp = cfg.parallel.cp;
  c.v = cfg.parallel.virtual_stages;
  c.micro_batch = cfg.parallel.micro_batch_size;
  c.zero = cfg.optimizer.zero_stage;
  c.recompute = parse_recompute(cfg.train.recompute);
  c.sp = cfg.parallel.sequence_parallel;
  c.ep = cfg.parallel.ep;
  return c;
}

std::string layout_name(const Config& cfg) {
  char b[160];
  std::snprintf(b, sizeof b, "dp%d pp%d v%d tp%d cp%d mb%d zero%d %s %s%s", cfg.parallel.dp,
                cfg.parallel.pp, cfg.parallel.virtual_stages, cfg.parallel.tp, cfg.parallel.cp,
                cfg.parallel.micro_batch_size, cfg.optimizer.zero_stage,
                cfg.parallel.schedule.c_str(), cfg.train.recompute.c_str(),
                cfg.model.tie_embeddings ? "" : " untied");
  return b;
}

uint64_t current_rss_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  const int got = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return got == 2 ? uint64_t(resident) * uint64_t(sysconf(_SC_PAGESIZE)) : 0;
}

}  // namespace loom::test
