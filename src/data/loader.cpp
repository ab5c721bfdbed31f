// DataLoader: train/valid sources (prefixes or split parts), blending, shuffling, sample reads.
#include "data/loader.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "core/check.h"
#include "core/log.h"
#include "data/blend.h"
#include "data/indexed_dataset.h"
#include "data/shuffle.h"
#include "data/split.h"

namespace loom {

namespace {

// The token stream of documents [doc0, doc1) of one dataset, cut into samples of T+1 tokens
// that overlap by one: local sample j is tokens [j*T, j*T + T + 1) of the stream.
struct Source {
  std::shared_ptr<const IndexedDataset> ds;
  std::string name;       // for messages: the prefix, plus the document range of a split part
  double weight = 1.0;
  int64_t doc0 = 0, doc1 = 0, seq0 = 0;
  std::vector<int64_t> cum;  // cum[s]: tokens before sequence seq0 + s; cum.back() = total
  int64_t samples = 0;       // per epoch

  int64_t tokens() const { return cum.back(); }

  void read_sample(int64_t j, int T, int vocab, int32_t* out) const {
    const int64_t start = j * int64_t(T);
    int64_t need = int64_t(T) + 1;
    size_t s = size_t(std::upper_bound(cum.begin(), cum.end(), start) - cum.begin()) - 1;
    int64_t off = start - cum[s];
    int32_t* p = out;
    while (need > 0) {
      LOOM_CHECK(s + 1 < cum.size(), "sample ", j, " runs past the end of ", name);
      const int64_t take = std::min(need, cum[s + 1] - cum[s] - off);
      ds->read(seq0 + int64_t(s), off, take, p);
      p += take;
      need -= take;
      off = 0;
      ++s;
    }
    for (int t = 0; t <= T; ++t)
      LOOM_USER_CHECK(out[t] >= 0 && out[t] < vocab, "dataset ", name, ": token id ", out[t],
                      " (near token ", start + t, ") is outside the vocabulary [0, ", vocab,
                      "): model.vocab_size must match the tokenizer that made the dataset");
  }
};

// Several sources blended by weight; train order may shuffle each source's samples per epoch.
struct Stream {
  std::vector<Source> sources;
  std::unique_ptr<BlendIndex> blend;
  std::vector<EpochShuffle> shuffles;  // empty: file order
  int64_t samples_per_epoch = 0;

  bool empty() const { return sources.empty(); }
  std::pair<int, int64_t> locate(int64_t i) const {
    auto [d, k] = blend->locate(i);
    const Source& s = sources[size_t(d)];
    const uint64_t epoch = uint64_t(k / s.samples), j = uint64_t(k % s.samples);
    return {d, int64_t(shuffles.empty() ? j : shuffles[size_t(d)].permute(epoch, j))};
  }
};

std::string describe_count(int64_t n) {
  char buf[32];
  if (n >= 10000000) std::snprintf(buf, sizeof buf, "%.1fM", double(n) / 1e6);
  else if (n >= 10000) std::snprintf(buf, sizeof buf, "%.1fk", double(n) / 1e3);
  else std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n));
  return buf;
}

}  // namespace

struct DataLoader::Impl {
  int T = 0, vocab = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  Stream train, valid;
  std::map<std::string, std::shared_ptr<const IndexedDataset>> open;

  std::shared_ptr<const IndexedDataset> dataset(const std::string& prefix, const std::string& key) {
    auto it = open.find(prefix);
    if (it != open.end()) return it->second;
    LOOM_USER_CHECK(!prefix.empty(), key, ".prefix is empty: give the PREFIX of PREFIX.bin/.idx");
    std::shared_ptr<const IndexedDataset> ds;
    try {
      ds = std::make_shared<IndexedDataset>(prefix);
    } catch (const UserError& e) {
      throw UserError(str(key, ": ", e.what()));
    }
    LOOM_USER_CHECK(mmidx::is_integer_dtype(ds->dtype()), key, ": ", ds->idx_path(), " holds ",
                    mmidx::dtype_name(ds->dtype()), " values, not token ids");
    open[prefix] = ds;
    return ds;
  }

  Source make_source(const std::string& key, const std::string& prefix, double weight,
                     int64_t doc0, int64_t doc1, bool whole) {
    LOOM_USER_CHECK(std::isfinite(weight) && weight > 0, key, ".weight = ", weight,
                    " must be a positive number (weights are normalized over the list)");
    Source s;
    s.ds = dataset(prefix, key);
    s.weight = weight;
    if (whole) doc1 = s.ds->num_documents();
    s.doc0 = doc0, s.doc1 = doc1;
    s.name = whole ? prefix : str(prefix, " (documents [", doc0, ", ", doc1, "))");
    s.seq0 = s.ds->doc_begin(doc0);
    const int64_t seq1 = s.ds->doc_begin(doc1);
    s.cum.assign(size_t(seq1 - s.seq0 + 1), 0);
    for (int64_t q = s.seq0; q < seq1; ++q)
      s.cum[size_t(q - s.seq0 + 1)] = s.cum[size_t(q - s.seq0)] + s.ds->sequence_length(q);
    LOOM_USER_CHECK(s.tokens() >= int64_t(T) + 1, key, ": ", s.name, " has ", s.tokens(),
                    " tokens, fewer than model.seq_len + 1 = ", T + 1,
                    " (use more text, a smaller model.seq_len, or a larger share in data.split)");
    s.samples = (s.tokens() - 1) / T;
    return s;
  }

