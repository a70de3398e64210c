// The layer flags and their validation.
#include "layer_options.h"

#include <cstdlib>
#include <stdexcept>

#include "exit_codes.h"
#include "lattn/errors.h"
#include "lattn/sparse.h"

namespace lattn::cli {

void add_layer_flags(CLI::App& app, LayerFlags& flags, FlagSet which) {
  const std::string group = "Model";
  app.add_option("--model", flags.model.model, "Attention shape of a known model: " + serving::model_preset_names())
      ->capture_default_str()
      ->group(group);
  app.add_option("--tp", flags.model.tensor_parallel_size,
                 "Tensor-parallel size: heads are split evenly over this many ranks and one rank runs "
                 "(default: how the model is usually served, 8 for deepseek-v3/r1, 1 otherwise)")
      ->group(group);
  app.add_option("--num-heads", flags.model.num_heads, "Override the model's attention heads (before --tp)")
      ->group(group);
  app.add_option("--kv-lora-rank", flags.model.kv_lora_rank, "Override L, the latent (kv_lora_rank) dim")->group(group);
  app.add_option("--qk-nope-head-dim", flags.model.qk_nope_head_dim, "Override P, the non-rotary q/k head dim")
      ->group(group);
  app.add_option("--qk-rope-head-dim", flags.model.qk_rope_head_dim, "Override R, the rotary q/k head dim")
      ->group(group);
  app.add_option("--v-head-dim", flags.model.v_head_dim, "Override V, the value head dim")->group(group);
  app.add_option("--softmax-scale", flags.model.softmax_scale,
                 "Override the softmax scale (default: the model's; DeepSeek's YaRN mscale^2/sqrt(P+R), "
                 "else 1/sqrt(P+R))")
      ->group(group);
  app.add_option("--index-topk", flags.model.index_topk,
                 "Sparse models (deepseek-v3.2): cached tokens each token attends to, picked by the lightning "
                 "indexer (default: the model's, 2048)")
      ->group(group);
  app.add_option("--dtype", flags.dtype, "Activation dtype: bf16, fp16, fp32")->capture_default_str()->group(group);
  app.add_option("--kv-cache-dtype", flags.kv_cache_dtype,
                 "Latent cache dtype: auto (= --dtype; bf16 for fp32), bf16, fp16, fp8 (e4m3, per-tensor scale), "
                 "fp8_ds_mla (656 bytes per token, sparse models only)")
      ->capture_default_str()
      ->group(group);
  if (which.block_size) {
    app.add_option("--block-size", flags.block_size, "Tokens per cache block (page)")
        ->capture_default_str()
        ->group(group);
  }
  app.add_option("--device", flags.device, "Where the layers run: auto (cuda:0 when present, else cpu), cpu, cuda:N")
      ->capture_default_str()
      ->group(group);
  app.add_flag("--batch-invariant", flags.batch_invariant,
               "Batch-invariant mode: a request's output bits do not depend on the rest of its batch (fixed "
               "split sizes and reduction orders; docs/mla.md). Same as LATTN_BATCH_INVARIANT=1")
      ->group(group);
  if (which.backends) {
    app.add_option("--prefill-backend", flags.prefill_backend,
                   "Prefill backend by name (reference, cpu, cuda, hopper, ...); default: the selector's choice")
        ->group("Backends");
    app.add_option("--decode-backend", flags.decode_backend,
                   "Decode backend by name (reference, cpu, cuda, hopper, ...); default: the selector's choice")
        ->group("Backends");
    app.add_option("--sparse-backend", flags.sparse_backend,
                   "Sparse models: sparse attention backend (reference, cpu, cuda); default: the selector's choice")
        ->group("Backends");
    app.add_option("--indexer-backend", flags.indexer_backend,
                   "Sparse models: lightning-indexer backend (reference, cpu, cuda); default: the device's own")
        ->group("Backends");
  }
}

int64_t cache_entry_bytes(const MlaDims& dims, DType kv_cache_dtype) {
  if (kv_cache_dtype == kFp8DsMla) return fp8_ds_mla_entry_bytes(dims.kv_lora_rank, dims.qk_rope_head_dim);
  return int64_t(dims.cache_entry_dim()) * dtype_size(kv_cache_dtype);
}

const char* dtype_flag_name(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "fp16";
    case DType::f32:
      return "fp32";
    case DType::fp8_e4m3:
      return "fp8";
    case kFp8DsMla:
      return "fp8_ds_mla";
    default:
      return dtype_name(dtype);
  }
}

