// safetensors: HF-style fixture vs HDF5, round trips (tp1, tp2, pp2), bad files, config.json.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "ckpt/canonical.h"
#include "ckpt/safetensors.h"
#include "core/check.h"
#include "model/init.h"
#include "tests/support/compare.h"
#include "tests/support/configs.h"
#include "tests/support/fixture.h"
#include "tests/support/mpi_test_env.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The fixtures' model, or the same with an untied classifier.
ModelConfig tiny(bool tied = true) {
  ModelConfig m = test::fixture_model();
  m.tie_embeddings = tied;
  return m;
}

std::string fixture(const std::string& f) {
  return test::source_path("tests/reference/fixtures/" + f);
}
const std::string kH5 = fixture("gpt2_tiny_weights.h5");
const std::string kMixed = fixture("gpt2_tiny_hf_mixed.safetensors");
const std::string kRounded = fixture("gpt2_tiny_hf_rounded.safetensors");

class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("loom_st_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::vector<float> load(const std::string& path, const ParamLayout& L) {
  std::vector<float> v(L.total(), std::numeric_limits<float>::quiet_NaN());
  load_canonical(path, L, v.data());
  return v;
}

std::unique_ptr<ParallelCtx> single_rank() {
  test::ensure_mpi();
  return make_parallel_ctx(Grid(1, 1, 1));
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return s;
}

