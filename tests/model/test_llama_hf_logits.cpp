// The tiny Llama loaded from its Hugging Face-named, two-shard safetensors copy runs bitwise as
// the same weights loaded from loom's canonical .h5 file.
#include <gtest/gtest.h>

#include "tests/model/llama_fixture.h"
#include "tests/support/compare.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

struct LoadedRun {
  std::vector<float> params, logits;
};

// init_from = `source`; the parameters (flat, layout order) and step 1's eval logits.
LoadedRun run_from(const std::string& source) {
  Config c = test::llama_fixture_config(source);
  auto pc = make_parallel_ctx(Grid(1, 1, 1));
  Trainer tr(c, *pc, test::llama_fixture_samples(c));
  tr.init_weights();
  LoadedRun r;
  r.params = tr.full_params();
  r.logits = test::llama_step1_logits(tr, c);
  return r;
}

// Both hold the same float32 values (the HF copy transposed to [out, in] and q|k|v, gate|up
// split into separate tensors), so a correct loader gives the same bits and the same logits.
TEST(LlamaHfCheckpoint, ShardedCopyGivesBitwiseTheSameLogits) {
  test::ensure_mpi();
  const LoadedRun h5 = run_from(test::source_path(test::kLlamaWeights));
  const std::string dir = test::source_path(test::kLlamaHfDir);
  for (const std::string& src : {dir, dir + "/model.safetensors.index.json"}) {
    const LoadedRun hf = run_from(src);
    EXPECT_TRUE(test::bitwise_equal(hf.params, h5.params)) << src;
    EXPECT_TRUE(test::bitwise_equal(hf.logits, h5.logits)) << src;
  }
}

}  // namespace
}  // namespace loom
