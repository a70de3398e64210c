// Kernel-level decode (lattn/functional.h): a decode-only batch planned with
// the metadata builder, run by a decode backend instance per softmax scale.
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "core/types/cache_checks.h"
#include "lattn/check.h"
#include "lattn/errors.h"
#include "lattn/functional.h"
#include "lattn/ops.h"
#include "lattn/selector.h"

namespace lattn {

struct DecodePlan::Impl {
  DecodePlanParams params;
  KvCacheSpec cache;  // what the plan serves: L, R, kv_cache_dtype, block size
  int num_requests = 0;
  int num_tokens = 0;
  MlaMetadata metadata;  // decode-only; metadata.decode is set
  std::shared_ptr<const DecodeBackendClass> cls;
  std::string backend_name;
  // One prepared instance per softmax scale (the scale is a construction
  // parameter of a backend instance).
  std::map<float, std::unique_ptr<DecodeBackend>> instances;
  // The two-tensor form's combined cache (when ckv and kpe are not adjacent).
  OwnedTensor combined;
  OwnedTensor combined_slots;  // [num_blocks * block_size] int64: 0, 1, 2, ...

  DecodeBackend& instance(float scale) {
    auto it = instances.find(scale);
    if (it == instances.end()) {
      DecodeBackendParams p;
      p.num_heads = params.num_heads;
      p.scale = scale;
      p.kv_lora_rank = params.kv_lora_rank;
      p.qk_rope_head_dim = params.qk_rope_head_dim;
      p.dtype = params.dtype;
      p.kv_cache_dtype = params.kv_cache_dtype;
      p.context = RunContext{params.device, params.stream, params.num_threads};
      std::unique_ptr<DecodeBackend> b = cls->create(p);
      b->prepare_metadata(*metadata.decode);
      it = instances.emplace(scale, std::move(b)).first;
    }
    it->second->set_stream(params.stream);
    return *it->second;
  }
};

namespace {

constexpr const char* kPlanOp = "mla_decode_plan";
constexpr const char* kDecodeOp = "mla_decode";

// A host copy of a small int32 index array (any device).
OwnedTensor host_copy_i32(const Tensor& t, const char* arg) {
  check_defined(kPlanOp, arg, t);
  check_dtype(kPlanOp, arg, t, DType::i32);
  check_contiguous(kPlanOp, arg, t);
  OwnedTensor host = OwnedTensor::empty(t.shape(), DType::i32);
  if (t.numel() > 0) copy_tensor(t, host);
  return host;
}

}  // namespace

DecodePlan::DecodePlan(const DecodePlanParams& params, const Tensor& block_table, const Tensor& seq_lens,
                       int block_size)
    : impl_(std::make_unique<Impl>()) {
  Impl& im = *impl_;
  im.params = params;
  check_arg(params.num_heads >= 1, kPlanOp, "num_heads", ">= 1", std::to_string(params.num_heads));
  check_arg(params.kv_lora_rank >= 1, kPlanOp, "kv_lora_rank", ">= 1", std::to_string(params.kv_lora_rank));
  check_arg(params.qk_rope_head_dim >= 1, kPlanOp, "qk_rope_head_dim", ">= 1", std::to_string(params.qk_rope_head_dim));
  check_arg(params.query_len >= 1, kPlanOp, "query_len", ">= 1", std::to_string(params.query_len));
  check_arg(block_size >= 1, kPlanOp, "block_size", ">= 1", std::to_string(block_size));
  check_dim(kPlanOp, "block_table", block_table, 2);
  check_dim(kPlanOp, "seq_lens", seq_lens, 1);
  const int64_t B = seq_lens.size(0);
  check_arg(B >= 1, kPlanOp, "seq_lens", "at least one request", seq_lens.shape_str());
  check_arg(block_table.size(0) == B, kPlanOp, "block_table", "one row per request ([" + std::to_string(B) + ", *])",
            block_table.shape_str());
  const OwnedTensor table = host_copy_i32(block_table, "block_table");
  const OwnedTensor lens = host_copy_i32(seq_lens, "seq_lens");

  const int64_t width = block_table.size(1);
  std::vector<RequestSpec> requests(static_cast<size_t>(B));
  for (int64_t r = 0; r < B; ++r) {
    const int32_t seq_len = lens.data_as<int32_t>()[r];
    check_arg(seq_len >= params.query_len, kPlanOp, "seq_lens",
              ">= query_len = " + std::to_string(params.query_len) + " for every request",
              std::to_string(seq_len) + " for request " + std::to_string(r));
    const int64_t needed = (int64_t(seq_len) + block_size - 1) / block_size;
    check_arg(needed <= width, kPlanOp, "block_table",
              ">= " + std::to_string(needed) + " blocks for request " + std::to_string(r) + " (seq_len " +
                  std::to_string(seq_len) + ", block_size " + std::to_string(block_size) + ")",
              std::to_string(width) + " columns");
    RequestSpec& spec = requests[size_t(r)];
    spec.query_len = params.query_len;
    spec.num_computed_tokens = seq_len - params.query_len;
    const int32_t* row = table.data_as<int32_t>() + r * width;
    spec.block_table.assign(row, row + needed);
  }

  MetadataBuilderConfig bc;
  bc.block_size = block_size;
  bc.chunked_prefill_enabled = false;  // a decode-only batch needs no context workspace
  bc.reorder_batch_threshold = params.query_len;
  const MlaMetadataBuilder builder(bc);
  im.metadata = builder.build(requests);
  check_arg(im.metadata.decode.has_value() && im.metadata.num_prefills == 0, kPlanOp, "query_len",
            "a decode-only batch", "a batch with prefills");
  im.metadata.to_device(params.device, params.stream);
  im.cache = {params.kv_lora_rank, params.qk_rope_head_dim, params.kv_cache_dtype, block_size};
  im.num_requests = int(B);
  im.num_tokens = int(B) * params.query_len;

  select_backend(im);
}

DecodePlan::DecodePlan(const DecodePlanParams& params, const MlaMetadata& metadata) : impl_(std::make_unique<Impl>()) {
  Impl& im = *impl_;
  im.params = params;
  check_arg(metadata.decode.has_value(), kPlanOp, "metadata", "a step with decode rows", "no decodes");
  check_arg(metadata.device == params.device, kPlanOp, "metadata",
            "on " + device_name(params.device) + " (call to_device first)", device_name(metadata.device));
  check_arg(metadata.decode->max_decode_query_len <= params.query_len, kPlanOp, "query_len",
            ">= the metadata's max_decode_query_len " + std::to_string(metadata.decode->max_decode_query_len),
            std::to_string(params.query_len));
  im.metadata = metadata;
  im.cache = {params.kv_lora_rank, params.qk_rope_head_dim, params.kv_cache_dtype, metadata.decode->block_size};
  im.num_requests = metadata.decode->num_decodes;
  im.num_tokens = metadata.decode->num_decode_tokens;
  select_backend(im);
}

void DecodePlan::select_backend(Impl& im) {
  const DecodePlanParams& params = im.params;
  SelectorConfig selector;
  selector.dtype = params.dtype;
  selector.device = params.device;
  selector.num_heads = params.num_heads;
  selector.set_kv_cache_spec(im.cache);
  selector.max_query_tokens_per_request = params.query_len;
  selector.decode_backend = params.backend;
  im.cls = get_mla_decode_backend(selector);
  im.backend_name = im.cls->name();
}

DecodePlan::~DecodePlan() = default;
DecodePlan::DecodePlan(DecodePlan&&) noexcept = default;
DecodePlan& DecodePlan::operator=(DecodePlan&&) noexcept = default;

const DecodePlanParams& DecodePlan::params() const { return impl_->params; }
const std::string& DecodePlan::backend_name() const { return impl_->backend_name; }
int DecodePlan::num_requests() const { return impl_->num_requests; }
int DecodePlan::num_tokens() const { return impl_->num_tokens; }
int DecodePlan::block_size() const { return impl_->cache.block_size; }
KvCacheSpec DecodePlan::kv_cache_spec() const { return impl_->cache; }
const DecodeMetadata& DecodePlan::metadata() const { return *impl_->metadata.decode; }
void DecodePlan::set_stream(Stream stream) { impl_->params.stream = stream; }
DecodePlan::Impl& DecodePlan::impl() { return *impl_; }

void mla_decode(const Tensor& ql_nope, const Tensor& q_pe, const LatentCache& cache, DecodePlan& plan, float scale,
                const Tensor& out, const Tensor& lse) {
  const DecodePlanParams& p = plan.params();
  const int64_t T = plan.num_tokens(), N = p.num_heads, L = p.kv_lora_rank, R = p.qk_rope_head_dim;
  check_arg(std::isfinite(scale) && scale > 0.f, kDecodeOp, "scale", "finite and > 0", std::to_string(scale));
  for (auto [t, arg, shape] : {std::tuple{&ql_nope, "ql_nope", L}, std::tuple{&q_pe, "q_pe", R}}) {
    check_defined(kDecodeOp, arg, *t);
    check_shape(kDecodeOp, arg, *t, {T, N, shape});
    check_dtype(kDecodeOp, arg, *t, p.dtype);
    check_device(kDecodeOp, arg, *t, p.device);
  }
  check_defined(kDecodeOp, "out", out);
  check_shape(kDecodeOp, "out", out, {T, N, L});
  check_dtype(kDecodeOp, "out", out, p.dtype);
  check_device(kDecodeOp, "out", out, p.device);
  if (lse.defined()) {
    check_shape(kDecodeOp, "lse", lse, {N, T});
    check_dtype(kDecodeOp, "lse", lse, DType::f32);
    check_device(kDecodeOp, "lse", lse, p.device);
  }
  cache.validate(kDecodeOp);
  detail::check_cache_matches(kDecodeOp, cache, plan.kv_cache_spec(), "the plan", /*check_block_size=*/true);
  check_arg(cache.device() == p.device, kDecodeOp, "cache", "on " + device_name(p.device) + " (the plan's device)",
            device_name(cache.device()));
  DecodeBackend& backend = plan.impl().instance(scale);
  backend.run(ql_nope, q_pe, cache, plan.metadata(), out, lse);
}

void mla_decode(const Tensor& q_absorbed, const LatentCache& cache, DecodePlan& plan, float scale, const Tensor& out,
                const Tensor& lse) {
  const DecodePlanParams& p = plan.params();
  const int64_t L = p.kv_lora_rank, R = p.qk_rope_head_dim;
  check_defined(kDecodeOp, "q_absorbed", q_absorbed);
  check_shape(kDecodeOp, "q_absorbed", q_absorbed, {plan.num_tokens(), p.num_heads, L + R});
  // The absorbed query splits into its latent and rotary parts without a copy.
  mla_decode(q_absorbed.narrow(2, 0, L), q_absorbed.narrow(2, L, R), cache, plan, scale, out, lse);
}

bool latent_cache_parts_are_adjacent(const Tensor& ckv, const Tensor& kpe) {
  if (!ckv.defined() || !kpe.defined() || ckv.dim() != 3 || kpe.dim() != 3) return false;
  if (ckv.dtype() != kpe.dtype() || !(ckv.device() == kpe.device())) return false;
  if (ckv.size(0) != kpe.size(0) || ckv.size(1) != kpe.size(1)) return false;
  const int64_t L = ckv.size(2), R = kpe.size(2);
  if (ckv.stride(2) != 1 || kpe.stride(2) != 1) return false;
  if (ckv.stride(0) != kpe.stride(0) || ckv.stride(1) != kpe.stride(1)) return false;
  if (ckv.stride(1) < L + R && ckv.size(1) > 1) return false;
  const auto* a = static_cast<const char*>(ckv.data());
  const auto* b = static_cast<const char*>(kpe.data());
  return b == a + L * int64_t(dtype_size(ckv.dtype()));
}

LatentCache latent_cache_from_parts(const Tensor& ckv, const Tensor& kpe, float scale) {
  constexpr const char* op = "latent_cache_from_parts";
  check_dim(op, "ckv", ckv, 3);
  check_dim(op, "kpe", kpe, 3);
  check_arg(latent_cache_parts_are_adjacent(ckv, kpe), op, "kpe",
            "the last " + std::to_string(kpe.size(2)) + " columns of the same [.., L+R] buffer as ckv (same dtype, " +
                "strides, device; starting L elements after ckv)",
            "a separate tensor " + kpe.describe());
  const int64_t L = ckv.size(2), R = kpe.size(2);
  LatentCache c;
  const int64_t shape[3] = {ckv.size(0), ckv.size(1), L + R};
  const int64_t strides[3] = {ckv.stride(0), ckv.stride(1), 1};
  c.data = Tensor(ckv.data(), ckv.dtype(), shape, strides, ckv.device());
  c.kv_lora_rank = int(L);
  c.qk_rope_head_dim = int(R);
  c.scale = scale;
  c.validate(op);
  return c;
}

void mla_decode(const Tensor& q_absorbed, const Tensor& ckv, const Tensor& kpe, DecodePlan& plan, float scale,
                const Tensor& out, const Tensor& lse) {
  if (latent_cache_parts_are_adjacent(ckv, kpe)) {
    mla_decode(q_absorbed, latent_cache_from_parts(ckv, kpe), plan, scale, out, lse);
    return;
  }
  const DecodePlanParams& p = plan.params();
  const int64_t L = p.kv_lora_rank, R = p.qk_rope_head_dim;
  check_dim(kDecodeOp, "ckv", ckv, 3);
  check_dim(kDecodeOp, "kpe", kpe, 3);
  const int64_t blocks = ckv.size(0), page = ckv.size(1);
  check_shape(kDecodeOp, "ckv", ckv, {blocks, page, L});
  check_shape(kDecodeOp, "kpe", kpe, {blocks, page, R});
  check_dtype_in(kDecodeOp, "ckv", ckv, {DType::f16, DType::bf16});
  check_dtype(kDecodeOp, "kpe", kpe, ckv.dtype());
  check_device(kDecodeOp, "ckv", ckv, p.device);
  check_device(kDecodeOp, "kpe", kpe, p.device);
  DecodePlan::Impl& im = plan.impl();
  const int64_t rows = blocks * page;
  const Tensor& held = im.combined.tensor();
  if (!held.defined() || held.size(0) != blocks || held.size(1) != page || held.size(2) != L + R ||
      held.dtype() != ckv.dtype()) {
    im.combined = OwnedTensor::empty({blocks, page, L + R}, ckv.dtype(), p.device);
    OwnedTensor slots = OwnedTensor::empty({rows}, DType::i64);
    for (int64_t i = 0; i < rows; ++i) slots.data_as<int64_t>()[i] = i;
    im.combined_slots = OwnedTensor::empty({rows}, DType::i64, p.device);
    copy_tensor(slots, im.combined_slots);
  }
  LatentCache combined;
  combined.data = im.combined.tensor();
  combined.kv_lora_rank = int(L);
  combined.qk_rope_head_dim = int(R);
  // Every slot of the split cache, in order, written as [ckv | kpe] rows: the
  // cache writer interleaves the two parts on any device.
  const int64_t kv_shape[2] = {rows, L}, kv_strides[2] = {ckv.stride(1), 1};
  const int64_t pe_shape[2] = {rows, R}, pe_strides[2] = {kpe.stride(1), 1};
  check_arg(ckv.stride(0) == page * ckv.stride(1) && kpe.stride(0) == page * kpe.stride(1), kDecodeOp, "ckv",
            "blocks laid out one after another (stride(0) == block_size * stride(1))", ckv.describe());
  const Tensor kv_rows(ckv.data(), ckv.dtype(), kv_shape, kv_strides, ckv.device());
  const Tensor pe_rows(kpe.data(), kpe.dtype(), pe_shape, pe_strides, kpe.device());
  concat_and_cache_mla(kv_rows, pe_rows, combined, im.combined_slots, p.stream);
  mla_decode(q_absorbed, combined, plan, scale, out, lse);
}

}  // namespace lattn
