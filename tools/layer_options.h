// tools/layer_options.h — the flags that describe an attention layer (model,
// tensor parallelism, dims, dtypes, block size, device, backends), shared by
// `lattn run`, `lattn info` and `lattn bench`.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "lattn/config.h"
#include "lattn/device.h"
#include "lattn/dtype.h"
#include "serving/model.h"

namespace lattn::cli {

// The flags as typed (validated by resolve_layer_setup).
struct LayerFlags {
  serving::ModelOptions model;
  std::string dtype = "bf16";
  std::string kv_cache_dtype = "auto";
  int block_size = 64;
  std::string device = "auto";
  std::string prefill_backend;  // "" = the selector's choice
  std::string decode_backend;
  std::string sparse_backend;    // sparse models (deepseek-v3.2): "" = the sparse selector's choice
  std::string indexer_backend;   // "" = the device's own indexer; or reference
  bool batch_invariant = false;  // --batch-invariant
};

struct FlagSet {
  bool block_size = true;  // bench sweeps its own block sizes
  bool backends = true;    // bench has --backend instead
};
void add_layer_flags(CLI::App& app, LayerFlags& flags, FlagSet which = {});

// The layer the flags describe.
struct LayerSetup {
  std::string model;  // preset name
  int tp = 1;         // tensor-parallel size (heads were divided by it)
  MlaDims dims;       // one rank's
  DType dtype = DType::bf16;
  DType kv_cache_dtype = DType::bf16;
  int block_size = 64;
  Device device = Device::cpu();
  std::string prefill_backend;  // canonical name, or "" (selector)
  std::string decode_backend;
  // A sparse model's indexer (index_topk 0: dense) and its backends.
  serving::IndexerShape indexer;
  std::string sparse_backend, indexer_backend;
  bool sparse() const { return indexer.index_topk > 0; }
};

// Validates and resolves the flags; throws CliError(kExitUsage) with a sentence.
LayerSetup resolve_layer_setup(const LayerFlags& flags);

// Activation dtypes by flag spelling: "bf16", "fp16", "fp32".
DType parse_activation_dtype(const std::string& text, const char* flag);
// "auto" (= activation dtype), "bf16", "fp16", "fp8" (e4m3), "fp8_ds_mla"
// (the 656-byte sparse format, lattn/sparse.h: sparse models only).
DType parse_kv_cache_dtype(const std::string& text, DType activation_dtype);
// "auto" (cuda:0 when a CUDA device is present, else cpu), "cpu", "cuda", "cuda:N".
Device resolve_device(const std::string& text);

// Bytes of one latent cache entry of `dims` in `kv_cache_dtype` (656 for fp8_ds_mla).
int64_t cache_entry_bytes(const MlaDims& dims, DType kv_cache_dtype);

// What the flags call a dtype: "bf16", "fp16", "fp32", "fp8", "fp8_ds_mla".
const char* dtype_flag_name(DType dtype);

}  // namespace lattn::cli