// A file from raw header text and data bytes (the test's own writer, independent of loom's).
std::string st_bytes(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

// A test-side entry: name, dtype string, shape, raw little-endian bytes.
struct Entry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

std::string f32_bytes(const float* v, size_t n) {
  return std::string(reinterpret_cast<const char*>(v), n * 4);
}

void write_entries(const std::string& path, const std::vector<Entry>& es) {
  json h = json::object();
  std::string data;
  for (const Entry& e : es) {
    h[e.name] = {{"dtype", e.dtype},
                 {"shape", e.shape},
                 {"data_offsets", {data.size(), data.size() + e.bytes.size()}}};
    data += e.bytes;
  }
  write_bytes(path, st_bytes(h.dump(), data));
}

// The canonical tensors of the HDF5 fixture as test-side entries (F32).
std::vector<Entry> h5_entries(const std::string& prefix = "") {
  ParamLayout L(tiny(), 1, 0, 1, 0);
  std::vector<Entry> out;
  for (const ParamSpec& p : L.params()) {
    std::vector<size_t> shape;
    std::vector<double> v = test::read_h5(kH5, p.name, &shape);
    std::vector<float> f(v.begin(), v.end());
    out.push_back({prefix + p.name, "F32", std::vector<int64_t>(shape.begin(), shape.end()),
                   f32_bytes(f.data(), f.size())});
  }
  return out;
}

// Runs f and expects a one-line UserError whose message contains every piece.
template <typename F>
void expect_user_error(F&& f, const std::vector<std::string>& pieces) {
  try {
    f();
    ADD_FAILURE() << "no UserError thrown; expected one mentioning " << pieces[0];
  } catch (const UserError& e) {
    std::string msg = e.what();
    for (const std::string& p : pieces)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

// ---- (a) the independent HF-style fixture --------------------------------------------------

TEST(SafetensorsFixture, MixedDtypesLoadExactlyAsTheirRoundedValues) {
  ParamLayout L(tiny(), 1, 0, 1, 0);
  std::vector<float> mixed = load(kMixed, L), rounded = load(kRounded, L);
  EXPECT_TRUE(test::bitwise_equal(mixed, rounded));
}

// Against the fp32 originals: F32 and F64 tensors exact; F16 within half an ulp
// (|d| <= 2^-11 |x| + 2^-25, the absolute term covering F16 subnormals below 2^-14); BF16
// within half an ulp (|d| <= 2^-8 |x|). Rounded tensors must differ somewhere (really stored
// in the narrow type).
TEST(SafetensorsFixture, MixedDtypesMatchTheH5WithinFormatPrecision) {
  ParamLayout L(tiny(), 1, 0, 1, 0);
  std::vector<float> h5 = load(kH5, L), mixed = load(kMixed, L);
  SafetensorsFile f(kMixed);
  std::map<StDtype, int> seen;
  for (const ParamSpec& p : L.params()) {
    const StTensorInfo* t = f.find("transformer." + p.name);
    ASSERT_NE(t, nullptr) << p.name;
    seen[t->dtype]++;
    size_t differ = 0;
    for (size_t i = 0; i < p.numel(); ++i) {
      double x = h5[p.offset + i], y = mixed[p.offset + i];
      double tol = t->dtype == StDtype::F16 ? std::ldexp(std::fabs(x), -11) + std::ldexp(1.0, -25)
                   : t->dtype == StDtype::BF16 ? std::ldexp(std::fabs(x), -8)
                                               : 0.0;
      ASSERT_LE(std::fabs(x - y), tol) << p.name << "[" << i << "] " << t->dtype_name;
      differ += x != y;
    }
    if (t->dtype == StDtype::F16 || t->dtype == StDtype::BF16)
      EXPECT_GT(differ, 0u) << p.name;
    else
      EXPECT_EQ(differ, 0u) << p.name;
  }
  EXPECT_EQ(seen.size(), 4u);  // F32, F64, F16 and BF16 all exercised
}

TEST(SafetensorsFixture, PrefixStrippedBuffersIgnoredPaddingZero) {
  SafetensorsFile f(kMixed);
  ASSERT_NE(f.find("transformer.h.0.attn.bias"), nullptr);
  ASSERT_NE(f.find("transformer.h.1.attn.masked_bias"), nullptr);
  ASSERT_NE(f.find("lm_head.weight"), nullptr);
  EXPECT_EQ(f.find("wte.weight"), nullptr);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  ParamLayout L(tiny(), 1, 0, 1, 0);
  std::vector<float> v = load(kMixed, L);
  const ParamSpec& wte = L.get("wte.weight");
  ASSERT_EQ(wte.lrows, 128);
  for (int64_t r = 97; r < 128; ++r)
    for (int64_t c = 0; c < 32; ++c) ASSERT_EQ(v[wte.offset + size_t(r * 32 + c)], 0.0f);
}

// An untied model takes lm_head.weight from the file (the fixture's is the F32 original wte).
TEST(SafetensorsFixture, UntiedModelReadsLmHead) {
  ParamLayout L(tiny(false), 1, 0, 1, 0), Ltied(tiny(), 1, 0, 1, 0);
  std::vector<float> v = load(kMixed, L), h5 = load(kH5, Ltied);
  const ParamSpec& lm = L.get("lm_head.weight");
  const ParamSpec& wte = Ltied.get("wte.weight");
  EXPECT_EQ(std::memcmp(&v[lm.offset], &h5[wte.offset], lm.numel() * 4), 0);
}

// ---- (b) round trips and tensor-parallel reads ---------------------------------------------

TEST(SafetensorsRoundTrip, SaveThenLoadIsBitwiseSingleRank) {
  auto pc = single_rank();
  TempDir dir;
  ModelConfig m = tiny();
  ParamLayout L(m, 1, 0, 1, 0);
  std::vector<float> orig = load(kH5, L);
  std::string path = dir.file("model.safetensors");
  save_canonical(path, L, orig.data(), *pc, &m);
  EXPECT_TRUE(test::bitwise_equal(load(path, L), orig));
  EXPECT_TRUE(fs::exists(dir.file("config.json")));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_FALSE(fs::exists(dir.file("config.json.tmp")));
}

TEST(SafetensorsRoundTrip, UntiedRoundTripIncludesLmHead) {
  auto pc = single_rank();
  TempDir dir;
  ModelConfig m = tiny(false);
  ParamLayout L(m, 1, 0, 1, 0);
  std::vector<float> orig(L.total());
  init_params(L, m, 7, orig.data());
  std::string path = dir.file("model.safetensors");
  save_canonical(path, L, orig.data(), *pc, &m);
  EXPECT_TRUE(test::bitwise_equal(load(path, L), orig));
  SafetensorsFile f(path);
  ASSERT_NE(f.find("lm_head.weight"), nullptr);
  EXPECT_EQ(f.find("lm_head.weight")->shape, (std::vector<int64_t>{97, 32}));
}

// The writer's layout, checked by hand: data 8-aligned, header padded with spaces, names sorted
// with contiguous F32 ranges covering the data section, values little-endian fp32.
TEST(SafetensorsRoundTrip, WrittenFileFollowsTheFormat) {
  auto pc = single_rank();
  TempDir dir;
  ParamLayout L(tiny(), 1, 0, 1, 0);
  std::vector<float> orig = load(kH5, L);
  std::string path = dir.file("w.safetensors");
  save_canonical(path, L, orig.data(), *pc);
  std::string bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | uint8_t(bytes[size_t(i)]);
  ASSERT_EQ(n % 8, 0u);
  std::string text = bytes.substr(8, n);
  size_t close = text.find_last_of('}');
  EXPECT_EQ(text.find_first_not_of(' ', close + 1), std::string::npos);
  json h = json::parse(text);
  EXPECT_EQ(h["__metadata__"]["format"], "pt");
  uint64_t pos = 0, data_size = bytes.size() - 8 - n;
  std::string prev;
  int count = 0;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    EXPECT_LT(prev, it.key());
    prev = it.key();
    EXPECT_EQ(it.value()["dtype"], "F32");
    EXPECT_EQ(it.value()["data_offsets"][0].get<uint64_t>(), pos) << it.key();
    pos = it.value()["data_offsets"][1].get<uint64_t>();
    ++count;
  }
  EXPECT_EQ(pos, data_size);
  EXPECT_EQ(count, 28);
  const json& e = h["h.1.attn.c_attn.weight"];
  EXPECT_EQ(e["shape"], json::array({32, 96}));
  std::vector<double> want = test::read_h5(kH5, "h.1.attn.c_attn.weight");
  const char* data = bytes.data() + 8 + n + e["data_offsets"][0].get<uint64_t>();
  for (size_t i = 0; i < want.size(); ++i) {
    float x;
    std::memcpy(&x, data + 4 * i, 4);
    ASSERT_EQ(x, float(want[i])) << i;
  }
  EXPECT_EQ(h["ln_f.bias"]["shape"], json::array({32}));
  EXPECT_FALSE(fs::exists(dir.file("config.json")));  // no ModelConfig given
}

TEST(SafetensorsRoundTrip, Hdf5PathStillWritesHdf5) {
  auto pc = single_rank();
  TempDir dir;
  ParamLayout L(tiny(), 1, 0, 1, 0);
  std::vector<float> orig = load(kH5, L);
  std::string path = dir.file("w.h5");
  ModelConfig m = tiny();
  save_canonical(path, L, orig.data(), *pc, &m);
  EXPECT_EQ(read_bytes(path).substr(1, 3), "HDF");
  EXPECT_TRUE(test::bitwise_equal(load(path, L), orig));
  EXPECT_FALSE(fs::exists(dir.file("config.json")));
}

// Every (tp, pp) layout reads the same values from safetensors as from HDF5, the narrow-dtype
// fixture reads as its rounded values (column blocks of F16/BF16 included), and the tp shards
// tile each canonical tensor exactly.
TEST(SafetensorsTensorParallel, ShardsMatchHdf5AndTileTheTensors) {
  auto pc = single_rank();
  TempDir dir;
  ModelConfig m = tiny();
  ParamLayout L1(m, 1, 0, 1, 0);
  std::vector<float> full = load(kH5, L1);
  std::string path = dir.file("model.safetensors");
  save_canonical(path, L1, full.data(), *pc, &m);

  for (auto [tp, pp] : std::vector<std::pair<int, int>>{{2, 1}, {2, 2}, {1, 2}}) {
    std::map<std::string, std::vector<int>> covered;  // canonical element -> times written
    for (int stage = 0; stage < pp; ++stage)
      for (int r = 0; r < tp; ++r) {
        SCOPED_TRACE(testing::Message()
                     << "tp" << tp << " pp" << pp << " stage " << stage << " rank " << r);
        ParamLayout L(m, tp, r, pp, stage);
        std::vector<float> st = load(path, L);
        EXPECT_TRUE(test::bitwise_equal(st, load(kH5, L)));
        EXPECT_TRUE(test::bitwise_equal(load(kMixed, L), load(kRounded, L)));
        for (const ParamSpec& p : L.params()) {
          const ParamSpec& g = L1.get(p.name);
          std::vector<int>& cov = covered[p.name];
          cov.resize(size_t(p.rows * p.cols));
          for (const ShardBlock& b : L.blocks(p))
            for (int64_t i = 0; i < b.rows; ++i)
              for (int64_t j = 0; j < b.cols; ++j) {
                float got = st[p.offset + size_t((b.lrow + i) * p.lcols + b.lcol + j)];
                size_t gi = size_t((b.grow + i) * p.cols + b.gcol + j);
                ASSERT_EQ(got, full[g.offset + gi]) << p.name;
                cov[gi]++;
              }
        }
      }
    ASSERT_EQ(covered.size(), L1.params().size());
    for (const ParamSpec& g : L1.params()) {
      const ParamLayout first(m, tp, 0, pp, 0);  // outlives stage0, which points into it
      const ParamSpec* stage0 = first.find(g.name);
      bool tp_split =
          stage0 ? stage0->shard != Shard::Replicated
                 : ParamLayout(m, tp, 0, pp, pp - 1).get(g.name).shard != Shard::Replicated;
      // Split tensors are covered once per stage holding them; replicated ones tp times.
      int holders = 0;
      for (int s = 0; s < pp; ++s) holders += ParamLayout(m, tp, 0, pp, s).find(g.name) != nullptr;
      int want = holders * (tp_split ? 1 : tp);
      for (int c : covered[g.name]) ASSERT_EQ(c, want) << g.name;
    }
  }
}

// ---- reader details ------------------------------------------------------------------------

TEST(SafetensorsReader, ConvertsSpecialValuesAndReadsSubBlocks) {
  TempDir dir;
  std::string path = dir.file("x.safetensors");
  auto u16 = [](std::initializer_list<uint16_t> v) {
    std::string s;
    for (uint16_t x : v) s += char(x & 0xff), s += char(x >> 8);
    return s;
  };
  double d[4] = {1.5, -2.25, 1e-3, 3.0};
  float f[15], s = 42.0f;
  for (int i = 0; i < 15; ++i) f[i] = float(i) + 0.5f;
  int64_t i64 = 7;
  write_entries(path, {
                          {"h",
                           "F16",
                           {2, 4},
                           u16({0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x3c00, 0x7bff, 0xfc00})},
                          {"b", "BF16", {3}, u16({0x3f80, 0xc040, 0x7fc0})},
                          {"d", "F64", {2, 2}, std::string(reinterpret_cast<const char*>(d), 32)},
                          {"f", "F32", {3, 5}, f32_bytes(f, 15)},
                          {"s", "F32", {}, f32_bytes(&s, 1)},
                          {"z", "F32", {0, 3}, ""},
                          {"i", "I64", {1}, std::string(reinterpret_cast<const char*>(&i64), 8)},
                      });
  SafetensorsFile st(path);
  EXPECT_TRUE(st.metadata().empty());
  float h[8];
  st.read_block_f32("h", 0, 0, 2, 4, h, 4);
  EXPECT_EQ(h[0], 0.0f);
  EXPECT_TRUE(std::signbit(h[1]) && h[1] == 0.0f);
  EXPECT_EQ(h[2], std::ldexp(1.0f, -24));
  EXPECT_EQ(h[3], 1023 * std::ldexp(1.0f, -24));
  EXPECT_EQ(h[4], std::ldexp(1.0f, -14));
  EXPECT_EQ(h[5], 1.0f);
  EXPECT_EQ(h[6], 65504.0f);
  EXPECT_EQ(h[7], -std::numeric_limits<float>::infinity());
  float b[3];
  st.read_block_f32("b", 0, 0, 1, 3, b, 3);
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(b[1], -3.0f);
  EXPECT_TRUE(std::isnan(b[2]));
  float dd[4];
  st.read_block_f32("d", 0, 0, 2, 2, dd, 2);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(dd[i], float(d[i]));
  // A 2x3 block at (1,2) of f into rows of stride 4: the 4th column is untouched.
  float out[8];
  std::fill(out, out + 8, -1.0f);
  st.read_block_f32("f", 1, 2, 2, 3, out, 4);
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(out[i * 4 + j], f[(1 + i) * 5 + 2 + j]);
    EXPECT_EQ(out[i * 4 + 3], -1.0f);
  }
  float sv = 0;
  st.read_block_f32("s", 0, 0, 1, 1, &sv, 1);
  EXPECT_EQ(sv, 42.0f);
  EXPECT_EQ(st.find("z")->rows(), 0);
  expect_user_error([&] { st.read_block_f32("i", 0, 0, 1, 1, &sv, 1); }, {path, "'i'", "I64"});
  expect_user_error([&] { st.read_block_f32("nope", 0, 0, 1, 1, &sv, 1); }, {path, "'nope'"});
  EXPECT_THROW(st.read_block_f32("f", 2, 0, 2, 5, out, 5), InternalError);  // outside: caller bug
}

// ---- (c) bad input -------------------------------------------------------------------------

class SafetensorsBadInput : public ::testing::Test {
 protected:
  std::string put(const std::string& bytes) {
    std::string p = dir_.file("bad.safetensors");
    write_bytes(p, bytes);
    return p;
  }
  void expect_open_error(const std::string& bytes, std::vector<std::string> pieces) {
    std::string p = put(bytes);
    pieces.insert(pieces.begin(), p);
    expect_user_error([&] { SafetensorsFile f(p); }, pieces);
    ParamLayout L(tiny(), 1, 0, 1, 0);
    std::vector<float> v(L.total(), 3.0f);
    expect_user_error([&] { load_canonical(p, L, v.data()); }, pieces);
    for (float x : v) ASSERT_EQ(x, 3.0f);  // untouched
  }
  TempDir dir_;
};

TEST_F(SafetensorsBadInput, MissingFile) {
  std::string p = dir_.file("none.safetensors");
  ParamLayout L(tiny(), 1, 0, 1, 0);
  std::vector<float> v(L.total());
  expect_user_error([&] { load_canonical(p, L, v.data()); }, {p, "cannot be opened"});
}

TEST_F(SafetensorsBadInput, TruncatedBeforeTheHeaderLength) {
  expect_open_error("", {"truncated"});
  expect_open_error(std::string("\x10\0\0", 3), {"truncated"});
}

TEST_F(SafetensorsBadInput, HeaderLengthBeyondTheFile) {
  expect_open_error(le64(1000) + "{}", {"header length of 1000", "truncated"});
}

TEST_F(SafetensorsBadInput, HeaderLengthInsane) {
  expect_open_error(le64(uint64_t(1) << 40) + "{}", {"header length", "not a safetensors file"});
  expect_open_error(le64(0), {"header length of 0"});
}

TEST_F(SafetensorsBadInput, MalformedJson) {
  expect_open_error(st_bytes(R"({"w": {"dtype": "F32", "shape": [1], )", "abcd"), {"malformed"});
  expect_open_error(st_bytes(R"([1, 2])", ""), {"does not start with '{'"});
}

TEST_F(SafetensorsBadInput, OffsetsOutOfRange) {
  expect_open_error(st_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "abcd"),
                    {"'w'", "beyond the 4-byte data section"});
  expect_open_error(
      st_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", "abcdefgh"),
      {"'w'", "data_offsets"});
  expect_open_error(
      st_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", "abcdefgh"),
      {"'w'", "data_offsets"});
}

