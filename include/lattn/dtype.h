// lattn/dtype.h — element types and their host conversions to and from f32.
//
// f16 (IEEE binary16) and bf16 convert with round-to-nearest-even, keep
// subnormals, infinities and NaN. fp8_e4m3 follows the OCP FP8 spec's E4M3
// ("e4m3fn", as CUDA's __nv_fp8_e4m3 and torch.float8_e4m3fn): bias 7, no
// infinities, max finite ±448, NaN = 0x7f / 0xff; conversion from f32
// saturates (|x| beyond 448 after rounding, and ±inf, become ±448; NaN stays
// NaN), which is what vLLM's fp8 KV-cache writes do.
//
// The integer types exist for index tensors (block tables, slot mappings,
// cumulative lengths), which travel as Tensor views too.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

namespace lattn {

enum class DType : uint8_t { f32, f16, bf16, fp8_e4m3, i32, i64, u8 };

// Size of one element in bytes.
constexpr int dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::f16:
      return 2;
    case DType::bf16:
      return 2;
    case DType::fp8_e4m3:
      return 1;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
  }
  return 0;
}

constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::fp8_e4m3;
}

// Short name: "f32", "f16", "bf16", "fp8_e4m3", "i32", "i64", "u8".
const char* dtype_name(DType t);
// PyTorch spelling, used in the seeds' messages: "torch.float32", "torch.float16",
// "torch.bfloat16", "torch.float8_e4m3fn", "torch.int32", "torch.int64", "torch.uint8".
const char* dtype_torch_name(DType t);
// Parses a short name or a common alias ("fp16", "half", "bfloat16", "float",
// "fp32", "fp8", "fp8_e4m3", "float8_e4m3fn", "torch.bfloat16", ...).
// Throws ValueError listing the accepted names otherwise.
DType parse_dtype(const std::string& name);

// ---- bit-level conversions (host, inline: used in hot CPU loops) ----------

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return f32_from_bits(sign);  // ±0
  // Subnormal: value = mant * 2^-24, exact in f32.
  const float v = float(mant) * 5.9604644775390625e-08f;
  return sign ? -v : v;
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t u = f32_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) {  // inf or NaN: keep NaN quiet and non-zero
    return uint16_t(sign | 0x7c00u | (a > 0x7f800000u ? (0x200u | ((a >> 13) & 0x3ffu)) : 0u));
  }
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520 -> inf
  if (a < 0x38800000u) {
    // Result is subnormal (or zero): value / 2^-24 rounded to nearest even.
    // a < 2^-14 so the product is exact in double and rint is RNE.
    const double v = double(f32_from_bits(a)) * 16777216.0;
    return uint16_t(sign | uint16_t(std::nearbyint(v)));
  }
  // Normal: rebias exponent, round 23-bit mantissa to 10 bits (RNE).
  const uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
  return uint16_t(sign | uint16_t((rounded - 0x38000000u) >> 13));
}

inline float bf16_to_f32(uint16_t b) { return f32_from_bits(uint32_t(b) << 16); }

inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // quiet NaN
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline float fp8e4m3_to_f32(uint8_t v) {
  const bool neg = v & 0x80u;
  const uint32_t exp = (v >> 3) & 0xfu;
  const uint32_t mant = v & 0x7u;
  float r;
  if (exp == 0xf && mant == 0x7) {
    r = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    r = float(mant) * 0.001953125f;  // mant * 2^-9
  } else {
    r = f32_from_bits(((exp + 120u) << 23) | (mant << 20));
  }
  return neg ? -r : r;
}

inline uint8_t f32_to_fp8e4m3(float f) {
  const uint32_t u = f32_bits(f);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint8_t(sign | 0x7fu);    // NaN
  if (a >= 0x43e80000u) return uint8_t(sign | 0x7eu);   // >= 464 (or inf): saturate to 448
  if (a < 0x3c800000u) {                                // < 2^-6: subnormal range
    const double v = double(f32_from_bits(a)) * 512.0;  // units of 2^-9, exact
    return uint8_t(sign | uint8_t(std::nearbyint(v)));  // 8 rounds up into the min normal
  }
  // Normal: keep 3 mantissa bits, RNE, rebias 127 -> 7.
  const uint32_t rounded = a + 0x7ffffu + ((a >> 20) & 1u);
  uint32_t bits = (rounded - 0x3c000000u) >> 20;
  if (bits > 0x7eu) bits = 0x7eu;  // [448, 464) rounds to 448 anyway
  return uint8_t(sign | bits);
}

// Reads element i of a buffer of dtype t as f32 (floating types only).
inline float load_as_f32(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32:
      return static_cast<const float*>(p)[i];
    case DType::f16:
      return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::bf16:
      return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::fp8_e4m3:
      return fp8e4m3_to_f32(static_cast<const uint8_t*>(p)[i]);
    case DType::i32:
      return float(static_cast<const int32_t*>(p)[i]);
    case DType::i64:
      return float(static_cast<const int64_t*>(p)[i]);
    case DType::u8:
      return float(static_cast<const uint8_t*>(p)[i]);
  }
  return 0.f;
}

// Writes f32 value v as element i of a buffer of floating dtype t (RNE; fp8 saturates).
inline void store_from_f32(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::f32:
      static_cast<float*>(p)[i] = v;
      break;
    case DType::f16:
      static_cast<uint16_t*>(p)[i] = f32_to_f16(v);
      break;
    case DType::bf16:
      static_cast<uint16_t*>(p)[i] = f32_to_bf16(v);
      break;
    case DType::fp8_e4m3:
      static_cast<uint8_t*>(p)[i] = f32_to_fp8e4m3(v);
      break;
    case DType::i32:
      static_cast<int32_t*>(p)[i] = int32_t(v);
      break;
    case DType::i64:
      static_cast<int64_t*>(p)[i] = int64_t(v);
      break;
    case DType::u8:
      static_cast<uint8_t*>(p)[i] = uint8_t(v);
      break;
  }
}

// Rounds v through dtype t and back (the value a store then load would give).
inline float round_through(float v, DType t) {
  switch (t) {
    case DType::f16:
      return f16_to_f32(f32_to_f16(v));
    case DType::bf16:
      return bf16_to_f32(f32_to_bf16(v));
    case DType::fp8_e4m3:
      return fp8e4m3_to_f32(f32_to_fp8e4m3(v));
    default:
      return v;
  }
}

}  // namespace lattn
