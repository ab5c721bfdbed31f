// DataLoader: fixed order against a direct concatenation, blending, shuffle, resume, split,
// per-rank slicing and the user errors.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "core/check.h"
#include "data/indexed_dataset.h"
#include "data/loader.h"
#include "data/split.h"
#include "test_util.h"

using namespace loom;
using namespace loom::testing;

namespace {

// Documents with lengths 1..max_len (cycling) whose tokens are base + (running index % mod).
std::vector<std::vector<int32_t>> make_docs(int n, int max_len, int base, int mod) {
  std::vector<std::vector<int32_t>> docs;
  int t = 0;
  for (int d = 0; d < n; ++d) {
    std::vector<int32_t> doc;
    for (int i = 0; i < 1 + d % max_len; ++i) doc.push_back(base + t++ % mod);
    docs.push_back(doc);
  }
  return docs;
}

std::string write_dataset(const std::string& prefix, const std::vector<std::vector<int32_t>>& docs) {
  IndexedDatasetWriter w(prefix, mmidx::IdxDType::UInt16);
  for (auto& d : docs) w.add_document(d.data(), d.size());
  w.finish();
  return prefix;
}

std::vector<int32_t> concat(const std::vector<std::vector<int32_t>>& docs, size_t d0, size_t d1) {
  std::vector<int32_t> all;
  for (size_t d = d0; d < d1; ++d) all.insert(all.end(), docs[d].begin(), docs[d].end());
  return all;
}

DataConfig config(std::vector<DataSource> train, bool shuffle, std::string split = "") {
  DataConfig c;
  c.train = std::move(train);
  c.shuffle = shuffle;
  c.split = std::move(split);
  return c;
}

}  // namespace

TEST(DataLoader, FixedOrderIsTheConcatenation) {
  std::string dir = scratch_dir("loader_fixed");
  auto docs = make_docs(50, 9, 0, 1000);
  write_dataset(dir + "/a", docs);
  const auto all = concat(docs, 0, docs.size());
  const int T = 7;
  DataLoader dl(config({{dir + "/a", 1.0}}, false), T, 1000, 1);
  const int64_t S = int64_t(all.size() - 1) / T;
  ASSERT_EQ(dl.train_samples_per_epoch(), S);
  std::vector<int32_t> in(size_t(3 * T)), tg(size_t(3 * T));
  for (int64_t first : {int64_t(0), int64_t(5), S - 1, S + 2, 3 * S + 1}) {  // wraps after S
    dl.train_batch(first, 3, in.data(), tg.data());
    for (int r = 0; r < 3; ++r) {
      const int64_t i = (first + r) % S;
      for (int t = 0; t < T; ++t) {
        ASSERT_EQ(in[size_t(r * T + t)], all[size_t(i * T + t)]) << "sample " << first + r;
        ASSERT_EQ(tg[size_t(r * T + t)], all[size_t(i * T + t + 1)]) << "sample " << first + r;
      }
    }
  }
  EXPECT_FALSE(dl.has_valid());
  EXPECT_NE(dl.describe().find("file order"), std::string::npos) << dl.describe();
}

TEST(DataLoader, BlendedSamplesComeFromTheirDatasetInProportion) {
  std::string dir = scratch_dir("loader_blend");
  // Dataset a holds ids < 500, dataset b ids >= 500: each sample's source is visible.
  write_dataset(dir + "/a", make_docs(400, 13, 0, 500));
  write_dataset(dir + "/b", make_docs(100, 13, 500, 500));
  const int T = 4;
  for (bool shuffle : {false, true}) {
    DataLoader dl(config({{dir + "/a", 3.0}, {dir + "/b", 1.0}}, shuffle), T, 1000, 9);
    const int n = 4000;
    std::vector<int32_t> in(size_t(n) * T), tg(size_t(n) * T);
    dl.train_batch(0, n, in.data(), tg.data());
    int from_b = 0;
    for (int r = 0; r < n; ++r) {
      bool b = in[size_t(r) * T] >= 500;
      for (int t = 0; t < T; ++t) ASSERT_EQ(in[size_t(r) * T + t] >= 500, b) << "mixed sample " << r;
      from_b += b;
      ASSERT_EQ(dl.train_source(r).first, b ? 1 : 0);
    }
    // Weights 3:1 -> exactly 1000 of 4000 (tolerance 1 + n/65536 samples, blend.h).
    EXPECT_NEAR(from_b, 1000, 1.0 + n / 65536.0) << "shuffle " << shuffle;
  }
}

