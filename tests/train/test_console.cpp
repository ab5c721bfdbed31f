// Console formatting (units, ETA, step line, banner, grid table, summary) and the metrics line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "train/console.h"
#include "train/metrics.h"

namespace loom {
namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(Console, Durations) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(42.4), "42s");
  EXPECT_EQ(format_duration(59.6), "1m00s");
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(3720), "1h02m");
  EXPECT_EQ(format_duration(2 * 86400 + 3 * 3600 + 59), "2d03h");
  EXPECT_EQ(format_duration(-1), "?");
}

TEST(Console, CountsBytesPercentMs) {
  EXPECT_EQ(format_count(950), "950");
  EXPECT_EQ(format_count(12345), "12.3k");
  EXPECT_EQ(format_count(1234567), "1.23M");
  EXPECT_EQ(format_count(999700), "1.00M");  // no "1000k"
  EXPECT_EQ(format_count(124439808), "124M");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(151.0 * (1 << 20)), "151 MiB");
  EXPECT_EQ(format_bytes(1.25 * (1 << 30)), "1.25 GiB");
  EXPECT_EQ(format_percent(0.0123), "1.23%");
  EXPECT_EQ(format_percent(0.456), "45.6%");
  EXPECT_EQ(format_percent(0.0004), "0.040%");
  EXPECT_EQ(format_percent(-1), "n/a");
  EXPECT_EQ(format_ms(1067.85), "1068 ms");
  EXPECT_EQ(format_ms(42.26), "42.3 ms");
  EXPECT_EQ(format_ms(12345), "12.3 s");
  EXPECT_EQ(format_flops(156.2e9), "156 GFLOP/s");
  EXPECT_EQ(format_flops(1e11), "100 GFLOP/s");
  EXPECT_EQ(format_flops(989e12), "989 TFLOP/s");
  EXPECT_EQ(format_flops(19.5e12), "19.5 TFLOP/s");
}

TEST(Console, StepLine) {
  StepLine s;
  s.step = 10;
  s.total_steps = 200;
  s.loss = 9.75430575;
  s.lr = 5e-4;
  s.grad_norm = 2.2732;
  s.tokens_per_s = 479.47;
  s.mfu = 0.0123;
  s.step_ms = 1067.85;
  s.mem_peak_bytes = 131.0 * (1 << 20);
  s.eta_s = 203;
  EXPECT_EQ(format_step_line(s),
            "step  10/200 | loss 9.7543 | lr 5.00e-04 | grad norm 2.273 | 479 tok/s | MFU 1.23% | "
            "1068 ms/step | mem 131 MiB (r0 peak) | ETA 3m23s");
  s.step = 200;  // the last step has no ETA
  s.mfu = -1;    // unknown peak
  EXPECT_EQ(format_step_line(s),
            "step 200/200 | loss 9.7543 | lr 5.00e-04 | grad norm 2.273 | 479 tok/s | MFU n/a | "
            "1068 ms/step | mem 131 MiB (r0 peak)");
}

TEST(Console, EtaFromRecentMeanStepTime) {
  Progress p;
  p.start(1, 0.0);
  EXPECT_DOUBLE_EQ(p.on_log(1, 2000.0, 10.9), 2000.0);   // step 1 alone (warm-up)
  EXPECT_DOUBLE_EQ(p.on_log(10, 11000.0, 9.7), 1100.0);  // 11 s over 10 steps
  EXPECT_DOUBLE_EQ(p.on_log(20, 16000.0, 7.5), 16000.0 / 20);
  // Three intervals back: (10, 11 s) -> (40, 26 s): the slow start has dropped out.
  EXPECT_DOUBLE_EQ(p.on_log(30, 21000.0, 6.0), 19000.0 / 29);
  EXPECT_DOUBLE_EQ(p.on_log(40, 26000.0, 6.5), 15000.0 / 30);
  EXPECT_DOUBLE_EQ(Progress::eta_s(40, 100, 500.0), 30.0);
  EXPECT_DOUBLE_EQ(Progress::eta_s(100, 100, 500.0), 0.0);
  EXPECT_LT(Progress::eta_s(10, 100, 0.0), 0);  // unknown
  EXPECT_EQ(p.logged(), 5);
  EXPECT_DOUBLE_EQ(p.final_loss(), 6.5);
  EXPECT_DOUBLE_EQ(p.min_loss(), 6.0);
  EXPECT_EQ(p.min_loss_step(), 30);
}

