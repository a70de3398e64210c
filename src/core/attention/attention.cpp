// MlaAttention: construction, backend choice and the forward's orchestration
// (see lattn/attention.h and core/attention/attention_impl.h for the pieces).
#include <cmath>
#include <memory>
#include <utility>

#include "core/attention/attention_impl.h"
#include "core/backends/unchecked_decode_run.h"
#include "core/ops/forward_ops.h"
#include "core/types/batch_invariant.h"
#include "lattn/check.h"
#include "lattn/errors.h"
#include "lattn/ops.h"
#include "lattn/selector.h"

namespace lattn {
namespace {

void validate_config(const MlaAttentionConfig& c) {
  const char* op = "MlaAttention";
  c.dims.validate();
  const auto dtype_ok = c.dtype == DType::f16 || c.dtype == DType::bf16 || c.dtype == DType::f32;
  check_arg(dtype_ok, op, "config.dtype", "be f16, bf16 or f32", dtype_name(c.dtype));
  check_arg(c.index_topk >= 0, op, "config.index_topk", "be >= 0 (0 = dense attention)", std::to_string(c.index_topk));
  const bool sparse = c.index_topk > 0;
  const auto cache_ok = c.kv_cache_dtype == DType::f16 || c.kv_cache_dtype == DType::bf16 ||
                        c.kv_cache_dtype == DType::fp8_e4m3 || (sparse && c.kv_cache_dtype == kFp8DsMla);
  check_arg(cache_ok, op, "config.kv_cache_dtype",
            sparse ? "be f16, bf16, fp8_e4m3 or fp8_ds_mla (u8)"
                   : "be f16, bf16 or fp8_e4m3 (fp8_ds_mla needs index_topk > 0)",
            c.kv_cache_dtype == kFp8DsMla ? "fp8_ds_mla (u8)" : dtype_name(c.kv_cache_dtype));
  if (sparse) {
    check_arg(c.index_n_heads >= 1, op, "config.index_n_heads", "be >= 1", std::to_string(c.index_n_heads));
    check_arg(c.index_head_dim >= 1, op, "config.index_head_dim", "be >= 1", std::to_string(c.index_head_dim));
    const std::string own = c.device.is_cuda() ? "cuda" : "cpu";
    const bool indexer_ok = c.indexer_backend.empty() || c.indexer_backend == own ||
                            (c.indexer_backend == "reference" && c.device.is_cpu());
    check_arg(
        indexer_ok, op, "config.indexer_backend",
        "be empty, '" + own + "'" + (c.device.is_cpu() ? " or 'reference'" : " (reference runs on host tensors only)"),
        "'" + c.indexer_backend + "'");
  }
  check_arg(std::isfinite(c.scale) && c.scale >= 0.f, op, "config.scale",
            "be finite and >= 0 (0 = the dims' softmax_scale())", std::to_string(c.scale));
  check_arg(c.block_size >= 1, op, "config.block_size", "be >= 1", std::to_string(c.block_size));
  check_arg(c.max_query_tokens_per_request >= 1, op, "config.max_query_tokens_per_request", "be >= 1",
            std::to_string(c.max_query_tokens_per_request));
}

}  // namespace

bool MlaAttention::Impl::supports_quant_output() const {
  if (is_sparse()) return false;
  constexpr QuantKey key = QuantKey::fp8_e4m3_static_per_tensor;
  return prefill_class->supports_quant_output(key) && decode_class->supports_quant_output(key);
}

MlaAttention::MlaAttention(const MlaAttentionConfig& config) : impl_(std::make_unique<Impl>()) {
  // The seed refuses KV sharing before anything else (docs/mla.md).
  if (config.kv_sharing_target_layer_name) throw NotImplementedError("KV sharing not supported in V0.");
  validate_config(config);
  Impl& im = *impl_;
  im.config = config;
  if (detail::batch_invariant_from_env()) im.config.batch_invariant = true;
  const MlaDims& d = config.dims;
  if (im.config.scale == 0.f) im.config.scale = d.softmax_scale();
  im.workspace = detail::Workspace(config.device);

  if (im.is_sparse()) {
    // A sparse layer runs no dense backend: every row attends over its top-k slots.
    SparseSelectorConfig sc;
    sc.dtype = config.dtype;
    sc.kv_cache_dtype = config.kv_cache_dtype;
    sc.num_heads = d.num_heads;
    sc.kv_lora_rank = d.kv_lora_rank;
    sc.qk_rope_head_dim = d.qk_rope_head_dim;
    sc.topk = config.index_topk;
    sc.device = config.device;
    sc.backend = config.sparse_backend;
    im.sparse_class = get_sparse_mla_backend(sc);
    return;
  }

  // The selector validates an explicit choice ("" = environment, then automatic).
  SelectorConfig selector = SelectorConfig::for_dims(d, config.dtype, config.kv_cache_dtype, config.device,
                                                     config.block_size, config.max_query_tokens_per_request);
  selector.prefill_backend = config.prefill_backend;
  selector.decode_backend = config.decode_backend;
  im.prefill_class = get_mla_prefill_backend(selector);
  im.decode_class = get_mla_decode_backend(selector);

  const RunContext context = im.run_context();
  PrefillBackendParams prefill_params{d.num_heads,        im.config.scale, d.kv_lora_rank, d.qk_nope_head_dim,
                                      d.qk_rope_head_dim, d.v_head_dim,    config.dtype,   context};
  im.prefill = im.prefill_class->create(prefill_params);
  DecodeBackendParams decode_params{d.num_heads,  im.config.scale,       d.kv_lora_rank, d.qk_rope_head_dim,
                                    config.dtype, config.kv_cache_dtype, context};
  im.decode = im.decode_class->create(decode_params);
  im.decode_unchecked = dynamic_cast<detail::UncheckedDecodeRun*>(im.decode.get());
}

MlaAttention::~MlaAttention() = default;
MlaAttention::MlaAttention(MlaAttention&&) noexcept = default;
MlaAttention& MlaAttention::operator=(MlaAttention&&) noexcept = default;

const MlaAttentionConfig& MlaAttention::config() const { return impl_->config; }

namespace detail {

ExclusiveUse::ExclusiveUse(std::atomic<bool>& in_use, const char* op) : in_use_(in_use) {
  bool expected = false;
  if (!in_use_.compare_exchange_strong(expected, true, std::memory_order_acquire)) {
    throw RuntimeError(std::string(op) +
                       ": this MlaAttention is already running a call on another thread; a layer's scratch memory "
                       "serves one call at a time: give each thread its own layer, or serialize the calls");
  }
}

}  // namespace detail

void MlaAttention::set_stream(Stream stream) {
  const detail::ExclusiveUse use(impl_->in_use, "MlaAttention::set_stream");
  impl_->config.stream = stream;
  if (impl_->is_sparse()) return;  // the sparse ops take the stream per call
  impl_->prefill->set_stream(stream);
  impl_->decode->set_stream(stream);
}
size_t MlaAttention::workspace_bytes() const { return impl_->workspace.bytes_held(); }

namespace {
[[noreturn]] void no_dense_backend(const char* which) {
  throw ValueError(std::string("MlaAttention::") + which +
                   ": this layer is sparse (config.index_topk > 0) and runs no dense backend; see sparse_backend()");
}
}  // namespace

const PrefillBackend& MlaAttention::prefill_backend() const {
  if (!impl_->prefill) no_dense_backend("prefill_backend");
  return *impl_->prefill;
}
const DecodeBackend& MlaAttention::decode_backend() const {
  if (!impl_->decode) no_dense_backend("decode_backend");
  return *impl_->decode;
}
const SparseMlaBackendClass* MlaAttention::sparse_backend() const { return impl_->sparse_class.get(); }

// A sparse layer runs its one sparse backend for both kinds of rows.
std::string MlaAttention::prefill_kernel_label() const {
  return impl_->is_sparse() ? impl_->sparse_class->name() : prefill_backend().kernel_label();
}
std::string MlaAttention::decode_kernel_label() const {
  return impl_->is_sparse() ? impl_->sparse_class->name() : decode_backend().kernel_label();
}

const Tensor& MlaAttention::W_UK_T() const {
  if (!impl_->w_uk_t) throw ValueError("MlaAttention::W_UK_T: process_weights_after_loading was not called");
  return impl_->w_uk_t->tensor();
}

const Tensor& MlaAttention::W_UV() const {
  if (!impl_->w_uv) throw ValueError("MlaAttention::W_UV: process_weights_after_loading was not called");
  return impl_->w_uv->tensor();
}

std::shared_ptr<const void> MlaAttention::weights_owner() const {
  using Pair = std::pair<std::shared_ptr<const OwnedTensor>, std::shared_ptr<const OwnedTensor>>;
  return std::make_shared<const Pair>(impl_->w_uk_t, impl_->w_uv);
}

namespace {

void refuse_sparse(const MlaAttention::Impl& im) {
  if (im.is_sparse()) {
    throw ValueError(
        "MlaAttention.forward: this layer is sparse (config.index_topk = " + std::to_string(im.config.index_topk) +
        ") and needs the indexer's inputs: call forward(q, kv_c_normed, k_pe, cache, metadata, indexer, out)");
  }
}

// The forward of the dense overloads; dcp_plan non-null for a DCP step.
Tensor run_forward(MlaAttention::Impl& im, const Tensor& q, const Tensor& kv_c_normed, const Tensor& k_pe,
                   const LatentCache& cache, const MlaMetadata& metadata, const Tensor& out, const Tensor& output_scale,
                   const DcpDecodePlan* dcp_plan) {
  // As the seed, refuse fused output quantization first when the backends cannot provide it.
  if (output_scale.defined() && !im.supports_quant_output()) {
    throw NotImplementedError("fused output quantization is not yet supported for MLAImplBase");
  }
  const detail::ForwardArgs args =
      detail::validate_forward(im, q, kv_c_normed, k_pe, cache, metadata, out, output_scale);
  const MlaDims& d = im.dims();
  const int64_t T = args.num_tokens, width = int64_t(d.num_heads) * d.v_head_dim;
  const DType out_dtype = args.quantize ? DType::fp8_e4m3 : im.config.dtype;
  const Tensor result = out.defined() ? out : im.workspace.get(detail::WorkspaceSlot::output, {T, width}, out_dtype);
  // With output_scale, rows are computed in the activation dtype here and quantized into result.
  const Tensor staging =
      args.quantize ? im.workspace.get(detail::WorkspaceSlot::output_staging, {T, width}, im.config.dtype) : Tensor();
  const Stream stream = im.config.stream;

  // 1. Every token's latent goes to the cache before any attention reads it.
  // (validate_forward checked every slot: the op's own checks would read them again.)
  if (args.write_cache) {
    detail::concat_and_cache_mla_unchecked(args.kv_c, args.k_pe, cache, metadata.slot_mapping, stream);
  }

  // The seed's profile run sizes the context scratch for the worst case
  // (docs/mla.md): grow it now so memory profiling sees the peak.
  if (metadata.is_profile_run && metadata.context_chunk_workspace_size > 0) {
    detail::reserve_context_workspace(im, metadata.context_chunk_workspace_size);
  }

  // 2. Decode rows first (v1 order; CUDA-graph padded decodes included).
  const int64_t Td = metadata.num_decode_tokens, Tp = metadata.num_prefill_tokens;
  if (Td > 0) {
    const Tensor rows = (args.quantize ? staging : result).narrow(0, 0, Td);
    detail::forward_decode(im, args, cache, *metadata.decode, rows, dcp_plan);
    if (args.quantize) detail::quantize_fp8(rows, result.narrow(0, 0, Td), output_scale, stream);
  }
  // 3. Prefill rows.
  if (Tp > 0) {
    const Tensor out_rows = result.narrow(0, Td, Tp);
    const Tensor staging_rows = args.quantize ? staging.narrow(0, Td, Tp) : Tensor();
    // Under DCP a prefill with cached context needs every rank's share of it.
    const bool staged = dcp_plan && dcp_plan->prefill_has_context
                            ? detail::forward_prefill_dcp(im, args, cache, metadata, out_rows, staging_rows)
                            : detail::forward_prefill(im, args, cache, metadata, out_rows, output_scale, staging_rows);
    if (staged) detail::quantize_fp8(staging_rows, out_rows, output_scale, stream);
  }
  // 4. Input rows past the metadata's tokens (padding) get output 0.
  const int64_t computed = Td + Tp;
  if (computed < T) detail::zero_rows(result.narrow(0, computed, T - computed), stream);
  return result;
}

}  // namespace

Tensor MlaAttention::forward(const Tensor& q, const Tensor& kv_c_normed, const Tensor& k_pe, const LatentCache& cache,
                             const MlaMetadata& metadata, const Tensor& out, const Tensor& output_scale) {
  Impl& im = *impl_;
  const detail::ExclusiveUse use(im.in_use, "MlaAttention::forward");
  refuse_sparse(im);
  // A layer of a DCP group holds only its shard: attending without the
  // combine would return a wrong result silently.
  check_arg(im.dcp_comm == nullptr || im.dcp_comm->world_size() == 1, "MlaAttention::forward", "metadata",
            "be a DcpDecodePlan (this layer is set for DCP over " +
                std::to_string(im.dcp_comm ? im.dcp_comm->world_size() : 1) +
                " ranks; build the step with build_dcp_decode_metadata)",
            "an MlaMetadata");
  return run_forward(im, q, kv_c_normed, k_pe, cache, metadata, out, output_scale, nullptr);
}

Tensor MlaAttention::forward(const Tensor& q, const Tensor& kv_c_normed, const Tensor& k_pe, const LatentCache& cache,
                             const DcpDecodePlan& plan, const Tensor& out, const Tensor& output_scale) {
  Impl& im = *impl_;
  const detail::ExclusiveUse use(im.in_use, "MlaAttention::forward");
  refuse_sparse(im);
  check_arg(im.dcp_comm != nullptr, "MlaAttention::forward", "plan",
            "come with a DCP setting (call set_dcp with the group's communicator first)", "a DcpDecodePlan");
  return run_forward(im, q, kv_c_normed, k_pe, cache, plan.metadata, out, output_scale, &plan);
}

void MlaAttention::set_dcp(Communicator* comm, int interleave, DcpCombineMethod method) {
  const detail::ExclusiveUse use(impl_->in_use, "MlaAttention::set_dcp");
  Impl& im = *impl_;
  if (comm == nullptr) {
    im.dcp_comm = nullptr;
    im.dcp_scratch.reset();
    return;
  }
  const char* op = "MlaAttention::set_dcp";
  check_arg(interleave >= 1, op, "interleave", "be >= 1", std::to_string(interleave));
  check_arg(comm->device() == im.config.device, op, "comm", "be on the layer's device " + device_name(im.config.device),
            device_name(comm->device()));
  const int heads = im.config.dims.num_heads, world = comm->world_size();
  check_arg(method != DcpCombineMethod::all_to_all || heads % world == 0, op, "method",
            "be all_gather_reduce_scatter when the " + std::to_string(heads) +
                " heads do not divide by the world size " + std::to_string(world) +
                " (all_to_all merges H / world heads per rank)",
            "all_to_all");
  im.dcp_comm = comm;
  im.dcp_interleave = interleave;
  im.dcp_method = method;
  im.dcp_scratch = std::make_unique<DcpCombineScratch>(im.config.device);
}

DcpConfig MlaAttention::dcp_config() const {
  const Impl& im = *impl_;
  if (!im.dcp_comm) return DcpConfig{};
  return DcpConfig{im.dcp_comm->world_size(), im.dcp_comm->rank(), im.dcp_interleave};
}

Tensor MlaAttention::forward(const Tensor& q, const Tensor& kv_c_normed, const Tensor& k_pe, const LatentCache& cache,
                             const MlaMetadata& metadata, const IndexerInputs& indexer, const Tensor& out) {
  Impl& im = *impl_;
  const detail::ExclusiveUse use(im.in_use, "MlaAttention::forward");
  if (!im.is_sparse()) {
    throw ValueError(
        "MlaAttention.forward: argument 'indexer' is for sparse layers (config.index_topk > 0); this "
        "layer is dense: call forward(q, kv_c_normed, k_pe, cache, metadata, out)");
  }
  const detail::ForwardArgs args = detail::validate_forward(im, q, kv_c_normed, k_pe, cache, metadata, out, Tensor());
  detail::validate_indexer_inputs(im, args, cache, indexer);
  const MlaDims& d = im.dims();
  const int64_t T = args.num_tokens, width = int64_t(d.num_heads) * d.v_head_dim;
  const Tensor result =
      out.defined() ? out : im.workspace.get(detail::WorkspaceSlot::output, {T, width}, im.config.dtype);
  const Stream stream = im.config.stream;

  if (args.write_cache)
    detail::concat_and_cache_mla_unchecked(args.kv_c, args.k_pe, cache, metadata.slot_mapping, stream);
  const int64_t computed = int64_t(metadata.num_decode_tokens) + metadata.num_prefill_tokens;
  if (computed > 0) detail::forward_sparse(im, args, cache, metadata, indexer, result.narrow(0, 0, computed));
  if (computed < T) detail::zero_rows(result.narrow(0, computed, T - computed), stream);
  return result;
}

}  // namespace lattn
