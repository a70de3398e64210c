// Sparse MLA (lattn/sparse.h): the selector with its small registry, the
// `cuda` class (its kernel is the CUDA device-ops table's sparse_mla entry), and sparse_mla, which
// checks every argument — for host indices every value — before any backend
// writes anything.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <string>

#include "core/ops/device_ops.h"
#include "lattn/check.h"
#include "lattn/errors.h"
#include "lattn/log.h"
#include "lattn/sparse.h"

namespace lattn {
namespace {

struct SparseRegistry {
  std::mutex mutex;
  std::vector<std::shared_ptr<const SparseMlaBackendClass>> classes;  // registration order
};

SparseRegistry& registry() {
  static SparseRegistry r;
  return r;
}

std::vector<std::shared_ptr<const SparseMlaBackendClass>> snapshot() {
  SparseRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.classes;
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::shared_ptr<const SparseMlaBackendClass> find_class(const std::string& name) {
  for (const auto& c : snapshot()) {
    if (lower(c->name()) == lower(name)) return c;
  }
  return nullptr;
}

// The priority of a name: cuda, cpu, reference first, any other after.
int rank(const std::string& name) {
  static const char* const order[] = {"cuda", "cpu", "reference"};
  for (int i = 0; i < 3; ++i) {
    if (name == order[i]) return i;
  }
  return 3;
}

std::string join(const std::vector<std::string>& items, const char* sep = ", ") {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) s += (i ? sep : "") + items[i];
  return s;
}

std::optional<DeviceCapability> capability_of(Device device) {
  if (!device.is_cuda()) return std::nullopt;
  return device_capability(device.index);
}

std::string cache_dtype_name(DType t) { return t == kFp8DsMla ? "fp8_ds_mla" : dtype_torch_name(t); }

// The `cuda` sparse class: the kernels behind src/cuda/smxx/sparse_mla.cu (tensor cores for DeepSeek dims).
class CudaSparseClass final : public SparseMlaBackendClass {
 public:
  std::string name() const override { return "cuda"; }
  std::vector<std::string> validate_configuration(std::optional<DeviceCapability> capability,
                                                  const SparseSelectorConfig& c) const override {
    std::vector<std::string> reasons;
    if (!capability || capability->major < 8) {
      reasons.push_back(capability ? "compute capability " + std::to_string(capability->major) + "." +
                                         std::to_string(capability->minor) + " not supported"
                                   : "compute capability none (cpu) not supported");
    }
    if (c.dtype != DType::bf16) reasons.push_back(std::string("dtype ") + dtype_torch_name(c.dtype) + " not supported");
    if (detail::cuda_device_ops().absent_reason) reasons.push_back("required dependencies not available");
    if (c.kv_cache_dtype != DType::bf16 && c.kv_cache_dtype != kFp8DsMla) {
      reasons.push_back("kv cache dtype " + cache_dtype_name(c.kv_cache_dtype) + " not supported");
    }
    // Shared memory holds one query row per head of the block and a key tile.
    if (c.kv_lora_rank % 8 != 0 || c.qk_rope_head_dim % 8 != 0 || c.kv_lora_rank + c.qk_rope_head_dim > 1024) {
      reasons.push_back("latent dims (" + std::to_string(c.kv_lora_rank) + ", " + std::to_string(c.qk_rope_head_dim) +
                        ") not supported (supported: multiples of 8 with L + R <= 1024)");
    }
    return reasons;
  }
  void run(const SparseMlaArgs& args, const LatentCache& cache, Stream stream) const override {
    detail::device_ops(cache.device()).sparse_mla(args, cache, stream);
  }
};

const RegisterSparseMlaBackend kRegisterCudaSparse{std::make_shared<CudaSparseClass>()};

}  // namespace

std::string SparseSelectorConfig::repr() const {
  return std::string("SparseMlaSelectorConfig(dtype=") + dtype_torch_name(dtype) +
         ", kv_cache_dtype=" + cache_dtype_name(kv_cache_dtype) + ", num_heads=" + std::to_string(num_heads) +
         ", kv_lora_rank=" + std::to_string(kv_lora_rank) + ", qk_rope_head_dim=" + std::to_string(qk_rope_head_dim) +
         ", topk=" + std::to_string(topk) + ", device=" + device_name(device) + ")";
}

RegisterSparseMlaBackend::RegisterSparseMlaBackend(std::shared_ptr<const SparseMlaBackendClass> cls) {
  register_sparse_mla_backend(std::move(cls));
}

void register_sparse_mla_backend(std::shared_ptr<const SparseMlaBackendClass> cls) {
  if (!cls || cls->name().empty()) {
    throw ValueError("register_sparse_mla_backend: argument 'cls' must be a backend class object with a name, got " +
                     std::string(cls ? "an empty name" : "nullptr"));
  }
  SparseRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto& c : r.classes) {
    if (lower(c->name()) == lower(cls->name())) {
      c = std::move(cls);
      return;
    }
  }
  r.classes.push_back(std::move(cls));
}

std::vector<std::string> sparse_mla_backend_names() {
  std::vector<std::string> names;
  for (const auto& c : snapshot()) names.push_back(c->name());
  std::stable_sort(names.begin(), names.end(),
                   [](const std::string& a, const std::string& b) { return rank(a) < rank(b); });
  return names;
}

std::vector<std::pair<std::string, std::vector<std::string>>> explain_sparse_mla_backends(
    const SparseSelectorConfig& config) {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  const auto capability = capability_of(config.device);
  for (const std::string& name : sparse_mla_backend_names()) {
    out.emplace_back(name, find_class(name)->validate_configuration(capability, config));
  }
  return out;
}