  void finish_stream(Stream& st, bool shuffled, uint64_t stream_base) {
    if (st.empty()) return;
    std::vector<double> w;
    for (const Source& s : st.sources) {
      w.push_back(s.weight);
      st.samples_per_epoch += s.samples;
    }
    st.blend = std::make_unique<BlendIndex>(w);
    if (shuffled)
      for (size_t d = 0; d < st.sources.size(); ++d)
        st.shuffles.emplace_back(seed, stream_base + d, uint64_t(st.sources[d].samples));
  }

  void batch(const Stream& st, int64_t first, int rows, int32_t* inputs, int32_t* targets) const {
    LOOM_CHECK(first >= 0 && rows >= 0, "batch(", first, ", ", rows, ")");
    std::vector<int32_t> buf(size_t(T) + 1);
    for (int r = 0; r < rows; ++r) {
      auto [d, j] = st.locate(first + r);
      st.sources[size_t(d)].read_sample(j, T, vocab, buf.data());
      std::copy(buf.begin(), buf.end() - 1, inputs + int64_t(r) * T);
      std::copy(buf.begin() + 1, buf.end(), targets + int64_t(r) * T);
    }
  }
};

DataLoader::DataLoader(const DataConfig& data, int seq_len, int vocab_size, uint64_t seed)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  LOOM_USER_CHECK(seq_len > 0, "model.seq_len = ", seq_len, " must be positive");
  LOOM_USER_CHECK(vocab_size > 0, "model.vocab_size = ", vocab_size, " must be positive");
  m.T = seq_len, m.vocab = vocab_size, m.seed = seed, m.shuffle = data.shuffle;
  LOOM_USER_CHECK(!data.train.empty(),
                  "data.train is empty: list the datasets as - {prefix: PATH, weight: 1.0} "
                  "(PATH.bin/PATH.idx from loom-preprocess)");
  const bool split = !data.split.empty();
  std::array<double, 3> parts{1, 0, 0};
  if (split) parts = parse_split(data.split, "data.split");
  std::vector<Source> split_valid;
  for (size_t i = 0; i < data.train.size(); ++i) {
    const DataSource& src = data.train[i];
    const std::string key = str("data.train[", i, "]");
    if (!split) {
      m.train.sources.push_back(m.make_source(key, src.prefix, src.weight, 0, 0, true));
      continue;
    }
    auto ds = m.dataset(src.prefix, key);
    auto b = split_bounds(parts, ds->num_documents());
    LOOM_USER_CHECK(b[1] > b[0], key, ": data.split \"", data.split, "\" leaves no training documents of ",
                    src.prefix, " (", ds->num_documents(), " documents)");
    m.train.sources.push_back(m.make_source(key, src.prefix, src.weight, b[0], b[1], false));
    if (b[2] > b[1] && data.valid.empty())
      split_valid.push_back(m.make_source(key + " (valid part)", src.prefix, src.weight, b[1], b[2], false));
  }
  if (!data.valid.empty()) {
    for (size_t i = 0; i < data.valid.size(); ++i)
      m.valid.sources.push_back(m.make_source(str("data.valid[", i, "]"), data.valid[i].prefix,
                                              data.valid[i].weight, 0, 0, true));
  } else {
    m.valid.sources = std::move(split_valid);
  }
  m.finish_stream(m.train, m.shuffle, 0);
  m.finish_stream(m.valid, false, 0);
}

DataLoader::~DataLoader() = default;

void DataLoader::train_batch(int64_t first, int rows, int32_t* inputs, int32_t* targets) const {
  impl_->batch(impl_->train, first, rows, inputs, targets);
}

bool DataLoader::has_valid() const { return !impl_->valid.empty(); }

void DataLoader::valid_batch(int64_t first, int rows, int32_t* inputs, int32_t* targets) const {
  LOOM_USER_CHECK(has_valid(), "no validation data: set data.valid or data.split (e.g. \"969,30,1\")");
  impl_->batch(impl_->valid, first, rows, inputs, targets);
}

int64_t DataLoader::train_samples_per_epoch() const { return impl_->train.samples_per_epoch; }
int64_t DataLoader::valid_samples() const { return impl_->valid.samples_per_epoch; }
std::pair<int, int64_t> DataLoader::train_source(int64_t i) const { return impl_->train.locate(i); }

std::string DataLoader::describe() const {
  const Impl& m = *impl_;
  auto list = [&](const Stream& st) {
    std::string s;
    for (size_t d = 0; d < st.sources.size(); ++d) {
      const Source& src = st.sources[d];
      s += str(d ? "; " : "", src.name, " ", describe_count(src.doc1 - src.doc0), " docs ",
               describe_count(src.tokens()), " tokens");
      if (st.sources.size() > 1) s += str(" w=", st.blend->weights()[d]);
    }
    return s;
  };
  std::string out = str("data: train [", list(m.train), "] ", describe_count(m.train.samples_per_epoch),
                        " samples/epoch of ", m.T, "+1 tokens, ",
                        m.shuffle ? str("shuffled (seed ", m.seed, ")") : std::string("file order"));
  out += m.valid.empty() ? std::string("; no validation set")
                         : str("; valid [", list(m.valid), "] ", describe_count(m.valid.samples_per_epoch),
                               " samples");
  return out;
}

}  // namespace loom