TEST(Console, EtaAfterResume) {
  Progress p;
  p.start(101, 5000.0);  // resumed after step 100
  EXPECT_DOUBLE_EQ(p.on_log(101, 6000.0, 3.0), 1000.0);
  EXPECT_DOUBLE_EQ(p.on_log(110, 15000.0, 3.0), 1000.0);
  EXPECT_EQ(p.first_step(), 101);
}

TEST(Console, ConfigBanner) {
  Config cfg;
  cfg.run.name = "quickstart";
  cfg.source = "configs/quickstart.yaml";
  cfg.model.n_layer = 4;
  cfg.model.n_head = 4;
  cfg.model.d_model = 256;
  cfg.model.seq_len = 64;
  cfg.parallel.dp = 2;
  cfg.parallel.pp = 2;
  cfg.parallel.tp = 2;
  cfg.parallel.micro_batch_size = 2;
  cfg.train.global_batch_size = 8;
  cfg.train.steps = 30;
  cfg.train.log_interval = 10;
  cfg.optimizer.lr = 1e-3;
  cfg.optimizer.min_lr = 1e-4;
  cfg.optimizer.warmup_steps = 20;
  cfg.optimizer.zero_stage = 1;
  const RunLayout run(cfg, GridDims{2, 2, 2}, Coord{0, 0, 0});
  auto lines = format_config_banner(cfg, run, 29400000, 177e6, "runs/quickstart/config.yaml");
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0],
            "run 'quickstart' in runs/quickstart | config configs/quickstart.yaml, "
            "resolved in full: runs/quickstart/config.yaml");
  EXPECT_TRUE(has(lines[1],
                  "model GPT-2 4 layers x 4 heads x d_model 256, mlp 1024, vocab 50257 "
                  "(padded to 50432)"));
  EXPECT_TRUE(has(lines[1], "29.4M parameters | 177M training FLOPs/token"));
  EXPECT_TRUE(has(lines[2], "dp2 x pp2 x tp2 = 8 ranks | 1f1b schedule, 2 micro-batches of 2"));
  EXPECT_TRUE(has(lines[2], "ZeRO stage 1"));
  Config llama = cfg;  // the family, its kv heads and its SwiGLU width
  llama.model.arch = "llama";
  llama.model.n_kv_head = 2;
  const RunLayout lrun(llama, GridDims{2, 2, 2}, Coord{0, 0, 0});
  const auto llines = format_config_banner(llama, lrun, 1, 1, "c.yaml");
  EXPECT_TRUE(has(llines[1], "model Llama 4 layers x 4 heads (2 kv heads) x d_model 256, mlp 768,"))
      << llines[1];
  EXPECT_TRUE(has(lines[3], "30 steps x 8 sequences x 64 tokens = 512 tokens/step (15.4k in all)"));
  EXPECT_TRUE(has(lines[4], "lr 1.00e-03 cosine to 1.00e-04, 20 warm-up steps"));
}

TEST(Console, Summary) {
  RunSummary s;
  s.first_step = 1;
  s.last_step = 30;
  s.tokens = 30 * 512;
  s.wall_s = 34.2;
  s.step_s = 32.0;
  s.mfu = 0.0123;
  s.logged = 4;
  s.final_loss = 6.12;
  s.min_loss = 6.1;
  s.min_loss_step = 20;
  s.peak_mem_bytes = 151.0 * (1 << 20);
  s.metrics_path = "runs/q/metrics.jsonl";
  s.run_dir = "runs/q";
  auto lines = format_summary(s);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            "done: 30 steps (1-30), 15.4k tokens | 32s in steps, 34s since start | "
            "mean 480 tok/s, MFU 1.23% over the steps");
  EXPECT_EQ(lines[1],
            "loss: final 6.1200 | lowest logged 6.1000 (step 20) | peak memory 151 MiB "
            "(largest rank)");
  EXPECT_EQ(lines[2], "metrics: runs/q/metrics.jsonl | plot: scripts/plot_metrics.py runs/q");
  s.first_step = 31;  // resumed at the end: nothing to do
  lines = format_summary(s);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(has(lines[0], "no steps to run"));
}