DType parse_activation_dtype(const std::string& text, const char* flag) {
  if (text == "bf16" || text == "bfloat16") return DType::bf16;
  if (text == "fp16" || text == "f16" || text == "float16" || text == "half") return DType::f16;
  if (text == "fp32" || text == "f32" || text == "float32" || text == "float") return DType::f32;
  throw CliError(kExitUsage, std::string(flag) + " must be one of bf16, fp16, fp32; got '" + text + "'");
}

DType parse_kv_cache_dtype(const std::string& text, DType activation_dtype) {
  if (text == "auto") return activation_dtype == DType::f32 ? DType::bf16 : activation_dtype;
  if (text == "fp8" || text == "fp8_e4m3" || text == "fp8_e4m3fn") return DType::fp8_e4m3;
  if (text == "fp8_ds_mla") return kFp8DsMla;
  if (text == "bf16" || text == "bfloat16") return DType::bf16;
  if (text == "fp16" || text == "f16" || text == "float16") return DType::f16;
  throw CliError(kExitUsage, "--kv-cache-dtype must be one of auto, bf16, fp16, fp8, fp8_ds_mla; got '" + text + "'");
}

Device resolve_device(const std::string& text) {
  if (text == "auto") return query_cuda_devices().devices.empty() ? Device::cpu() : Device::cuda(0);
  Device device;
  try {
    device = parse_device(text);
  } catch (const ValueError&) {
    throw CliError(kExitUsage, "--device must be auto, cpu, cuda or cuda:N; got '" + text + "'");
  }
  if (device.is_cuda()) {
    const CudaDeviceQuery query = query_cuda_devices();
    if (device.index >= int(query.devices.size())) {
      throw CliError(kExitNoBackend,
                     "--device " + text + " is not available: " +
                         (query.devices.empty() ? query.unavailable_reason
                                                : std::to_string(query.devices.size()) + " CUDA device(s) found"));
    }
  }
  return device;
}

LayerSetup resolve_layer_setup(const LayerFlags& flags) {
  LayerSetup setup;
  setup.model = flags.model.model;
  try {
    setup.dims = serving::resolve_model_dims(flags.model);
    setup.tp = serving::resolve_tensor_parallel_size(flags.model);
    setup.indexer = serving::resolve_indexer(flags.model);
  } catch (const std::invalid_argument& e) {
    throw CliError(kExitUsage, e.what());
  }
  setup.dtype = parse_activation_dtype(flags.dtype, "--dtype");
  setup.kv_cache_dtype = parse_kv_cache_dtype(flags.kv_cache_dtype, setup.dtype);
  if (flags.block_size < 1) {
    throw CliError(kExitUsage, "--block-size must be at least 1 token, got " + std::to_string(flags.block_size));
  }
  setup.block_size = flags.block_size;
  setup.device = resolve_device(flags.device);
  setup.prefill_backend = flags.prefill_backend;
  setup.decode_backend = flags.decode_backend;
  setup.sparse_backend = flags.sparse_backend;
  setup.indexer_backend = flags.indexer_backend;
  if (setup.kv_cache_dtype == kFp8DsMla && !setup.sparse()) {
    throw CliError(kExitUsage, "--kv-cache-dtype fp8_ds_mla is the sparse models' format (deepseek-v3.2); " +
                                   setup.model + " attends densely: use bf16, fp16 or fp8");
  }
  if (setup.sparse() && (!flags.prefill_backend.empty() || !flags.decode_backend.empty())) {
    throw CliError(kExitUsage, setup.model +
                                   " is a sparse model: every token runs the indexer and sparse attention, "
                                   "no dense backend; choose with --sparse-backend and --indexer-backend");
  }
  if (!setup.sparse() && (!flags.sparse_backend.empty() || !flags.indexer_backend.empty())) {
    throw CliError(kExitUsage, "--sparse-backend and --indexer-backend apply to sparse models (deepseek-v3.2); " +
                                   setup.model + " attends densely");
  }
  // The layers and metadata builders of run, info and bench (the serving
  // engine, the benchmark harness) all read the mode from the environment.
  if (flags.batch_invariant) setenv("LATTN_BATCH_INVARIANT", "1", 1);
  return setup;
}

}  // namespace lattn::cli
