// The TensorBoard encoder against bytes worked out by hand: CRC-32C vectors, varints, fixed
// fields, a TFRecord frame and whole Event messages; and the tags of metrics.jsonl lines.
#include <gtest/gtest.h>

#include <string>

#include "core/crc32c.h"
#include "core/proto_wire.h"
#include "train/tensorboard.h"

namespace loom {
namespace {

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s.push_back(char(x));
  return s;
}

// RFC 3720 (iSCSI) appendix B.4 gives these CRC-32C values; "123456789" is the usual check.
TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  std::string up;
  for (int i = 0; i < 32; ++i) up.push_back(char(i));
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(up.data(), 32), 0x46DD794Eu);
  // Continuing from a partial CRC equals one pass.
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xE3069283u);
}

// mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8: for c = 0xE3069283, c >> 15 = 0x0001C60D,
// c << 17 = 0x25060000 (mod 2^32), their OR 0x2507C60D, plus 0xA282EAD8 = 0xC78AB0E5.
TEST(Crc32c, Mask) { EXPECT_EQ(masked_crc32c("123456789", 9), 0xC78AB0E5u); }

TEST(ProtoWire, Varints) {
  std::string s;
  put_varint(s, 0);
  EXPECT_EQ(s, bytes({0x00}));
  s.clear();
  put_varint(s, 300);  // 300 = 0b10_0101100: 0xAC (low 7 bits | more), 0x02
  EXPECT_EQ(s, bytes({0xAC, 0x02}));
  s.clear();
  put_varint(s, 127);
  put_varint(s, 128);
  EXPECT_EQ(s, bytes({0x7F, 0x80, 0x01}));
  s.clear();
  put_varint(s, uint64_t(int64_t(-1)));  // an int64 of -1: ten bytes, 9 x 0xFF then 0x01
  EXPECT_EQ(s, bytes({0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01}));
}

TEST(ProtoWire, Fields) {
  ProtoWriter w;
  w.varint(2, 150);           // key 2<<3|0 = 0x10, then 150 = 0x96 0x01
  w.float32(2, 1.0f);         // key 2<<3|5 = 0x15, 0x3F800000 little-endian
  w.float64(1, -2.0);         // key 1<<3|1 = 0x09, 0xC000000000000000 little-endian
  w.bytes(3, "hi");           // key 3<<3|2 = 0x1A, length 2, the bytes
  w.fixed32(20, 0x01020304);  // key 20<<3|5 = 165 = 0xA5 0x01 (a two-byte varint key)
  EXPECT_EQ(w.data(),
            bytes({0x10, 0x96, 0x01, 0x15, 0x00, 0x00, 0x80, 0x3F, 0x09, 0,    0,    0,    0,   0,
                   0,    0x00, 0xC0, 0x1A, 0x02, 'h',  'i',  0xA5, 0x01, 0x04, 0x03, 0x02, 0x01}));
}

// uint64 length 3, masked CRC-32C of those 8 bytes, "abc", masked CRC-32C of "abc". The two
// CRCs were computed with a bit-at-a-time (table-free) CRC-32C written separately from this one.
TEST(TensorBoard, TfRecordFrame) {
  EXPECT_EQ(tfrecord("abc"), bytes({0x03, 0, 0, 0, 0, 0, 0, 0, 0xB0, 0x99, 0x49, 0x0E, 'a', 'b',
                                    'c', 0x6E, 0x57, 0xF1, 0x21}));
}

TEST(TensorBoard, FileVersionEvent) {
  // wall_time 1.5 = 0x3FF8000000000000; file_version (field 3) "brain.Event:2", 13 bytes.
  std::string want = bytes({0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F, 0x1A, 0x0D});
  want += "brain.Event:2";
  EXPECT_EQ(event_file_version(1.5, "brain.Event:2"), want);
}

TEST(TensorBoard, ScalarEvent) {
  // Value {tag "a", simple_value 1.0f} = 0A 01 'a' 15 00 00 80 3F (8 bytes); Summary {value} =
  // 0A 08 + those 8 (10 bytes); Event = wall_time 09 + 8 bytes, step 10 07, summary 2A 0A + 10.
  const std::string want =
      bytes({0x09, 0,    0,    0,    0,    0,   0,    0xF8, 0x3F, 0x10, 0x07, 0x2A,
             0x0A, 0x0A, 0x08, 0x0A, 0x01, 'a', 0x15, 0x00, 0x00, 0x80, 0x3F});
  EXPECT_EQ(event_scalars(1.5, 7, {{"a", 1.0f}}), want);
  // Two values: two Summary.Value entries in order; a step of 300 is the varint AC 02.
  const std::string two = event_scalars(1.5, 300, {{"a", 1.0f}, {"b", -2.0f}});
  EXPECT_EQ(two.substr(9, 3), bytes({0x10, 0xAC, 0x02}));
  EXPECT_EQ(two.substr(12),
            bytes({0x2A, 0x14, 0x0A, 0x08, 0x0A, 0x01, 'a',  0x15, 0x00, 0x00, 0x80,
                   0x3F, 0x0A, 0x08, 0x0A, 0x01, 'b',  0x15, 0x00, 0x00, 0x00, 0xC0}));
}

TEST(TensorBoard, SessionStartEvent) {
  // wall_time; step 5 = 10 05; session_log (field 7, wire type 2) = 3A 02 + SessionLog {status
  // (field 1, varint) START = 1} = 08 01.
  EXPECT_EQ(event_session_start(1.5, 5),
            bytes({0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F, 0x10, 0x05, 0x3A, 0x02, 0x08, 0x01}));
}

TEST(TensorBoard, ScalarsOfMetricsLines) {
  auto train = nlohmann::ordered_json::parse(
      R"({"step":3,"loss":2.5,"lr":0.001,"grad_norm":1.25,"tokens":96,"step_ms":10.0,)"
      R"("tokens_per_s":3200.0,"mfu":null,"mem_peak_bytes":1048576,)"
      R"("time":{"forward":4.0,"backward":5.0}})");
  const Scalars want = {{"train/loss", 2.5f},
                        {"train/lr", 0.001f},
                        {"train/grad_norm", 1.25f},
                        {"train/step_ms", 10.0f},
                        {"train/tokens_per_s", 3200.0f},
                        {"train/mem_peak_bytes", 1048576.0f},
                        {"time/forward", 4.0f},
                        {"time/backward", 5.0f}};
  EXPECT_EQ(tensorboard_scalars(train), want);  // a null mfu (peak unknown) is left out
  train["mfu"] = 0.25;
  train["loss_scale"] = 1024.0;
  const Scalars with = tensorboard_scalars(train);
  ASSERT_EQ(with.size(), want.size() + 2);
  EXPECT_EQ(with[5], Scalars::value_type("train/mfu", 0.25f));
  EXPECT_EQ(with[7], Scalars::value_type("train/loss_scale", 1024.0f));
  auto eval =
      nlohmann::ordered_json::parse(R"({"step":4,"val_loss":3.0,"val_ppl":20.08,"eval_ms":5.0})");
  EXPECT_EQ(tensorboard_scalars(eval), Scalars({{"val/loss", 3.0f}}));
  auto resume = nlohmann::ordered_json::parse(R"({"event":"resume","step":4,"checkpoint":"x"})");
  EXPECT_TRUE(tensorboard_scalars(resume).empty());
}

}  // namespace
}  // namespace loom