TEST(Metrics, TrainLineHasExactlyTheContractKeysInOrder) {
  TrainMetrics m;
  m.step = 3;
  m.loss = 10.5;
  m.lr = 1e-4;
  m.grad_norm = 1.5;
  m.tokens = 1536;
  m.step_ms = 812.5;
  m.tokens_per_s = 630.2;
  m.mfu = 0.012;
  m.mem_peak_bytes = 123456789;
  const std::vector<std::string> keys = {"step",         "loss",   "lr",
                                         "grad_norm",    "tokens", "step_ms",
                                         "tokens_per_s", "mfu",    "mem_peak_bytes"};
  auto j = train_metrics_line(m);
  std::vector<std::string> got;
  for (auto it = j.begin(); it != j.end(); ++it) got.push_back(it.key());
  EXPECT_EQ(got, keys);
  EXPECT_EQ(j.dump(),
            "{\"step\":3,\"loss\":10.5,\"lr\":0.0001,\"grad_norm\":1.5,\"tokens\":1536,"
            "\"step_ms\":812.5,\"tokens_per_s\":630.2,\"mfu\":0.012,\"mem_peak_bytes\":123456789}");
  m.mfu = -1;  // unknown peak: null, never a made-up number
  EXPECT_TRUE(train_metrics_line(m)["mfu"].is_null());
  // With log.timers the breakdown follows the contract keys as one "time" object, in order.
  m.time_ms = {{"forward", 300.0}, {"backward", 500.0}, {"other", 12.5}};
  auto t = train_metrics_line(m);
  got.clear();
  for (auto it = t.begin(); it != t.end(); ++it) got.push_back(it.key());
  std::vector<std::string> with_time = keys;
  with_time.push_back("time");
  EXPECT_EQ(got, with_time);
  EXPECT_EQ(t["time"].dump(), "{\"forward\":300.0,\"backward\":500.0,\"other\":12.5}");
}

// A resumed run rewinds metrics.jsonl to its checkpoint's step: an attempt killed after its
// last checkpoint logged steps 4-5 (and half a line), which the resumed run logs again.
TEST(Metrics, ResumeRewindsTheFileToTheCheckpointStep) {
  const std::string dir = ::testing::TempDir() + "/loom_metrics_rewind";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/metrics.jsonl";
  {
    std::ofstream f(path);
    f << "{\"step\":1,\"loss\":3.5}\n{\"step\":2,\"loss\":3.25}\n"
      << "{\"step\":3,\"val_loss\":3.0}\n{\"event\":\"resume\",\"step\":3}\n"
      << "{\"step\":4,\"loss\":3.0}\n{\"note\":\"no step\"}\n{\"step\":5,\"loss\":2.5}\n"
      << "{\"step\":6,\"lo";  // the kill cut this line short
  }
  {
    MetricsWriter w(dir, 3);
    nlohmann::ordered_json j;
    j["step"] = 4;
    j["loss"] = 2.875;
    w.write(j);
  }
  std::ifstream f(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(f, l);) lines.push_back(l);
  const std::vector<std::string> want = {
      "{\"step\":1,\"loss\":3.5}",     "{\"step\":2,\"loss\":3.25}",
      "{\"step\":3,\"val_loss\":3.0}", "{\"event\":\"resume\",\"step\":3}",
      "{\"note\":\"no step\"}",        "{\"step\":4,\"loss\":2.875}"};
  EXPECT_EQ(lines, want);
  EXPECT_EQ(rewind_metrics(path, 4), 0);  // nothing after step 4: the file is left alone
  EXPECT_EQ(rewind_metrics(dir + "/missing.jsonl", 1), 0);
  MetricsWriter fresh(dir, 0);  // a fresh run starts the file over
  EXPECT_EQ(std::filesystem::file_size(path), 0u);
}

}  // namespace
}  // namespace loom
