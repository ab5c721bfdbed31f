// Protocol-buffers wire encoding: keys are (field << 3) | wire type, as varints.
#include "core/proto_wire.h"

#include <cstring>

#include "core/check.h"

namespace loom {

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(char(v));
}

void ProtoWriter::key(int field, int wire_type) {
  LOOM_CHECK(field >= 1 && field < (1 << 29), "protobuf field number ", field);
  put_varint(buf_, (uint64_t(field) << 3) | uint64_t(wire_type));
}

void ProtoWriter::varint(int field, uint64_t v) {
  key(field, 0);
  put_varint(buf_, v);
}

void ProtoWriter::fixed64(int field, uint64_t v) {
  key(field, 1);
  for (int i = 0; i < 8; ++i) buf_.push_back(char((v >> (8 * i)) & 0xFF));
}

void ProtoWriter::fixed32(int field, uint32_t v) {
  key(field, 5);
  for (int i = 0; i < 4; ++i) buf_.push_back(char((v >> (8 * i)) & 0xFF));
}

void ProtoWriter::float64(int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  fixed64(field, bits);
}

void ProtoWriter::float32(int field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  fixed32(field, bits);
}

void ProtoWriter::bytes(int field, const std::string& b) {
  key(field, 2);
  put_varint(buf_, b.size());
  buf_ += b;
}

}  // namespace loom
