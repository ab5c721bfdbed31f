// A protocol-buffers wire-format encoder: varints, fixed32/fixed64 and length-delimited fields
// appended to a byte string, enough to write messages such as TensorBoard's Event by hand.
#pragma once
#include <cstdint>
#include <string>

namespace loom {

// Appends the base-128 varint of v (7 bits a byte, least significant first, high bit = more).
void put_varint(std::string& out, uint64_t v);

// One message being built; fields are appended in the order the calls come.
class ProtoWriter {
 public:
  // Wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
  void varint(int field, uint64_t v);   // int32/int64/uint64/bool (negative int64: 10 bytes)
  void fixed64(int field, uint64_t v);  // little-endian 8 bytes
  void fixed32(int field, uint32_t v);  // little-endian 4 bytes
  void float64(int field, double v);    // `double`: fixed64 of the IEEE bits
  void float32(int field, float v);     // `float`: fixed32 of the IEEE bits
  void bytes(int field, const std::string& b);  // string, bytes or an embedded message
  const std::string& data() const { return buf_; }

 private:
  void key(int field, int wire_type);
  std::string buf_;
};

}  // namespace loom