TEST(DataLoader, ShuffleIsSeededEpochAwareAndResumable) {
  std::string dir = scratch_dir("loader_shuffle");
  write_dataset(dir + "/a", make_docs(300, 11, 0, 50000));
  const int T = 8;
  DataLoader a(config({{dir + "/a", 1.0}}, true), T, 50000, 1234);
  DataLoader same(config({{dir + "/a", 1.0}}, true), T, 50000, 1234);
  DataLoader other(config({{dir + "/a", 1.0}}, true), T, 50000, 99);
  const int64_t S = a.train_samples_per_epoch();
  ASSERT_GT(S, 100);
  // Each epoch visits every sample exactly once, in a different order from the last.
  std::set<int64_t> e0, e1;
  int64_t same_pos = 0, same_as_other = 0;
  for (int64_t i = 0; i < S; ++i) {
    e0.insert(a.train_source(i).second);
    e1.insert(a.train_source(S + i).second);
    same_pos += a.train_source(i).second == a.train_source(S + i).second;
    same_as_other += a.train_source(i).second == other.train_source(i).second;
  }
  EXPECT_EQ(int64_t(e0.size()), S);
  EXPECT_EQ(int64_t(e1.size()), S);
  EXPECT_LT(same_pos, S / 10);
  EXPECT_LT(same_as_other, S / 10);
  // Resume: a fresh loader asked for "consumed N" reproduces the batches of an uninterrupted run.
  const int G = 6;
  std::vector<int32_t> x(size_t(G * T)), y(size_t(G * T)), x2(x), y2(y);
  for (int step = 1; step <= 2 * int(S) / G + 3; ++step) {
    const int64_t consumed = int64_t(step - 1) * G;
    a.train_batch(consumed, G, x.data(), y.data());
    if (step % 17 == 0 || step == 1) {
      DataLoader resumed(config({{dir + "/a", 1.0}}, true), T, 50000, 1234);
      resumed.train_batch(consumed, G, x2.data(), y2.data());
      ASSERT_EQ(x, x2) << "step " << step;
      ASSERT_EQ(y, y2) << "step " << step;
    }
    same.train_batch(consumed, G, x2.data(), y2.data());
    ASSERT_EQ(x, x2) << "step " << step;
  }
}

