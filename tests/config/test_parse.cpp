// Tests for YAML -> Config: types, unknown keys, --set overrides, files, syntax errors, to_yaml.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/did_you_mean.h"
#include "core/check.h"

using loom::Config;
using loom::parse_config;

namespace {

// The UserError message parse_config throws, or "" when it does not throw.
std::string parse_error(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  try {
    parse_config(yaml, sets, "config.yaml");
  } catch (const loom::UserError& e) {
    return e.what();
  }
  return "";
}

Config parse(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  return parse_config(yaml, sets, "config.yaml");
}

std::string temp_file(const std::string& name, const std::string& text) {
  const std::string path = std::string(LOOM_BINARY_DIR) + "/tests/" + name;
  std::ofstream(path) << text;
  return path;
}

// Every field, one by one, so a to_yaml that drops or mangles any key fails here.
void expect_same(const Config& a, const Config& b) {
  EXPECT_EQ(a.run.name, b.run.name);
  EXPECT_EQ(a.run.dir, b.run.dir);
  EXPECT_EQ(a.model.arch, b.model.arch);
  EXPECT_EQ(a.model.n_layer, b.model.n_layer);
  EXPECT_EQ(a.model.n_head, b.model.n_head);
  EXPECT_EQ(a.model.n_kv_head, b.model.n_kv_head);
  EXPECT_EQ(a.model.d_model, b.model.d_model);
  EXPECT_EQ(a.model.ffn_hidden, b.model.ffn_hidden);
  EXPECT_EQ(a.model.vocab_size, b.model.vocab_size);
  EXPECT_EQ(a.model.seq_len, b.model.seq_len);
  EXPECT_EQ(a.model.max_positions, b.model.max_positions);
  EXPECT_EQ(a.model.rope_theta, b.model.rope_theta);
  EXPECT_EQ(a.model.norm_eps, b.model.norm_eps);
  EXPECT_EQ(a.model.tie_embeddings, b.model.tie_embeddings);
  EXPECT_EQ(a.model.dropout, b.model.dropout);
  EXPECT_EQ(a.parallel.tp, b.parallel.tp);
  EXPECT_EQ(a.parallel.pp, b.parallel.pp);
  EXPECT_EQ(a.parallel.dp, b.parallel.dp);
  EXPECT_EQ(a.parallel.micro_batch_size, b.parallel.micro_batch_size);
  EXPECT_EQ(a.parallel.schedule, b.parallel.schedule);
  EXPECT_EQ(a.parallel.order, b.parallel.order);
  EXPECT_EQ(a.parallel.stage_layers, b.parallel.stage_layers);
  EXPECT_EQ(a.train.global_batch_size, b.train.global_batch_size);
  EXPECT_EQ(a.train.steps, b.train.steps);
  EXPECT_EQ(a.train.seed, b.train.seed);
  EXPECT_EQ(a.train.init_from, b.train.init_from);
  EXPECT_EQ(a.train.grad_clip, b.train.grad_clip);
  EXPECT_EQ(a.train.log_interval, b.train.log_interval);
  EXPECT_EQ(a.train.eval_interval, b.train.eval_interval);
  EXPECT_EQ(a.train.eval_iters, b.train.eval_iters);
  EXPECT_EQ(a.train.recompute, b.train.recompute);
  EXPECT_EQ(a.train.dtype, b.train.dtype);
  EXPECT_EQ(a.optimizer.lr, b.optimizer.lr);
  EXPECT_EQ(a.optimizer.min_lr, b.optimizer.min_lr);
  EXPECT_EQ(a.optimizer.warmup_steps, b.optimizer.warmup_steps);
  EXPECT_EQ(a.optimizer.decay_steps, b.optimizer.decay_steps);
  EXPECT_EQ(a.optimizer.schedule, b.optimizer.schedule);
  EXPECT_EQ(a.optimizer.beta1, b.optimizer.beta1);
  EXPECT_EQ(a.optimizer.beta2, b.optimizer.beta2);
  EXPECT_EQ(a.optimizer.eps, b.optimizer.eps);
  EXPECT_EQ(a.optimizer.weight_decay, b.optimizer.weight_decay);
  EXPECT_EQ(a.optimizer.zero_stage, b.optimizer.zero_stage);
  for (auto pair : {std::make_pair(&a.data.train, &b.data.train),
                    std::make_pair(&a.data.valid, &b.data.valid)}) {
    ASSERT_EQ(pair.first->size(), pair.second->size());
    for (size_t i = 0; i < pair.first->size(); ++i) {
      EXPECT_EQ((*pair.first)[i].prefix, (*pair.second)[i].prefix);
      EXPECT_EQ((*pair.first)[i].weight, (*pair.second)[i].weight);
    }
  }
  EXPECT_EQ(a.data.shuffle, b.data.shuffle);
  EXPECT_EQ(a.data.split, b.data.split);
  EXPECT_EQ(a.tokenizer.type, b.tokenizer.type);
  EXPECT_EQ(a.tokenizer.vocab, b.tokenizer.vocab);
  EXPECT_EQ(a.tokenizer.merges, b.tokenizer.merges);
  EXPECT_EQ(a.checkpoint.dir, b.checkpoint.dir);
  EXPECT_EQ(a.checkpoint.save_interval, b.checkpoint.save_interval);
  EXPECT_EQ(a.checkpoint.keep_last, b.checkpoint.keep_last);
  EXPECT_EQ(a.checkpoint.resume, b.checkpoint.resume);
  EXPECT_EQ(a.checkpoint.async, b.checkpoint.async);
  EXPECT_EQ(a.log.peak_flops, b.log.peak_flops);
  EXPECT_EQ(a.log.tensorboard, b.log.tensorboard);
  EXPECT_EQ(a.log.timers, b.log.timers);
  EXPECT_EQ(a.device, b.device);
}

}  // namespace

