// Every shipped configs/*.yaml parses and validates at its natural world size tp*pp*dp.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "config/config.h"
#include "config/fields.h"
#include "core/check.h"

namespace fs = std::filesystem;

TEST(ConfigFiles, ParseAndValidate) {
  std::set<std::string> seen;
  for (const auto& entry : fs::directory_iterator(fs::path(LOOM_SOURCE_DIR) / "configs")) {
    if (entry.path().extension() != ".yaml") continue;
    const std::string path = entry.path().string();
    seen.insert(entry.path().filename().string());
    loom::Config c;
    try {
      c = loom::load_config(path, {});
    } catch (const loom::UserError& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    const int world = c.parallel.tp * c.parallel.pp * std::max(c.parallel.dp, 1);
    for (const auto& line : loom::validate(c, world)) ADD_FAILURE() << path << ": " << line;
    const loom::Config again = loom::parse_config(loom::to_yaml(c), {}, path);
    EXPECT_EQ(loom::to_yaml(c), loom::to_yaml(again)) << path;
  }
  for (const char* name : {"tiny.yaml", "quickstart.yaml", "gpt2_124m.yaml", "bench_cpu.yaml"})
    EXPECT_TRUE(seen.count(name)) << "configs/" << name << " is missing";
}

TEST(ConfigFiles, Quickstart) {
  const loom::Config c =
      loom::load_config(std::string(LOOM_SOURCE_DIR) + "/configs/quickstart.yaml", {});
  EXPECT_EQ(c.parallel.tp * c.parallel.pp * c.parallel.dp, 8);
  EXPECT_EQ(c.model.vocab_size, 50257);
  EXPECT_EQ(c.tokenizer.type, "gpt2");
  ASSERT_EQ(c.data.train.size(), 1u);
  EXPECT_EQ(c.data.train[0].prefix, "data/corpus/kjv_train");
  ASSERT_EQ(c.data.valid.size(), 1u);
  EXPECT_EQ(c.data.valid[0].prefix, "data/corpus/kjv_valid");
  EXPECT_EQ(c.device, "cpu");
  EXPECT_FALSE(loom::validate(c, 4).empty());  // the layout needs 8 ranks
}

TEST(ConfigFiles, Tiny) {
  const loom::Config c = loom::load_config(std::string(LOOM_SOURCE_DIR) + "/configs/tiny.yaml",
                                           {"data.train=[x]"});
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_EQ(c.model.d_model, 64);
  EXPECT_EQ(c.model.vocab_size, 257);
  EXPECT_EQ(c.train.steps, 20);
  EXPECT_EQ(c.tokenizer.type, "bytes");
  ASSERT_EQ(c.data.train.size(), 1u);
  EXPECT_EQ(c.data.train[0].prefix, "x");
}

TEST(ConfigFiles, EveryKeyIsDocumented) {
  std::ifstream in(std::string(LOOM_SOURCE_DIR) + "/docs/config.md");
  ASSERT_TRUE(in) << "docs/config.md is missing";
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const loom::Field& f : loom::config_fields()) {
    const std::string row = std::string("| ") + (*f.section ? f.section : "(top level)") + " | " +
                            f.key + " |";
    EXPECT_NE(doc.find(row), std::string::npos) << "docs/config.md has no row " << row;
  }
}
