// libFuzzer target: MlaMetadataBuilder::build on random request lists —
// out-of-range block ids, negative and overflowing lengths, empty tables,
// unordered batches, odd configs. Every input is built or refused with a
// lattn exception; a built plan's slot mapping stays inside the cache.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>

#include "lattn/errors.h"
#include "lattn/metadata.h"

namespace {

// Mostly small values (to reach the deep paths), sometimes extreme ones.
int32_t pick_i32(FuzzedDataProvider& in, int32_t small_max) {
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
      return in.ConsumeIntegral<int32_t>();
    case 1:
      return INT32_MAX - in.ConsumeIntegralInRange<int32_t>(0, 4);
    case 2:
      return -in.ConsumeIntegralInRange<int32_t>(0, 4);
    default:
      return in.ConsumeIntegralInRange<int32_t>(0, small_max);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  lattn::MetadataBuilderConfig config;
  config.block_size = pick_i32(in, 64);
  config.chunked_prefill_enabled = in.ConsumeBool();
  config.enable_prefix_caching = in.ConsumeBool();
  config.context_chunk_workspace_size =
      in.ConsumeBool() ? in.ConsumeIntegral<int64_t>() : in.ConsumeIntegralInRange<int64_t>(0, 4096);
  config.reorder_batch_threshold = pick_i32(in, 4);
  if (in.ConsumeBool()) config.sliding_window = pick_i32(in, 256);
  config.num_cache_blocks =
      in.ConsumeBool() ? in.ConsumeIntegral<int64_t>() : in.ConsumeIntegralInRange<int64_t>(0, 64);

  std::vector<lattn::RequestSpec> requests(in.ConsumeIntegralInRange<size_t>(0, 12));
  for (lattn::RequestSpec& r : requests) {
    // Query lengths stay below 2^16 (but may be 0 or negative): the per-token
    // arrays of a billion-token batch legitimately take gigabytes, which
    // libFuzzer would report as out-of-memory. Contexts go to the extremes.
    r.query_len = std::min(pick_i32(in, 40), int32_t(1) << 16);
    r.num_computed_tokens = pick_i32(in, 200);
    r.block_table.resize(in.ConsumeIntegralInRange<size_t>(0, 20));
    for (int32_t& b : r.block_table) b = pick_i32(in, 80);
  }
  lattn::BuildOptions options;
  options.is_profile_run = in.ConsumeBool();

  try {
    const lattn::MlaMetadataBuilder builder(config);
    const lattn::MlaMetadata md = builder.build(requests, options);
    // A built plan: every slot is PAD or inside the cache (when its size is known).
    const lattn::Tensor& slots = md.slot_mapping_cpu;
    if (config.num_cache_blocks > 0 && slots.defined()) {
      int64_t limit = 0;
      if (__builtin_mul_overflow(config.num_cache_blocks, int64_t(config.block_size), &limit)) limit = INT64_MAX;
      const auto* s = slots.data_as<const int64_t>();
      for (int64_t t = 0; t < slots.numel(); ++t) {
        if (s[t] != lattn::PAD_SLOT_ID && (s[t] < 0 || s[t] >= limit)) std::abort();
      }
    }
  } catch (const lattn::ValueError&) {
  } catch (const lattn::AssertionError&) {
  } catch (const lattn::NotImplementedError&) {}
  return 0;
}