TEST(ConfigDidYouMean, EditDistance) {
  EXPECT_EQ(loom::edit_distance("kitten", "sitting"), 3);
  EXPECT_EQ(loom::edit_distance("modle", "model"), 1);  // a transposition is one edit
  EXPECT_EQ(loom::edit_distance("N_Layer", "n_layer"), 0);
  EXPECT_EQ(loom::edit_distance("", "abc"), 3);
  EXPECT_EQ(loom::closest_match("n_layers", {"n_head", "n_layer"}), "n_layer");
  EXPECT_EQ(loom::closest_match("colour", {"n_head", "n_layer"}), "");
}

TEST(ConfigParse, EmptyTextGivesDefaults) {
  expect_same(parse(""), Config{});
  expect_same(parse("# only a comment\n"), Config{});
  EXPECT_EQ(parse("").source, "config.yaml");
}

TEST(ConfigParse, EmptyFileGivesDefaults) {
  const std::string path = temp_file("config_empty.yaml", "");
  const Config c = loom::load_config(path, {});
  expect_same(c, Config{});
  EXPECT_EQ(c.source, path);
}

TEST(ConfigParse, ReadsEveryType) {
  const Config c = parse(
      "run: {name: r1, dir: out/r1}\n"
      "model:\n  n_layer: 3\n  dropout: 0.25\n  tie_embeddings: false\n"
      "parallel:\n  stage_layers: [1, 2]\n  schedule: gpipe\n"
      "train:\n  seed: 18446744073709551615\n  steps: 1e3\n  grad_clip: 2\n"
      "optimizer:\n  lr: 3.0e-4\n"
      "data:\n  shuffle: False\n  split: '969,30,1'\n"
      "checkpoint: {async: true}\n"
      "log: {tensorboard: true}\n"
      "device: cuda\n");
  EXPECT_EQ(c.run.name, "r1");
  EXPECT_EQ(c.run.dir, "out/r1");
  EXPECT_EQ(c.model.n_layer, 3);
  EXPECT_EQ(c.model.n_head, 12);  // untouched keys keep their defaults
  EXPECT_EQ(c.model.dropout, 0.25);
  EXPECT_FALSE(c.model.tie_embeddings);
  EXPECT_EQ(c.parallel.stage_layers, (std::vector<int>{1, 2}));
  EXPECT_EQ(c.parallel.schedule, "gpipe");
  EXPECT_EQ(c.train.seed, 18446744073709551615ULL);
  EXPECT_EQ(c.train.steps, 1000);  // a whole-number float is exact, so it is accepted
  EXPECT_EQ(c.train.grad_clip, 2.0);
  EXPECT_EQ(c.optimizer.lr, 3.0e-4);
  EXPECT_FALSE(c.data.shuffle);
  EXPECT_EQ(c.data.split, "969,30,1");
  EXPECT_TRUE(c.checkpoint.async);
  EXPECT_FALSE(Config{}.checkpoint.async);  // synchronous saves unless asked
  EXPECT_TRUE(c.log.tensorboard);
  EXPECT_EQ(c.device, "cuda");
}