std::shared_ptr<const SparseMlaBackendClass> get_sparse_mla_backend(const SparseSelectorConfig& config) {
  const auto capability = capability_of(config.device);
  std::string choice = config.backend;
  bool from_env = false;
  if (choice.empty()) {
    if (const char* env = std::getenv("LATTN_SPARSE_MLA_BACKEND"); env && *env) {
      choice = env;
      from_env = true;
    }
  }
  if (!choice.empty()) {
    auto cls = find_class(choice);
    if (!cls) {
      throw ValueError(
          "Unknown sparse MLA backend: '" + choice + "'. Valid options are: " + join(sparse_mla_backend_names()) +
          (from_env ? ". Set LATTN_SPARSE_MLA_BACKEND to one of them, or unset it to let lattn choose." : ""));
    }
    const auto reasons = cls->validate_configuration(capability, config);
    if (!reasons.empty()) {
      throw ValueError(
          "Selected sparse MLA backend " + cls->name() + " is not valid for this configuration. Reason: [" +
          join(reasons) + "]. Select another sparse MLA backend, or " +
          (from_env ? "unset LATTN_SPARSE_MLA_BACKEND" : "leave the backend setting empty") + " to let lattn choose.");
    }
    return cls;
  }
  // Priority list: the device's own backend, then reference (never cpu for CUDA tensors).
  const std::vector<std::string> order = config.device.is_cuda() ? std::vector<std::string>{"cuda", "reference"}
                                                                 : std::vector<std::string>{"cpu", "reference"};
  std::string all;
  for (const std::string& name : order) {
    auto cls = find_class(name);
    if (!cls) continue;
    const auto reasons = cls->validate_configuration(capability, config);
    if (reasons.empty()) {
      info_once("Using " + cls->name() + " sparse MLA backend.");
      return cls;
    }
    all += (all.empty() ? "" : ", ") + name + ": [" + join(reasons) + "]";
  }
  throw ValueError("No valid sparse MLA backend found with " + config.repr() + ". Reasons: {" + all +
                   "}. Change the dtype, cache dtype or device to values one of these backends supports.");
}

void sparse_mla(const SparseMlaArgs& a, const LatentCache& cache, const std::string& backend, Stream stream) {
  const char* op = "sparse_mla";
  cache.validate(op);
  const Device device = cache.device();
  const int64_t L = cache.kv_lora_rank, R = cache.qk_rope_head_dim;

  check_defined(op, "q", a.q);
  check_dim(op, "q", a.q, 3);
  check_dtype_in(op, "q", a.q, {DType::f32, DType::f16, DType::bf16});
  check_device(op, "q", a.q, device);
  check_shape(op, "q", a.q, {kAnySize, kAnySize, L + R});
  check_last_dim_contiguous(op, "q", a.q);
  const int64_t T = a.q.size(0), N = a.q.size(1);

  check_defined(op, "indices", a.indices);
  check_dtype(op, "indices", a.indices, DType::i32);
  check_dim(op, "indices", a.indices, 2);
  check_device(op, "indices", a.indices, device);
  check_arg(a.indices.size(0) == T, op, "indices", "have q.size(0) = " + std::to_string(T) + " rows",
            a.indices.shape_str());
  check_arg(a.indices.size(1) >= 1, op, "indices", "have topk >= 1 columns", a.indices.shape_str());
  check_last_dim_contiguous(op, "indices", a.indices);
  const int64_t topk = a.indices.size(1);

  check_defined(op, "out", a.out);
  check_dtype(op, "out", a.out, a.q.dtype());
  check_device(op, "out", a.out, device);
  check_shape(op, "out", a.out, {T, N, L});
  check_last_dim_contiguous(op, "out", a.out);
  if (a.lse.defined()) {
    check_dtype(op, "lse", a.lse, DType::f32);
    check_device(op, "lse", a.lse, device);
    check_shape(op, "lse", a.lse, {N, T});
  }
  if (a.attn_sink.defined()) {
    check_dtype(op, "attn_sink", a.attn_sink, DType::f32);
    check_device(op, "attn_sink", a.attn_sink, device);
    check_shape(op, "attn_sink", a.attn_sink, {N});
  }
  check_arg(std::isfinite(a.scale) && a.scale > 0.f, op, "scale", "be finite and positive", std::to_string(a.scale));

  if (device.is_cpu()) {
    const int64_t capacity = cache.num_blocks() * cache.block_size();
    for (int64_t t = 0; t < T; ++t) {
      const int32_t* row = a.indices.data_as<const int32_t>() + t * a.indices.stride(0);
      for (int64_t j = 0; j < topk; ++j) {
        if (row[j] >= -1 && row[j] < capacity) continue;  // (the message is built only for a bad slot)
        check_arg(false, op, "indices",
                  "hold slots in [0, num_blocks * block_size = " + std::to_string(capacity) + ") or -1",
                  std::to_string(row[j]) + " at [" + std::to_string(t) + ", " + std::to_string(j) + "]");
      }
    }
  }

  SparseSelectorConfig config;
  config.dtype = a.q.dtype();
  config.kv_cache_dtype = cache.dtype();
  config.num_heads = int(N);
  config.kv_lora_rank = int(L);
  config.qk_rope_head_dim = int(R);
  config.topk = int(topk);
  config.device = device;
  config.backend = backend;
  const auto cls = get_sparse_mla_backend(config);
  if (T == 0 || N == 0) return;
  cls->run(a, cache, stream);
}

}  // namespace lattn
