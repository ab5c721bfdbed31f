// Tests for validate(): one test per rule; each message must name the key and the bad value.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/config.h"
#include "tests/config/validate_util.h"

using loom::Config;

using loom::test::base;
using loom::test::reports;

TEST(ConfigValidate, BaseIsValid) {
  EXPECT_TRUE(loom::validate(base(), 1).empty());
  EXPECT_TRUE(loom::validate(base(), 0).empty());  // world unknown
}

TEST(ConfigValidate, ModelSizesPositive) {
  for (auto field : {&loom::ModelConfig::n_layer, &loom::ModelConfig::n_head,
                     &loom::ModelConfig::d_model, &loom::ModelConfig::vocab_size,
                     &loom::ModelConfig::seq_len}) {
    Config c = base();
    c.model.*field = -3;
    EXPECT_FALSE(loom::validate(c, 1).empty());
  }
  Config c = base();
  c.model.n_layer = 0;
  EXPECT_TRUE(reports(c, 1, {"model.n_layer: 0 must be >= 1"}));
  c = base();
  c.model.n_head = -2;
  EXPECT_TRUE(reports(c, 1, {"model.n_head: -2 must be >= 1"}));
  c = base();
  c.model.d_model = 0;
  EXPECT_TRUE(reports(c, 1, {"model.d_model: 0 must be >= 1"}));
  c = base();
  c.model.vocab_size = -1;
  EXPECT_TRUE(reports(c, 1, {"model.vocab_size: -1 must be >= 1"}));
  c = base();
  c.model.seq_len = 0;
  EXPECT_TRUE(reports(c, 1, {"model.seq_len: 0 must be >= 1"}));
  c = base();
  c.model.max_positions = -5;
  EXPECT_TRUE(reports(c, 1, {"model.max_positions: -5 must be >= 0"}));
}

TEST(ConfigValidate, HeadsDivideDModel) {
  Config c = base();
  c.model.d_model = 66;
  EXPECT_TRUE(reports(c, 1, {"model.d_model: 66", "model.n_head=4", "64 or 68"}));
}

TEST(ConfigValidate, SeqLenWithinPositions) {
  Config c = base();
  c.model.max_positions = 16;
  EXPECT_TRUE(reports(c, 1, {"model.seq_len: 32", "max_positions=16", "set seq_len <= 16"}));
  c.model.max_positions = 32;
  EXPECT_TRUE(loom::validate(c, 1).empty());
}

TEST(ConfigValidate, Dropout) {
  Config c = base();
  c.model.dropout = 0.1;
  EXPECT_TRUE(reports(c, 1, {"model.dropout: 0.1 is not supported yet; set 0"}));
  c = base();
  c.model.tie_embeddings = false;
  EXPECT_TRUE(loom::validate(c, 1).empty());
}

TEST(ConfigValidate, ParallelSizes) {
  Config c = base();
  c.parallel.tp = 0;
  EXPECT_TRUE(reports(c, 1, {"parallel.tp: 0 must be >= 1"}));
  c = base();
  c.parallel.pp = -1;
  EXPECT_TRUE(reports(c, 1, {"parallel.pp: -1 must be >= 1"}));
  c = base();
  c.parallel.dp = -2;
  EXPECT_TRUE(reports(c, 1, {"parallel.dp: -2 must be >= 0"}));
  c = base();
  c.parallel.micro_batch_size = 0;
  EXPECT_TRUE(reports(c, 1, {"parallel.micro_batch_size: 0 must be >= 1"}));
}

TEST(ConfigValidate, WorldMismatch) {
  Config c = base();
  c.parallel.tp = 2;
  c.parallel.pp = 2;
  c.parallel.dp = 4;
  c.train.global_batch_size = 16;
  EXPECT_TRUE(reports(c, 8, {"parallel: tp=2 x pp=2 x dp=4 = 16 ranks but the job has 8; "
                             "set dp=2 or launch 16 ranks"}));
  EXPECT_TRUE(loom::validate(c, 16).empty());
  EXPECT_TRUE(loom::validate(c, 0).empty());  // unknown world: not checked
  c.parallel.dp = 1;
  EXPECT_TRUE(reports(c, 6, {"= 4 ranks but the job has 6", "launch 4 ranks"}));
}

TEST(ConfigValidate, AutoDpNeedsDivisibleWorld) {
  Config c = base();
  c.parallel.tp = 2;
  c.parallel.pp = 2;
  c.parallel.dp = 0;
  EXPECT_TRUE(reports(c, 6, {"parallel: tp=2 x pp=2 = 4", "job's 6 ranks"}));
  EXPECT_TRUE(loom::validate(c, 8).empty());
}

