// The fp8_ds_mla entry codec (lattn/sparse.h): one latent entry as 512 fp8
// e4m3 values, one f32 scale per 128-element tile and the bf16 rope part.
// The host encoder is the definition every device implementation matches
// bit for bit (same f32 division, same rounding).
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>

#include "core/sparse/sparse_internal.h"
#include "lattn/check.h"
#include "lattn/dtype.h"
#include "lattn/sparse.h"

namespace lattn {

void validate_fp8_ds_mla_cache(const LatentCache& cache, const char* op) {
  const int64_t L = cache.kv_lora_rank, R = cache.qk_rope_head_dim;
  check_arg(L % kFp8DsMlaTile == 0, op, "cache",
            "have kv_lora_rank a multiple of 128 for the fp8_ds_mla format (one scale per 128-element tile)",
            std::to_string(L));
  check_arg(cache.data.size(2) == fp8_ds_mla_entry_bytes(L, R), op, "cache",
            "have fp8_ds_mla entries of L + 4·L/128 + 2·R = " + std::to_string(fp8_ds_mla_entry_bytes(L, R)) + " bytes",
            std::to_string(cache.data.size(2)) + " (shape " + cache.data.shape_str() + ")");
}

void fp8_ds_mla_encode(const float* latent, const float* rope, int kv_lora_rank, int qk_rope_head_dim, uint8_t* entry) {
  const int tiles = kv_lora_rank / kFp8DsMlaTile;
  uint8_t* scales = entry + kv_lora_rank;
  for (int tile = 0; tile < tiles; ++tile) {
    const float* x = latent + tile * kFp8DsMlaTile;
    // amax over finite values: a NaN stays NaN (0x7f) and an infinity
    // saturates to ±448 instead of turning the whole tile into 0 or NaN.
    float amax = 0.f;
    for (int i = 0; i < kFp8DsMlaTile; ++i) {
      if (std::isfinite(x[i])) amax = std::fmax(amax, std::fabs(x[i]));
    }
    // FLT_MIN keeps a zero tile's scale positive (its values stay 0, not 0/0).
    const float scale = std::fmax(amax / kFp8E4m3Max, FLT_MIN);
    for (int i = 0; i < kFp8DsMlaTile; ++i) entry[tile * kFp8DsMlaTile + i] = f32_to_fp8e4m3(x[i] / scale);
    std::memcpy(scales + 4 * tile, &scale, 4);
  }
  uint8_t* pe = scales + 4 * tiles;
  for (int i = 0; i < qk_rope_head_dim; ++i) {
    const uint16_t b = f32_to_bf16(rope[i]);
    std::memcpy(pe + 2 * i, &b, 2);
  }
}

void fp8_ds_mla_decode(const uint8_t* entry, int kv_lora_rank, int qk_rope_head_dim, float* out) {
  const int tiles = kv_lora_rank / kFp8DsMlaTile;
  for (int tile = 0; tile < tiles; ++tile) {
    float scale;
    std::memcpy(&scale, entry + kv_lora_rank + 4 * tile, 4);
    for (int i = 0; i < kFp8DsMlaTile; ++i) {
      out[tile * kFp8DsMlaTile + i] = fp8e4m3_to_f32(entry[tile * kFp8DsMlaTile + i]) * scale;
    }
  }
  const uint8_t* pe = entry + kv_lora_rank + 4 * tiles;
  for (int i = 0; i < qk_rope_head_dim; ++i) {
    uint16_t b;
    std::memcpy(&b, pe + 2 * i, 2);
    out[kv_lora_rank + i] = bf16_to_f32(b);
  }
}

void fp8_ds_mla_decode_f64(const uint8_t* entry, int kv_lora_rank, int qk_rope_head_dim, double* out) {
  const int tiles = kv_lora_rank / kFp8DsMlaTile;
  for (int tile = 0; tile < tiles; ++tile) {
    float scale;
    std::memcpy(&scale, entry + kv_lora_rank + 4 * tile, 4);
    for (int i = 0; i < kFp8DsMlaTile; ++i) {
      out[tile * kFp8DsMlaTile + i] = double(fp8e4m3_to_f32(entry[tile * kFp8DsMlaTile + i])) * double(scale);
    }
  }
  const uint8_t* pe = entry + kv_lora_rank + 4 * tiles;
  for (int i = 0; i < qk_rope_head_dim; ++i) {
    uint16_t b;
    std::memcpy(&b, pe + 2 * i, 2);
    out[kv_lora_rank + i] = double(bf16_to_f32(b));
  }
}

}  // namespace lattn
