// Names of element types and devices, for messages; the train.dtype parser.
#include "core/dtype.h"

#include "core/check.h"

namespace loom {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "fp32";
    case DType::BF16:
      return "bf16";
    case DType::F16:
      return "fp16";
    case DType::I32:
      return "int32";
    case DType::U16:
      return "uint16";
    case DType::F64:
      return "fp64";
  }
  return "?";
}
const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

DType parse_train_dtype(const std::string& dtype) {
  if (dtype == "bf16") return DType::BF16;
  if (dtype == "fp16") return DType::F16;
  if (dtype == "fp32") return DType::F32;
  throw UserError(str("train.dtype: '", dtype, "' is not one of fp32, bf16, fp16"));
}

}  // namespace loom