TEST(ConfigValidate, TensorParallelDividesHeads) {
  Config c = base();
  c.parallel.tp = 8;  // n_head 4, d_model 64: d_model splits 8 ways, the heads do not
  EXPECT_TRUE(
      reports(c, 8, {"parallel.tp: 8 does not divide model.n_head=4", "choose tp from 1, 2, 4"}));
  c.model.n_head = 12;
  c.model.d_model = 132;
  c.parallel.tp = 4;
  EXPECT_TRUE(loom::validate(c, 4).empty());
}

TEST(ConfigValidate, TensorParallelDividesDModel) {
  // d_model is a multiple of n_head, so tp | n_head implies tp | d_model (and 4*d_model): the
  // d_model line only ever comes with the n_head line.
  Config c = base();
  c.model.n_head = 3;
  c.model.d_model = 9;
  c.parallel.tp = 2;
  EXPECT_TRUE(
      reports(c, 2, {"parallel.tp: 2 does not divide model.d_model=9", "choose tp from 1, 3"}));
  EXPECT_TRUE(reports(c, 2, {"parallel.tp: 2 does not divide model.n_head=3"}));
}

TEST(ConfigValidate, PipelineNeedsLayers) {
  Config c = base();
  c.parallel.pp = 8;
  EXPECT_TRUE(reports(c, 8, {"parallel.pp: 8 is more than model.n_layer=4", "set pp <= 4"}));
}

TEST(ConfigValidate, StageLayers) {
  Config c = base();
  c.parallel.pp = 2;
  c.parallel.stage_layers = {3, 1};
  EXPECT_TRUE(loom::validate(c, 2).empty());
  c.parallel.stage_layers = {1, 1, 2};
  EXPECT_TRUE(reports(c, 2, {"parallel.stage_layers: [1, 1, 2] has 3 entries but parallel.pp=2"}));
  c.parallel.stage_layers = {4, 0};
  EXPECT_TRUE(reports(c, 2, {"parallel.stage_layers: [4, 0]", "fewer than 1 layer"}));
  c.parallel.stage_layers = {1, 2};
  EXPECT_TRUE(reports(c, 2, {"parallel.stage_layers: [1, 2] sums to 3 but model.n_layer=4"}));
}

TEST(ConfigValidate, GlobalBatchDivisible) {
  Config c = base();
  c.parallel.dp = 2;
  c.parallel.micro_batch_size = 2;
  c.train.global_batch_size = 10;
  EXPECT_TRUE(reports(c, 2, {"train.global_batch_size: 10", "dp=2 x micro_batch_size=2 = 4",
                             "set it to 8 or 12"}));
  c.parallel.dp = 0;  // auto from world 4: dp=4, unit 8
  EXPECT_TRUE(reports(c, 4, {"train.global_batch_size: 10", "dp=4", "set it to 8 or 16"}));
  c.train.global_batch_size = 3;
  EXPECT_TRUE(reports(c, 4, {"train.global_batch_size: 3", "set it to 8"}));
  c.train.global_batch_size = 0;
  EXPECT_TRUE(reports(c, 4, {"train.global_batch_size: 0 must be >= 1"}));
}

TEST(ConfigValidate, Schedule) {
  Config c = base();
  c.parallel.schedule = "1f1f";
  EXPECT_TRUE(reports(c, 1, {"parallel.schedule: '1f1f'", "1f1b, gpipe", "did you mean '1f1b'"}));
}

TEST(ConfigValidate, Order) {
  for (const char* bad : {"tp-pp", "tp-dp-dp", "tp,dp,pp", "tp-dp-pp-tp", ""}) {
    Config c = base();
    c.parallel.order = bad;
    EXPECT_TRUE(reports(c, 1, {std::string("parallel.order: '") + bad + "'", "tp-dp-pp"}));
  }
  Config c = base();
  c.parallel.order = "pp-tp-dp";
  EXPECT_TRUE(loom::validate(c, 1).empty());
}

TEST(ConfigValidate, TrainCounts) {
  Config c = base();
  c.train.steps = 0;
  EXPECT_TRUE(reports(c, 1, {"train.steps: 0 must be >= 1"}));
  c = base();
  c.train.log_interval = 0;
  EXPECT_TRUE(reports(c, 1, {"train.log_interval: 0 must be >= 1"}));
  c = base();
  c.train.eval_interval = -1;
  EXPECT_TRUE(reports(c, 1, {"train.eval_interval: -1 must be >= 0"}));
  c = base();
  c.train.eval_iters = 0;
  EXPECT_TRUE(reports(c, 1, {"train.eval_iters: 0 must be >= 1"}));
  c = base();
  c.train.grad_clip = -0.5;
  EXPECT_TRUE(reports(c, 1, {"train.grad_clip: -0.5 must be >= 0"}));
}