TEST(ConfigParse, DataSourceForms) {
  Config c = parse("data:\n  train:\n    - {prefix: a, weight: 2}\n    - prefix: b\n");
  ASSERT_EQ(c.data.train.size(), 2u);
  EXPECT_EQ(c.data.train[0].prefix, "a");
  EXPECT_EQ(c.data.train[0].weight, 2.0);
  EXPECT_EQ(c.data.train[1].prefix, "b");
  EXPECT_EQ(c.data.train[1].weight, 1.0);
  c = parse("data:\n  train: [x, y]\n  valid: v\n");
  ASSERT_EQ(c.data.train.size(), 2u);
  EXPECT_EQ(c.data.train[1].prefix, "y");
  EXPECT_EQ(c.data.train[1].weight, 1.0);
  ASSERT_EQ(c.data.valid.size(), 1u);
  EXPECT_EQ(c.data.valid[0].prefix, "v");
  EXPECT_EQ(parse_error("data:\n  train:\n    - {weight: 2}\n"),
            "config.yaml: data.train[0]: missing 'prefix' (the PREFIX of PREFIX.bin/PREFIX.idx)");
  EXPECT_EQ(parse_error("data:\n  train:\n    - {prefx: a}\n"),
            "config.yaml: unknown key 'data.train[0].prefx'; did you mean 'data.train[0].prefix'?");
  EXPECT_EQ(parse_error("data:\n  train: [{prefix: a, weight: heavy}]\n"),
            "config.yaml: data.train[0].weight: expected a number, got 'heavy'");
}

TEST(ConfigParse, UnknownTopLevelKeyWithSuggestion) {
  EXPECT_EQ(parse_error("modle:\n  n_layer: 2\n"),
            "config.yaml: unknown key 'modle'; did you mean 'model'?");
  EXPECT_EQ(parse_error("n_layer: 2\n"),
            "config.yaml: unknown key 'n_layer'; did you mean 'model.n_layer'?");
}

TEST(ConfigParse, UnknownTopLevelKeyWithoutSuggestion) {
  const std::string e = parse_error("zzzzzz: 1\n");
  EXPECT_NE(e.find("config.yaml: unknown key 'zzzzzz'; valid top-level keys: run, model,"),
            std::string::npos)
      << e;
  EXPECT_EQ(e.find("did you mean"), std::string::npos) << e;
}

TEST(ConfigParse, UnknownNestedKeyWithSuggestion) {
  EXPECT_EQ(parse_error("model:\n  n_layers: 2\n"),
            "config.yaml: unknown key 'model.n_layers'; did you mean 'model.n_layer'?");
  EXPECT_EQ(parse_error("model:\n  steps: 2\n"),
            "config.yaml: unknown key 'model.steps'; did you mean 'train.steps'?");
}

TEST(ConfigParse, UnknownNestedKeyWithoutSuggestion) {
  const std::string e = parse_error("model:\n  colour: red\n");
  EXPECT_NE(
      e.find("config.yaml: unknown key 'model.colour'; valid keys in 'model': arch, n_layer, "),
      std::string::npos)
      << e;
  EXPECT_EQ(e.find("did you mean"), std::string::npos) << e;
}

