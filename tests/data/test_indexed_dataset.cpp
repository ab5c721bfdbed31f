// MMIDIDX: a hand-built file in the published layout, writer byte-exactness, round trips, and
// every corruption the reader must name.
#include <gtest/gtest.h>

#include "core/check.h"
#include "data/indexed_dataset.h"
#include "test_util.h"

using namespace loom;
using namespace loom::testing;

namespace {

// Builds PREFIX.idx/.bin byte by byte from Megatron's _IndexWriter layout (independent of the
// writer under test): documents {[10, 11, 12], [13]} and {[65535, 0]}, uint16 tokens.
std::vector<uint8_t> hand_idx(uint64_t version = 1, uint8_t dtype = 8) {
  const uint8_t magic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
  std::vector<uint8_t> idx(magic, magic + 9);
  put<uint64_t>(idx, version);
  put<uint8_t>(idx, dtype);
  put<uint64_t>(idx, 3);  // sequences
  put<uint64_t>(idx, 3);  // document index length = documents + 1
  for (int32_t s : {3, 1, 2}) put<int32_t>(idx, s);
  for (int64_t p : {0, 6, 8}) put<int64_t>(idx, p);  // byte offsets: 2 bytes per token
  for (int64_t d : {0, 2, 3}) put<int64_t>(idx, d);
  return idx;
}
std::vector<uint8_t> hand_bin() {
  std::vector<uint8_t> bin;
  for (uint16_t t : {10, 11, 12, 13, 65535, 0}) put<uint16_t>(bin, t);
  return bin;
}

std::string expect_user_error(const std::string& prefix) {
  try {
    IndexedDataset ds(prefix);
  } catch (const UserError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no UserError for " << prefix;
  return "";
}

}  // namespace

TEST(IndexedDataset, ReadsHandBuiltMegatronFile) {
  std::string dir = scratch_dir("hand");
  write_file(dir + "/h.idx", hand_idx());
  write_file(dir + "/h.bin", hand_bin());
  IndexedDataset ds(dir + "/h");
  EXPECT_EQ(int(ds.dtype()), 8);
  EXPECT_EQ(ds.num_sequences(), 3);
  EXPECT_EQ(ds.num_documents(), 2);
  EXPECT_EQ(ds.num_tokens(), 6);
  EXPECT_EQ(ds.doc_begin(1), 2);
  EXPECT_EQ(ds.doc_end(1), 3);
  EXPECT_EQ(ds.document_tokens(0), 4);
  int32_t out[3];
  ds.read(0, 0, 3, out);
  EXPECT_EQ(out[0], 10);
  EXPECT_EQ(out[2], 12);
  ds.read(2, 0, 2, out);
  EXPECT_EQ(out[0], 65535);  // uint16 is unsigned: no sign extension
  EXPECT_EQ(out[1], 0);
  ds.read(0, 1, 1, out);
  EXPECT_EQ(out[0], 11);
}

TEST(IndexedDataset, WriterIsByteIdenticalToTheLayout) {
  std::string dir = scratch_dir("writer_bytes");
  {
    IndexedDatasetWriter w(dir + "/w", mmidx::IdxDType::UInt16);
    int32_t a[] = {10, 11, 12}, b[] = {13}, c[] = {65535, 0};
    w.add_sequence(a, 3);
    w.add_sequence(b, 1);
    w.end_document();
    w.add_document(c, 2);
    w.finish();
  }
  EXPECT_EQ(read_file(dir + "/w.idx"), hand_idx());
  EXPECT_EQ(read_file(dir + "/w.bin"), hand_bin());
}

TEST(IndexedDataset, Int32RoundTripAndMerge) {
  std::string dir = scratch_dir("int32");
  std::vector<std::vector<int32_t>> docs = {{1, 2, 3}, {}, {70000, 5}, {2147483647}};
  {
    IndexedDatasetWriter w(dir + "/a", mmidx::IdxDType::Int32);
    for (auto& d : docs) w.add_document(d.data(), d.size());
    w.finish();
  }
  IndexedDataset a(dir + "/a");
  ASSERT_EQ(a.num_documents(), 4);
  ASSERT_EQ(a.dtype(), mmidx::IdxDType::Int32);
  for (size_t d = 0; d < docs.size(); ++d) {
    ASSERT_EQ(a.document_tokens(int64_t(d)), int64_t(docs[d].size()));
    std::vector<int32_t> got(docs[d].size());
    if (!got.empty()) a.read(a.doc_begin(int64_t(d)), 0, int64_t(got.size()), got.data());
    EXPECT_EQ(got, docs[d]) << "document " << d;
  }
  {
    IndexedDatasetWriter w(dir + "/m", mmidx::IdxDType::Int32);
    w.append(a);
    w.append(a);
    w.finish();
  }
  IndexedDataset m(dir + "/m");
  EXPECT_EQ(m.num_documents(), 8);
  EXPECT_EQ(m.num_tokens(), 2 * a.num_tokens());
  int32_t t;
  m.read(m.doc_begin(6), 1, 1, &t);
  EXPECT_EQ(t, 5);
  // Merging with another dtype is a user error.
  IndexedDatasetWriter w16(dir + "/x", mmidx::IdxDType::UInt16);
  EXPECT_THROW(w16.append(a), UserError);
}

TEST(IndexedDataset, SpilledIndexIsIdentical) {
  // The writer spills index entries to temporary files every `spill` entries; the result must
  // not depend on it, and the temporary files must be gone afterwards.
  std::string dir = scratch_dir("spill");
  for (size_t spill : {size_t(1), size_t(3), size_t(1) << 20}) {
    IndexedDatasetWriter w(dir + "/s" + std::to_string(spill), mmidx::IdxDType::UInt16, spill);
    for (int d = 0; d < 50; ++d) {
      std::vector<int32_t> doc(size_t(d % 7), d);
      w.add_sequence(doc.data(), doc.size());
      if (d % 3 == 0) w.add_sequence(doc.data(), doc.size());  // some documents hold two
      w.end_document();
    }
    EXPECT_EQ(w.num_documents(), 50);
    w.finish();
  }
  for (const char* ext : {".idx", ".bin"}) {
    EXPECT_EQ(read_file(dir + "/s1" + ext), read_file(dir + "/s1048576" + ext)) << ext;
    EXPECT_EQ(read_file(dir + "/s3" + ext), read_file(dir + "/s1048576" + ext)) << ext;
  }
  IndexedDataset ds(dir + "/s1");
  EXPECT_EQ(ds.num_documents(), 50);
  EXPECT_EQ(ds.num_sequences(), 67);
  EXPECT_EQ(ds.doc_begin(4), 6);  // documents 0 and 3 hold two sequences
  std::FILE* p = popen(("ls '" + dir + "' | grep -c tmp").c_str(), "r");
  char buf[16] = {0};
  if (p && std::fgets(buf, sizeof buf, p)) {
    EXPECT_STREQ(buf, "0\n") << "temporary files left in " << dir;
  }
  if (p) pclose(p);
}

TEST(IndexedDataset, UnfinishedWriterLeavesNothing) {
  std::string dir = scratch_dir("unfinished");
  {
    // Spills: temporary index files too.
    IndexedDatasetWriter w(dir + "/p", mmidx::IdxDType::UInt16, 2);
    int32_t a[] = {1, 2};
    for (int i = 0; i < 5; ++i) w.add_document(a, 2);
    int32_t big[] = {70000};
    EXPECT_THROW(w.add_document(big, 1), UserError);  // does not fit uint16
  }
  std::string listing;
  std::FILE* p = popen(("ls -A '" + dir + "'").c_str(), "r");
  char buf[256];
  while (p && std::fgets(buf, sizeof buf, p)) listing += buf;
  if (p) pclose(p);
  EXPECT_EQ(listing, "") << "left behind: " << listing;
}

TEST(IndexedDataset, RejectsEachCorruptionWithTheFileName) {
  std::string dir = scratch_dir("corrupt");
  auto make = [&](const std::string& name, std::vector<uint8_t> idx, std::vector<uint8_t> bin) {
    write_file(dir + "/" + name + ".idx", idx);
    write_file(dir + "/" + name + ".bin", bin);
    return dir + "/" + name;
  };
  auto idx = hand_idx();
  auto bad_magic = idx;
  bad_magic[0] = 'X';
  std::string msg = expect_user_error(make("magic", bad_magic, hand_bin()));
  EXPECT_NE(msg.find("magic.idx"), std::string::npos) << msg;
  EXPECT_NE(msg.find("magic"), std::string::npos) << msg;

  msg = expect_user_error(make("version", hand_idx(2), hand_bin()));
  EXPECT_NE(msg.find("version.idx"), std::string::npos) << msg;
  EXPECT_NE(msg.find("version 2"), std::string::npos) << msg;

  for (uint8_t code : {0, 9, 200}) {
    msg = expect_user_error(make("dtype", hand_idx(1, code), hand_bin()));
    EXPECT_NE(msg.find("dtype code " + std::to_string(code)), std::string::npos) << msg;
  }

  auto trunc = idx;
  trunc.resize(idx.size() - 5);
  msg = expect_user_error(make("truncidx", trunc, hand_bin()));
  EXPECT_NE(msg.find("truncidx.idx: truncated"), std::string::npos) << msg;
  trunc.resize(20);
  msg = expect_user_error(make("header", trunc, hand_bin()));
  EXPECT_NE(msg.find("header.idx: truncated"), std::string::npos) << msg;

  auto bin = hand_bin();
  bin.pop_back();
  msg = expect_user_error(make("truncbin", idx, bin));
  EXPECT_NE(msg.find("truncbin.bin is "), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  bin = hand_bin();
  bin.push_back(0);
  bin.push_back(0);
  msg = expect_user_error(make("longbin", idx, bin));
  EXPECT_NE(msg.find("longbin.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("trailing"), std::string::npos) << msg;

  auto bad_doc = idx;
  bad_doc[bad_doc.size() - 8] = 7;  // last doc_idx entry 3 -> 7
  msg = expect_user_error(make("docidx", bad_doc, hand_bin()));
  EXPECT_NE(msg.find("docidx.idx"), std::string::npos) << msg;

  msg = expect_user_error(dir + "/missing");
  EXPECT_NE(msg.find("missing.idx: cannot open"), std::string::npos) << msg;
  write_file(dir + "/nobin.idx", idx);
  msg = expect_user_error(dir + "/nobin");
  EXPECT_NE(msg.find("nobin.bin: cannot open"), std::string::npos) << msg;
}

// A .bin shorter than its .idx describes is refused when the dataset is opened, with both file
// names and both sizes, whether one byte or everything is missing.
TEST(IndexedDataset, ShortBinIsRefusedAtOpenNamingBothFilesAndSizes) {
  const std::string dir = scratch_dir("shortbin");
  const std::vector<uint8_t> full = hand_bin();
  write_file(dir + "/s.idx", hand_idx());
  for (size_t keep : {full.size() - 1, full.size() / 2, size_t(0)}) {
    write_file(dir + "/s.bin", std::vector<uint8_t>(full.begin(), full.begin() + long(keep)));
    const std::string msg = expect_user_error(dir + "/s");
    const std::string want = dir + "/s.bin is " + std::to_string(keep) + " bytes but " + dir +
                             "/s.idx describes " + std::to_string(full.size()) + " bytes";
    EXPECT_NE(msg.find(want), std::string::npos) << msg;
    EXPECT_NE(msg.find("the .bin is truncated"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(IndexedDataset, FloatDtypeOpensButIsNotTokens) {
  std::string dir = scratch_dir("float");
  auto idx = hand_idx(1, 7);  // float32: 4 bytes each, so pointers 0, 12, 16 and 24 bytes
  // Patch pointers for 4-byte items.
  const size_t ptr_at = 34 + 12;
  int64_t ptrs[3] = {0, 12, 16};
  std::memcpy(idx.data() + ptr_at, ptrs, sizeof ptrs);
  write_file(dir + "/f.idx", idx);
  write_file(dir + "/f.bin", std::vector<uint8_t>(24, 0));
  IndexedDataset ds(dir + "/f");
  int32_t out[3];
  EXPECT_THROW(ds.read(0, 0, 3, out), UserError);
}

TEST(IndexedDataset, DtypeForVocab) {
  EXPECT_EQ(mmidx::dtype_for_vocab(257), mmidx::IdxDType::UInt16);
  EXPECT_EQ(mmidx::dtype_for_vocab(50257), mmidx::IdxDType::UInt16);
  // Megatron: uint16 only below 65500.
  EXPECT_EQ(mmidx::dtype_for_vocab(65500), mmidx::IdxDType::Int32);
  EXPECT_EQ(mmidx::dtype_for_vocab(128256), mmidx::IdxDType::Int32);
  EXPECT_EQ(mmidx::dtype_size(mmidx::IdxDType::UInt16), 2u);
  EXPECT_STREQ(mmidx::dtype_name(mmidx::IdxDType(4)), "int32");
}
