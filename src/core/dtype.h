// Element types and devices of tensors.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace loom {

enum class DType : uint8_t { F32, BF16, F16, I32, U16, F64 };
enum class Device : uint8_t { CPU, CUDA };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::I32:
      return 4;
    case DType::BF16:
      return 2;
    case DType::F16:
      return 2;
    case DType::U16:
      return 2;
    case DType::F64:
      return 8;
  }
  return 0;
}
const char* dtype_name(DType t);
const char* device_name(Device d);
// The activation dtype train.dtype names (fp32 | bf16 | fp16); a UserError otherwise.
DType parse_train_dtype(const std::string& dtype);

}  // namespace loom