TEST_F(SafetensorsBadInput, OffsetsOverlap) {
  expect_open_error(st_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                             std::string(12, 'x')),
                    {"'a'", "'b'", "overlap"});
}

TEST_F(SafetensorsBadInput, SizeDoesNotMatchShapeAndDtype) {
  expect_open_error(
      st_bytes(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "abcdefgh"),
      {"'w'", "holds 8 bytes", "need 12"});
  expect_open_error(
      st_bytes(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", "abcdefgh"),
      {"'w'", "shape"});
  expect_open_error(
      st_bytes(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
               "abcdefgh"),
      {"'w'", "more than 2^64"});
}

TEST_F(SafetensorsBadInput, WrongDtypeString) {
  expect_open_error(
      st_bytes(R"({"w":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", "abcdefgh"),
      {"'w'", "unknown dtype 'F33'"});
  expect_open_error(st_bytes(R"({"w":{"dtype":32,"shape":[2],"data_offsets":[0,8]}})", "abcdefgh"),
                    {"'w'", "dtype"});
}

TEST_F(SafetensorsBadInput, StructuralProblems) {
  expect_open_error(st_bytes(R"({"w":{"dtype":"F32","shape":[2]}})", ""), {"'w'", "data_offsets"});
  expect_open_error(st_bytes(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                             "abcdefgh"),
                    {"'w' twice"});
  expect_open_error(st_bytes(R"({"__metadata__":{"format":1}})", ""), {"__metadata__", "'format'"});
}

TEST_F(SafetensorsBadInput, TruncatedRealFile) {
  std::string bytes = read_bytes(kMixed);
  expect_open_error(bytes.substr(0, bytes.size() / 2), {"tensor '", "truncated"});
}

TEST_F(SafetensorsBadInput, MissingTensor) {
  std::vector<Entry> es = h5_entries("transformer.");
  es.erase(
      std::remove_if(es.begin(), es.end(),
                     [](const Entry& e) { return e.name == "transformer.h.1.mlp.c_proj.bias"; }),
      es.end());
  std::string p = dir_.file("missing.safetensors");
  write_entries(p, es);
  ParamLayout L(tiny(), 1, 0, 1, 0);
  std::vector<float> v(L.total(), 3.0f);
  expect_user_error([&] { load_canonical(p, L, v.data()); },
                    {p, "missing tensor 'h.1.mlp.c_proj.bias'"});
  for (float x : v) ASSERT_EQ(x, 3.0f);
}

TEST_F(SafetensorsBadInput, WrongShape) {
  std::vector<Entry> es = h5_entries();
  for (Entry& e : es)
    if (e.name == "ln_f.bias") e.shape = {1, 32};
  std::string p = dir_.file("shape.safetensors");
  write_entries(p, es);
  ParamLayout L(tiny(), 1, 0, 1, 0);
  std::vector<float> v(L.total(), 3.0f);
  expect_user_error([&] { load_canonical(p, L, v.data()); },
                    {p, "'ln_f.bias'", "shape [1,32]", "needs [32]"});
  for (float x : v) ASSERT_EQ(x, 3.0f);
}

TEST_F(SafetensorsBadInput, NonFloatWeight) {
  std::vector<Entry> es = h5_entries();
  for (Entry& e : es)
    if (e.name == "wpe.weight") e.dtype = "I32";
  std::string p = dir_.file("int.safetensors");
  write_entries(p, es);
  ParamLayout L(tiny(), 1, 0, 1, 0);
  std::vector<float> v(L.total(), 3.0f);
  expect_user_error([&] { load_canonical(p, L, v.data()); }, {p, "'wpe.weight'", "dtype I32"});
}

TEST_F(SafetensorsBadInput, UntiedModelNeedsLmHead) {
  ParamLayout L(tiny(false), 1, 0, 1, 0);
  std::vector<float> v(L.total());
  expect_user_error([&] { load_canonical(kRounded, L, v.data()); },
                    {kRounded, "missing tensor 'lm_head.weight'", "tie_embeddings"});
}

TEST_F(SafetensorsBadInput, BothPrefixedAndPlainNames) {
  std::vector<Entry> es = h5_entries();
  std::vector<Entry> more = h5_entries("transformer.");
  es.push_back(more[3]);
  std::string p = dir_.file("both.safetensors");
  write_entries(p, es);
  ParamLayout L(tiny(), 1, 0, 1, 0);
  std::vector<float> v(L.total());
  expect_user_error([&] { load_canonical(p, L, v.data()); }, {p, "both", more[3].name});
}

// ---- (d) config.json -----------------------------------------------------------------------

TEST(HfConfig, SavedBesideTheWeightsWithTheModelNumbers) {
  auto pc = single_rank();
  TempDir dir;
  ModelConfig m = tiny(false);
  ParamLayout L(m, 1, 0, 1, 0);
  std::vector<float> w(L.total());
  init_params(L, m, 1, w.data());
  save_canonical(dir.file("model.safetensors"), L, w.data(), *pc, &m);
  json c = json::parse(read_bytes(dir.file("config.json")));
  EXPECT_EQ(c["model_type"], "gpt2");
  EXPECT_EQ(c["architectures"], json::array({"GPT2LMHeadModel"}));
  EXPECT_EQ(c["vocab_size"], 97);
  EXPECT_EQ(c["n_positions"], 16);  // rows of wpe (max_positions), not seq_len
  EXPECT_EQ(c["n_ctx"], 16);
  EXPECT_EQ(c["n_embd"], 32);
  EXPECT_EQ(c["n_layer"], 2);
  EXPECT_EQ(c["n_head"], 4);
  EXPECT_TRUE(c["n_inner"].is_null());
  EXPECT_EQ(c["activation_function"], "gelu_new");
  EXPECT_DOUBLE_EQ(c["layer_norm_epsilon"].get<double>(), 1e-5);
  EXPECT_EQ(c["tie_word_embeddings"], false);
  EXPECT_EQ(c["resid_pdrop"].get<double>(), 0.0);
  EXPECT_FALSE(c.contains("bos_token_id"));  // 97 tokens: no <|endoftext|> id to name
}

TEST(HfConfig, Gpt2SmallDefaults) {
  ModelConfig m;  // the defaults are GPT-2 124M
  json c = json::parse(hf_gpt2_config_json(m));
  EXPECT_EQ(c["vocab_size"], 50257);
  EXPECT_EQ(c["n_positions"], 1024);
  EXPECT_EQ(c["n_embd"], 768);
  EXPECT_EQ(c["n_layer"], 12);
  EXPECT_EQ(c["n_head"], 12);
  EXPECT_EQ(c["tie_word_embeddings"], true);
  EXPECT_EQ(c["bos_token_id"], 50256);
  EXPECT_EQ(c["eos_token_id"], 50256);
}

TEST(HfConfig, ExtensionDispatch) {
  EXPECT_TRUE(is_safetensors_path("a/model.safetensors"));
  EXPECT_TRUE(is_safetensors_path("MODEL.SafeTensors"));
  EXPECT_FALSE(is_safetensors_path("w.h5"));
  EXPECT_FALSE(is_safetensors_path("safetensors"));
}

}  // namespace
}  // namespace loom