TEST(ConfigValidate, Recompute) {
  Config c = base();
  c.train.recompute = "selectve";
  EXPECT_TRUE(reports(c, 1, {"train.recompute: 'selectve'", "none, selective, full",
                             "did you mean 'selective'"}));
}

TEST(ConfigValidate, Dtype) {
  Config c = base();
  c.train.dtype = "fp64";
  EXPECT_TRUE(reports(c, 1, {"train.dtype: 'fp64'", "fp32, bf16, fp16"}));
  c.train.dtype = "bf16";
  EXPECT_TRUE(reports(c, 1, {"train.dtype: bf16 needs device: cuda"}));
  c.device = "cuda";
#ifdef LOOM_HAVE_CUDA
  EXPECT_TRUE(loom::validate(c, 1).empty());
#else
  EXPECT_TRUE(reports(c, 1, {"device: cuda, but this loom was built without CUDA", "LOOM_CUDA=ON"}));
#endif
}

TEST(ConfigValidate, LowPrecisionWithZero3) {
  Config c = base();
  c.device = "cuda";
  c.train.dtype = "bf16";
  c.optimizer.zero_stage = 3;
  // One line names it (builds without CUDA add a second line about the build).
  EXPECT_TRUE(reports(c, 1, {"optimizer.zero_stage: 3 with train.dtype: bf16", "not supported yet",
                             "zero_stage 2"}));
  c.train.dtype = "fp32";
  EXPECT_FALSE(reports(c, 1, {"zero_stage: 3 with"}));
}

TEST(ConfigValidate, CudaHeadSize) {
  Config c = base();
  c.device = "cuda";
  c.model.d_model = 96;
  c.model.n_head = 2;  // head size 48
  EXPECT_TRUE(reports(c, 1, {"model.d_model / model.n_head = 48", "16, 32, 64 or 128"}));
  c.device = "cpu";
  EXPECT_FALSE(reports(c, 1, {"head size"}));
}

TEST(ConfigValidate, LossScale) {
  Config c = base();
  for (const char* ok : {"auto", "dynamic", "none", "1024", "0.5"}) {
    c.train.loss_scale = ok;
    EXPECT_TRUE(loom::validate(c, 1).empty()) << ok;
  }
  c.train.loss_scale = "dynamc";
  EXPECT_TRUE(reports(c, 1, {"train.loss_scale: 'dynamc'", "auto, dynamic, none or a positive number"}));
  c.train.loss_scale = "-4";
  EXPECT_TRUE(reports(c, 1, {"train.loss_scale: '-4'"}));
  c.train.loss_scale = "auto";
  c.train.initial_loss_scale = 0;
  EXPECT_TRUE(reports(c, 1, {"train.initial_loss_scale: 0"}));
  c.train.initial_loss_scale = 8;
  c.train.loss_scale_window = 0;
  EXPECT_TRUE(reports(c, 1, {"train.loss_scale_window: 0 must be >= 1"}));
}

// Keys whose feature has not landed are rejected, one line each, naming the key and the fix.
TEST(ConfigValidate, NotYetImplemented) {
  Config c = base();
  c.train.eval_interval = 5;
  c.data.valid.clear();
  c.data.split.clear();
  EXPECT_TRUE(reports(c, 1, {"train.eval_interval: 5 needs validation data", "data.valid"}));
  c = base();
  c.log.tensorboard = true;  // accepted: event files beside metrics.jsonl
  EXPECT_TRUE(loom::validate(c, 1).empty());
}

TEST(ConfigValidate, Optimizer) {
  Config c = base();
  c.optimizer.lr = 0;
  EXPECT_TRUE(reports(c, 1, {"optimizer.lr: 0 must be > 0"}));
  c = base();
  c.optimizer.lr = 1e-3;
  c.optimizer.min_lr = 0.01;
  EXPECT_TRUE(reports(c, 1, {"optimizer.min_lr: 0.01", "optimizer.lr=0.001"}));
  c.optimizer.min_lr = -1e-5;
  EXPECT_TRUE(reports(c, 1, {"optimizer.min_lr: -1e-05"}));
  c = base();
  c.optimizer.warmup_steps = -1;
  EXPECT_TRUE(reports(c, 1, {"optimizer.warmup_steps: -1 must be >= 0"}));
  c = base();
  c.optimizer.decay_steps = -7;
  EXPECT_TRUE(reports(c, 1, {"optimizer.decay_steps: -7 must be >= 0"}));
  c = base();
  c.optimizer.schedule = "cosin";
  EXPECT_TRUE(reports(c, 1, {"optimizer.schedule: 'cosin'", "did you mean 'cosine'"}));
  c = base();
  c.optimizer.beta1 = 1.0;
  EXPECT_TRUE(reports(c, 1, {"optimizer.beta1: 1 must be in [0, 1)"}));
  c = base();
  c.optimizer.beta2 = -0.1;
  EXPECT_TRUE(reports(c, 1, {"optimizer.beta2: -0.1 must be in [0, 1)"}));
  c = base();
  c.optimizer.eps = 0;
  EXPECT_TRUE(reports(c, 1, {"optimizer.eps: 0 must be > 0"}));
  c = base();
  c.optimizer.weight_decay = -0.01;
  EXPECT_TRUE(reports(c, 1, {"optimizer.weight_decay: -0.01 must be >= 0"}));
}