TEST(ConfigParse, WrongTypes) {
  EXPECT_EQ(parse_error("model:\n  n_head: four\n"),
            "config.yaml: model.n_head: expected an integer, got 'four'");
  EXPECT_EQ(parse_error("model:\n  n_head: 4.5\n"),
            "config.yaml: model.n_head: expected an integer, got '4.5'");
  EXPECT_EQ(parse_error("model:\n  n_head: 3000000000\n"),
            "config.yaml: model.n_head: expected an integer between -2147483648 and 2147483647, "
            "got '3000000000'");
  EXPECT_EQ(parse_error("model:\n  n_head: [1]\n"),
            "config.yaml: model.n_head: expected an integer, got a list");
  EXPECT_EQ(parse_error("model:\n  n_head:\n"),
            "config.yaml: model.n_head: expected an integer, got nothing");
  EXPECT_EQ(parse_error("data:\n  shuffle: yes\n"),
            "config.yaml: data.shuffle: expected true or false, got 'yes'");
  EXPECT_EQ(parse_error("checkpoint:\n  async: 1\n"),
            "config.yaml: checkpoint.async: expected true or false, got '1'");
  EXPECT_EQ(parse_error("optimizer:\n  lr: fast\n"),
            "config.yaml: optimizer.lr: expected a number, got 'fast'");
  EXPECT_EQ(parse_error("optimizer:\n  lr: .nan\n"),
            "config.yaml: optimizer.lr: expected a number, got '.nan'");
  EXPECT_EQ(parse_error("run:\n  name: [a, b]\n"),
            "config.yaml: run.name: expected a string, got a list");
  EXPECT_EQ(parse_error("parallel:\n  stage_layers: [1, 2.5]\n"),
            "config.yaml: parallel.stage_layers[1]: expected an integer, got '2.5'");
  EXPECT_EQ(parse_error("model: 3\n"), "config.yaml: model: expected a mapping of keys, got '3'");
  EXPECT_NE(parse_error("- a\n- b\n").find("config.yaml: expected a mapping of sections"),
            std::string::npos);
}

TEST(ConfigParse, Seed) {
  EXPECT_EQ(parse("train: {seed: 0}").train.seed, 0u);
  EXPECT_EQ(parse_error("train: {seed: -1}"),
            "config.yaml: train.seed: expected an integer between 0 and 18446744073709551615, "
            "got '-1'");
  EXPECT_NE(parse_error("train: {seed: 18446744073709551616}").find("train.seed"),
            std::string::npos);
}

TEST(ConfigParse, DuplicateKey) {
  EXPECT_EQ(parse_error("model:\n  n_layer: 2\n  n_layer: 3\n"),
            "config.yaml: model.n_layer: duplicate key");
}

TEST(ConfigOverrides, Scalar) {
  EXPECT_EQ(parse("train: {steps: 7}", {"train.steps=5"}).train.steps, 5);
  EXPECT_EQ(parse("", {"device=cuda"}).device, "cuda");
  EXPECT_EQ(parse("", {"train.seed=99", "train.seed=100"}).train.seed, 100u);  // in order
  EXPECT_EQ(parse("run: {dir: x}", {"run.dir="}).run.dir, "");
}

TEST(ConfigOverrides, NestedAndMissingSection) {
  const Config c =
      parse("model:\n  n_layer: 2\n  n_head: 2\n", {"model.n_layer=6", "optimizer.lr=0.5"});
  EXPECT_EQ(c.model.n_layer, 6);
  EXPECT_EQ(c.model.n_head, 2);    // siblings survive
  EXPECT_EQ(c.optimizer.lr, 0.5);  // the section did not exist in the file
  EXPECT_EQ(parse("model:\n", {"model.n_layer=5"}).model.n_layer, 5);  // an empty section
  // A section of the wrong kind is reported, not silently replaced.
  EXPECT_EQ(parse_error("model: 3\n", {"model.n_layer=5"}),
            "config.yaml: model: expected a mapping of keys, got '3'");
  EXPECT_NE(parse_error("- a\n", {"model.n_layer=5"}).find("expected a mapping of sections"),
            std::string::npos);
}

TEST(ConfigOverrides, Sequences) {
  Config c = parse("data: {train: [old]}", {"data.train=[a,b]"});
  ASSERT_EQ(c.data.train.size(), 2u);
  EXPECT_EQ(c.data.train[0].prefix, "a");
  EXPECT_EQ(c.data.train[1].prefix, "b");
  c = parse("", {"data.train=[{prefix: p, weight: 3}]", "parallel.stage_layers=[3,1]"});
  ASSERT_EQ(c.data.train.size(), 1u);
  EXPECT_EQ(c.data.train[0].weight, 3.0);
  EXPECT_EQ(c.parallel.stage_layers, (std::vector<int>{3, 1}));
  c = parse("", {"data.valid=data/corpus/kjv_valid"});
  ASSERT_EQ(c.data.valid.size(), 1u);
  EXPECT_EQ(c.data.valid[0].prefix, "data/corpus/kjv_valid");
}

