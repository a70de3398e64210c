// DType names and parsing (conversions are inline in lattn/dtype.h).
#include "lattn/dtype.h"

#include <algorithm>
#include <cctype>

#include "lattn/errors.h"

namespace lattn {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::fp8_e4m3:
      return "fp8_e4m3";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
  }
  return "?";
}

const char* dtype_torch_name(DType t) {
  switch (t) {
    case DType::f32:
      return "torch.float32";
    case DType::f16:
      return "torch.float16";
    case DType::bf16:
      return "torch.bfloat16";
    case DType::fp8_e4m3:
      return "torch.float8_e4m3fn";
    case DType::i32:
      return "torch.int32";
    case DType::i64:
      return "torch.int64";
    case DType::u8:
      return "torch.uint8";
  }
  return "?";
}

DType parse_dtype(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (n.rfind("torch.", 0) == 0) n = n.substr(6);
  if (n == "f32" || n == "fp32" || n == "float" || n == "float32") return DType::f32;
  if (n == "f16" || n == "fp16" || n == "half" || n == "float16") return DType::f16;
  if (n == "bf16" || n == "bfloat16") return DType::bf16;
  if (n == "fp8" || n == "fp8_e4m3" || n == "float8_e4m3fn" || n == "e4m3") return DType::fp8_e4m3;
  if (n == "i32" || n == "int32" || n == "int") return DType::i32;
  if (n == "i64" || n == "int64" || n == "long") return DType::i64;
  if (n == "u8" || n == "uint8") return DType::u8;
  throw ValueError("unknown dtype '" + name +
                   "'; expected one of f32, f16, bf16, fp8_e4m3 (aliases: fp32, fp16, "
                   "bfloat16, fp8, torch.* names), i32, i64, u8");
}

}  // namespace lattn
