// Argument and threading helpers of the `cpu` backends (see cpu_backend_common.h).
#include "cpu/cpu_backend_common.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "lattn/check.h"
#include "lattn/errors.h"

namespace lattn::cpu {
namespace {

std::string dtype_list(const std::vector<DType>& dtypes) {
  std::string s;
  for (DType d : dtypes) s += std::string(s.empty() ? "" : ", ") + dtype_name(d);
  return s;
}

void check_positive(const char* who, const char* field, int value) {
  check_arg(value > 0, who, field, "be positive", std::to_string(value));
}

void check_common(const char* who, const RunContext& ctx, float scale, DType dtype, const std::vector<DType>& dtypes) {
  check_arg(ctx.device.is_cpu(), who, "params.context.device", "be cpu", device_name(ctx.device));
  check_arg(std::isfinite(scale) && scale > 0.f, who, "params.scale", "be finite and positive", std::to_string(scale));
  check_arg(std::find(dtypes.begin(), dtypes.end(), dtype) != dtypes.end(), who, "params.dtype",
            "be one of " + dtype_list(dtypes), dtype_name(dtype));
  check_arg(ctx.num_threads >= 0, who, "params.context.num_threads", "be >= 0 (0 = all)",
            std::to_string(ctx.num_threads));
}

}  // namespace

int thread_count(const RunContext& ctx) { return ctx.num_threads > 0 ? ctx.num_threads : omp_get_max_threads(); }

std::vector<int32_t> read_i32(const char* op, const char* arg, const Tensor& t, int64_t count) {
  check_device(op, arg, t, Device::cpu());
  check_dtype(op, arg, t, DType::i32);
  check_shape(op, arg, t, {count});
  std::vector<int32_t> values(static_cast<size_t>(count));
  const int32_t* p = t.data_as<int32_t>();
  for (int64_t i = 0; i < count; ++i) values[size_t(i)] = p[i * t.stride(0)];
  return values;
}

std::vector<int32_t> read_offsets(const char* op, const char* arg, const Tensor& t, int64_t count, int64_t total) {
  std::vector<int32_t> v = read_i32(op, arg, t, count + 1);
  check_arg(v[0] == 0, op, arg, "start at 0", std::to_string(v[0]));
  for (size_t i = 1; i < v.size(); ++i) {
    check_arg(v[i] >= v[i - 1], op, arg, "be non-decreasing",
              "[" + std::to_string(i - 1) + "] = " + std::to_string(v[i - 1]) + " > [" + std::to_string(i) +
                  "] = " + std::to_string(v[i]));
  }
  if (total >= 0) check_arg(v.back() == total, op, arg, "end at " + std::to_string(total), std::to_string(v.back()));
  return v;
}

void validate_prefill_params(const char* who, const PrefillBackendParams& params, const std::vector<DType>& dtypes) {
  check_positive(who, "params.num_heads", params.num_heads);
  check_positive(who, "params.qk_nope_head_dim + qk_rope_head_dim", params.qk_nope_head_dim + params.qk_rope_head_dim);
  check_arg(params.qk_nope_head_dim >= 0 && params.qk_rope_head_dim >= 0, who, "params.qk_nope/rope_head_dim",
            "be >= 0", std::to_string(params.qk_nope_head_dim) + "/" + std::to_string(params.qk_rope_head_dim));
  check_positive(who, "params.v_head_dim", params.v_head_dim);
  check_common(who, params.context, params.scale, params.dtype, dtypes);
}

void validate_decode_params(const char* who, const DecodeBackendParams& params, const std::vector<DType>& dtypes,
                            const std::vector<DType>& cache_dtypes) {
  check_positive(who, "params.num_heads", params.num_heads);
  check_positive(who, "params.kv_lora_rank", params.kv_lora_rank);
  check_arg(params.qk_rope_head_dim >= 0, who, "params.qk_rope_head_dim", "be >= 0",
            std::to_string(params.qk_rope_head_dim));
  check_common(who, params.context, params.scale, params.dtype, dtypes);
  check_arg(std::find(cache_dtypes.begin(), cache_dtypes.end(), params.kv_cache_dtype) != cache_dtypes.end(), who,
            "params.kv_cache_dtype", "be one of " + dtype_list(cache_dtypes), dtype_name(params.kv_cache_dtype));
}

}  // namespace lattn::cpu
