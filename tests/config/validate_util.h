// Helpers of the validate() tests: a small valid config, and "exactly one line says this".
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/config.h"

namespace loom::test {

// A small valid config for one rank; each test breaks one thing.
inline loom::Config base() {
  loom::Config c;
  c.run.name = "t";
  c.model.n_layer = 4;
  c.model.n_head = 4;
  c.model.d_model = 64;
  c.model.vocab_size = 257;
  c.model.seq_len = 32;
  c.train.global_batch_size = 8;
  c.data.train = {{"data/x", 1.0}};
  return c;
}

// Passes when exactly one line of validate() contains every piece.
inline ::testing::AssertionResult reports(const loom::Config& c, int world,
                                          const std::vector<std::string>& pieces) {
  const std::vector<std::string> lines = loom::validate(c, world);
  int hits = 0;
  for (const auto& line : lines) {
    bool all = true;
    for (const auto& p : pieces) all = all && line.find(p) != std::string::npos;
    hits += all;
  }
  if (hits == 1) return ::testing::AssertionSuccess();
  auto r = ::testing::AssertionFailure() << hits << " lines contain";
  for (const auto& p : pieces) r << " [" << p << "]";
  r << "; validate() said:";
  for (const auto& line : lines) r << "\n  " << line;
  return r;
}

// Exactly one line of validate(), and it contains every piece.
inline void expect_one(const loom::Config& c, int world, const std::vector<std::string>& pieces) {
  EXPECT_TRUE(reports(c, world, pieces));
  EXPECT_EQ(loom::validate(c, world).size(), 1u);
}

}  // namespace loom::test