TEST(DataLoader, SplitGivesTrainAndValidDocumentRanges) {
  std::string dir = scratch_dir("loader_split");
  auto docs = make_docs(200, 17, 0, 60000);
  write_dataset(dir + "/a", docs);
  const int T = 5;
  DataLoader dl(config({{dir + "/a", 1.0}}, false, "90,10,0"), T, 60000, 1);
  auto b = split_bounds(parse_split("90,10,0", "s"), 200);
  ASSERT_EQ(b[1], 180);
  const auto train = concat(docs, 0, size_t(b[1])), valid = concat(docs, size_t(b[1]), size_t(b[2]));
  EXPECT_EQ(dl.train_samples_per_epoch(), int64_t(train.size() - 1) / T);
  ASSERT_TRUE(dl.has_valid());
  EXPECT_EQ(dl.valid_samples(), int64_t(valid.size() - 1) / T);
  std::vector<int32_t> in(static_cast<size_t>(T)), tg(static_cast<size_t>(T));
  for (int64_t i : {int64_t(0), int64_t(3), dl.valid_samples() + 1}) {
    dl.valid_batch(i, 1, in.data(), tg.data());
    const int64_t k = i % dl.valid_samples();
    for (int t = 0; t < T; ++t) ASSERT_EQ(in[size_t(t)], valid[size_t(k * T + t)]) << "valid sample " << i;
    dl.train_batch(i, 1, in.data(), tg.data());
    const int64_t kt = i % dl.train_samples_per_epoch();
    for (int t = 0; t < T; ++t) ASSERT_EQ(tg[size_t(t)], train[size_t(kt * T + t + 1)]);
  }
  // An explicit data.valid takes precedence over the split's valid part.
  DataConfig c = config({{dir + "/a", 1.0}}, false, "90,10,0");
  write_dataset(dir + "/v", make_docs(20, 9, 7, 60000));
  c.valid = {{dir + "/v", 1.0}};
  DataLoader dv(c, T, 60000, 1);
  EXPECT_EQ(dv.valid_samples(), int64_t(concat(make_docs(20, 9, 7, 60000), 0, 20).size() - 1) / T);
}

TEST(DataLoader, MicroBatchSlicesCoverTheGlobalBatchOnce) {
  for (int dp : {1, 2, 4})
    for (int mbs : {1, 2, 3}) {
      const int micro = 4, G = dp * mbs * micro;
      const int64_t first = 7 * G;
      std::multiset<int64_t> got;
      for (int r = 0; r < dp; ++r)
        for (int m = 0; m < micro; ++m)
          for (int k = 0; k < mbs; ++k) got.insert(micro_batch_first_sample(first, G, dp, r, m, mbs) + k);
      // Rank r's samples are one contiguous block.
      for (int r = 0; r < dp; ++r)
        EXPECT_EQ(micro_batch_first_sample(first, G, dp, r, micro - 1, mbs) + mbs,
                  micro_batch_first_sample(first, G, dp, r + 1, 0, mbs));
      std::multiset<int64_t> want;
      for (int64_t i = first; i < first + G; ++i) want.insert(i);
      EXPECT_EQ(got, want) << "dp " << dp << " mbs " << mbs;
    }
}

TEST(DataLoader, UserErrors) {
  std::string dir = scratch_dir("loader_errors");
  write_dataset(dir + "/a", make_docs(30, 5, 0, 1000));
  auto message = [](const DataConfig& c, int T, int vocab) -> std::string {
    try {
      DataLoader dl(c, T, vocab, 1);
      std::vector<int32_t> in(size_t(T) * 200), tg(in);
      dl.train_batch(0, 200, in.data(), tg.data());
    } catch (const UserError& e) {
      return e.what();
    }
    return "";
  };
  std::string m = message(config({}, false), 4, 1000);
  EXPECT_NE(m.find("data.train is empty"), std::string::npos) << m;
  m = message(config({{dir + "/nope", 1.0}}, false), 4, 1000);
  EXPECT_NE(m.find("data.train[0]"), std::string::npos) << m;
  EXPECT_NE(m.find("nope.idx"), std::string::npos) << m;
  m = message(config({{dir + "/a", 0.0}}, false), 4, 1000);
  EXPECT_NE(m.find("weight"), std::string::npos) << m;
  m = message(config({{dir + "/a", 1.0}}, false), 4, 50);  // ids up to 89 in the data
  EXPECT_NE(m.find(dir + "/a"), std::string::npos) << m;
  EXPECT_NE(m.find("outside the vocabulary"), std::string::npos) << m;
  m = message(config({{dir + "/a", 1.0}}, false), 1000, 1000);
  EXPECT_NE(m.find("fewer than model.seq_len + 1"), std::string::npos) << m;
  m = message(config({{dir + "/a", 1.0}}, false, "1,x"), 4, 1000);
  EXPECT_NE(m.find("data.split"), std::string::npos) << m;
}