TEST(ConfigOverrides, UnknownPath) {
  EXPECT_EQ(parse_error("", {"model.n_layers=2"}),
            "--set: unknown key 'model.n_layers'; did you mean 'model.n_layer'?");
  EXPECT_EQ(parse_error("", {"modle.n_layer=2"}),
            "--set: unknown key 'modle'; did you mean 'model'?");
  EXPECT_NE(parse_error("", {"model.n_layer.x=2"}).find("--set: unknown key 'model.n_layer.x'"),
            std::string::npos);
  EXPECT_NE(parse_error("", {"device.x=2"}).find("--set: unknown key 'device.x'"),
            std::string::npos);
}

TEST(ConfigOverrides, Malformed) {
  const std::string e = parse_error("", {"train.steps"});
  EXPECT_NE(e.find("--set 'train.steps': expected KEY=VALUE"), std::string::npos) << e;
  EXPECT_NE(parse_error("", {"=3"}).find("malformed key"), std::string::npos);
  EXPECT_NE(parse_error("", {"model..n_layer=3"}).find("malformed key"), std::string::npos);
  EXPECT_NE(parse_error("", {"data.train=[a"}).find("--set data.train: cannot parse '[a'"),
            std::string::npos);
}

TEST(ConfigOverrides, WrongTypeNamesSet) {
  EXPECT_EQ(parse_error("", {"model.n_head=four"}),
            "--set: model.n_head: expected an integer, got 'four'");
  EXPECT_EQ(parse_error("model: {n_head: four}", {"model.n_layer=2"}),
            "config.yaml: model.n_head: expected an integer, got 'four'");
}

TEST(ConfigLoad, MissingFile) {
  try {
    loom::load_config("/nonexistent/dir/exp.yaml", {});
    FAIL() << "no error";
  } catch (const loom::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("'/nonexistent/dir/exp.yaml'"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(loom::load_config(LOOM_BINARY_DIR, {}), loom::UserError);  // a directory
}

TEST(ConfigLoad, SyntaxError) {
  const std::regex where("^config\\.yaml:[0-9]+:[0-9]+: YAML syntax error: .+");
  const std::string e1 = parse_error("model:\n  n_layer: [1, 2\n");
  EXPECT_TRUE(std::regex_search(e1, where)) << e1;
  const std::string e2 = parse_error("model:\n  n_layer: 2\n bad: : :\n   - x\n");
  EXPECT_TRUE(std::regex_search(e2, where)) << e2;
  const std::string path = temp_file("config_bad.yaml", "model:\n  n_layer: 2\n   n_head: 3\n");
  try {
    loom::load_config(path, {});
    FAIL() << "no error";
  } catch (const loom::UserError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ":3:", 0), 0u) << e.what();
  }
}

TEST(ConfigToYaml, RoundTripDefaults) {
  const Config a;
  const Config b = parse(loom::to_yaml(a));
  expect_same(a, b);
  EXPECT_EQ(loom::to_yaml(a), loom::to_yaml(b));
}

TEST(ConfigToYaml, RoundTripEveryField) {
  Config a;
  a.run = {"exp-1.a", "runs/x y"};
  // A llama that ties its embeddings: the file must say so (the family's default is untied).
  a.model = {"llama", 3, 6, 2, 96, 80, 300, 48, 64, 5e5, 1.0 / 3e5, true, 1.0 / 3.0, {}};
  a.parallel = {2, 3, 0, 5, "gpipe", "dp-tp-pp", {1, 1, 1}};
  a.train = {40, 77, 18446744073709551615ULL, "init: #weird.h5", 0.1, 3, 4, 5, "full", "bf16"};
  a.optimizer = {6e-4, 1e-8, 11, 12, "linear", 0.8, 0.999, 1e-12, 0.0, 2};
  a.data.train = {{"a/b", 0.7}, {"true", 2}};
  a.data.valid = {{"", 1e-300}};
  a.data.shuffle = false;
  a.data.split = "1,0,0";
  a.tokenizer = {"gpt2", "- v.json", "'m'.bpe"};
  a.checkpoint = {"ck", 9, 8, "null", true};
  a.log = {3.12e14, true, false};
  a.device = "cuda";
  const std::string text = loom::to_yaml(a);
  const Config b = parse(text);
  expect_same(a, b);
  EXPECT_EQ(text, loom::to_yaml(b)) << text;
  EXPECT_NE(text.find("prefix: \"true\""), std::string::npos) << text;  // not read as a bool
}