TEST(ConfigValidate, ZeroStage) {
  Config c = base();
  for (int ok : {0, 1, 2, 3}) {
    c.optimizer.zero_stage = ok;
    EXPECT_TRUE(loom::validate(c, 1).empty()) << ok;
  }
  c.optimizer.zero_stage = 4;
  EXPECT_TRUE(reports(c, 1, {"optimizer.zero_stage: 4 is not valid", "0, 1, 2, 3"}));
}

TEST(ConfigValidate, DataSources) {
  Config c = base();
  c.data.train.clear();
  EXPECT_TRUE(reports(c, 1, {"data.train: [] is empty"}));
  c.data.train = {{"a", 1.0}, {"", 1.0}};
  EXPECT_TRUE(reports(c, 1, {"data.train[1].prefix: '' is empty"}));
  c.data.train = {{"a", 0.0}};
  EXPECT_TRUE(reports(c, 1, {"data.train[0].weight: 0 must be > 0"}));
  c = base();
  c.data.valid = {{"v", -2.0}};
  EXPECT_TRUE(reports(c, 1, {"data.valid[0].weight: -2 must be > 0"}));
  c.data.valid = {{"", 1.0}};
  EXPECT_TRUE(reports(c, 1, {"data.valid[0].prefix: '' is empty"}));
}

TEST(ConfigValidate, Split) {
  for (const char* bad : {"90,10", "0,1,1", "a,b,c", "1,-1,0", "1,,1", "1,2,3,4"}) {
    Config c = base();
    c.data.split = bad;
    EXPECT_TRUE(reports(c, 1, {std::string("data.split: '") + bad + "'", "969,30,1"}));
  }
  Config c = base();
  c.data.split = "98.5,1.5,0";
  EXPECT_TRUE(loom::validate(c, 1).empty());
}

TEST(ConfigValidate, Checkpoint) {
  Config c = base();
  c.checkpoint.save_interval = -1;
  EXPECT_TRUE(reports(c, 1, {"checkpoint.save_interval: -1 must be >= 0"}));
  c = base();
  c.checkpoint.keep_last = -3;
  EXPECT_TRUE(reports(c, 1, {"checkpoint.keep_last: -3 must be >= 0"}));
  c = base();
  c.checkpoint.resume = "";
  EXPECT_TRUE(reports(c, 1, {"checkpoint.resume: '' is empty", "auto, none"}));
  c.checkpoint.resume = "atuo";
  EXPECT_TRUE(reports(c, 1, {"checkpoint.resume: 'atuo'", "did you mean 'auto'"}));
  for (const char* ok : {"auto", "none", "checkpoints/x/step_0000010", "my_ckpt"}) {
    c.checkpoint.resume = ok;
    EXPECT_TRUE(loom::validate(c, 1).empty()) << ok;
  }
}

TEST(ConfigValidate, Device) {
  Config c = base();
  c.device = "gpu";
  EXPECT_TRUE(reports(c, 1, {"device: 'gpu'", "cpu, cuda"}));
  c.device = "cdua";
  EXPECT_TRUE(reports(c, 1, {"device: 'cdua'", "did you mean 'cuda'"}));
}

TEST(ConfigValidate, RunName) {
  Config c = base();
  c.run.name = "";
  EXPECT_TRUE(reports(c, 1, {"run.name: '' is empty"}));
  c.run.name = "my run/1";
  EXPECT_TRUE(reports(c, 1, {"run.name: 'my run/1'", "e.g. my_run_1"}));
  c.run.name = "..";
  EXPECT_TRUE(reports(c, 1, {"run.name: '..'"}));
  c.run.name = "gpt2-124M_v1.2";
  EXPECT_TRUE(loom::validate(c, 1).empty());
}

TEST(ConfigValidate, PeakFlops) {
  Config c = base();
  c.log.peak_flops = -1;
  EXPECT_TRUE(reports(c, 1, {"log.peak_flops: -1 must be >= 0"}));
}

TEST(ConfigValidate, ReportsEveryProblem) {
  Config c = base();
  c.model.dropout = 0.2;
  c.optimizer.zero_stage = 5;
  c.device = "tpu";
  EXPECT_EQ(loom::validate(c, 1).size(), 3u);
}
