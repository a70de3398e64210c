// libFuzzer target: the argument validators of the cache ops
// (concat_and_cache_mla, gather_cache, merge_attn_states, copy_blocks,
// swap_blocks) on the host. Every tensor is a random view (dtype, rank,
// sizes drawn mostly from the problem's own sizes so that some inputs pass,
// strides that may be padded, zero or negative) over its own heap block of
// exactly the bytes it spans, and index tensors hold random values: an op
// either refuses with ValueError or runs, and ASan reports any byte it
// touches outside the views it was given.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>

#include "lattn/cache.h"
#include "lattn/errors.h"
#include "lattn/ops.h"
#include "lattn/tensor.h"

namespace {

using lattn::DType;
using lattn::Tensor;

struct Sizes {
  int64_t T, L, R, N, D, B, BS, batch;
};

// A random view plus the heap block it lives in (exactly its byte span).
struct View {
  Tensor t;
  std::unique_ptr<char[]> memory;
};

int64_t pick_size(FuzzedDataProvider& in, const Sizes& s) {
  switch (in.ConsumeIntegralInRange<int>(0, 11)) {
    case 0:
      return s.T;
    case 1:
      return s.L;
    case 2:
      return s.R;
    case 3:
      return s.L + s.R;
    case 4:
      return s.N;
    case 5:
      return s.D;
    case 6:
      return s.B;
    case 7:
      return s.BS;
    case 8:
      return s.batch;
    case 9:
      return s.batch + 1;
    case 10:
      return 1;
    default:
      return in.ConsumeIntegralInRange<int64_t>(0, 7);
  }
}

DType pick_dtype(FuzzedDataProvider& in, DType likely) {
  static constexpr DType kAll[] = {DType::f32, DType::f16, DType::bf16, DType::fp8_e4m3,
                                   DType::i32, DType::i64, DType::u8};
  return in.ConsumeBool() ? likely : kAll[in.ConsumeIntegralInRange<size_t>(0, std::size(kAll) - 1)];
}

// Index-like values: small, past the end, negative, or extreme.
int64_t pick_index(FuzzedDataProvider& in, int64_t hi) {
  switch (in.ConsumeIntegralInRange<int>(0, 5)) {
    case 0:
      return in.ConsumeIntegral<int64_t>();
    case 1:
      return -1;
    case 2:
      return hi + in.ConsumeIntegralInRange<int64_t>(0, 3);
    default:
      return in.ConsumeIntegralInRange<int64_t>(0, hi > 0 ? hi - 1 : 0);
  }
}

View make_view(FuzzedDataProvider& in, const Sizes& s, DType likely, int likely_rank, int64_t index_hi) {
  View v;
  const DType dtype = pick_dtype(in, likely);
  const int rank = in.ConsumeBool() ? likely_rank : in.ConsumeIntegralInRange<int>(0, 4);
  std::vector<int64_t> shape(static_cast<size_t>(rank)), strides(static_cast<size_t>(rank));
  for (int64_t& d : shape) d = pick_size(in, s);
  // Contiguous strides, sometimes padded, zero or negated.
  int64_t running = 1;
  for (int d = rank - 1; d >= 0; --d) {
    int64_t stride = running;
    switch (in.ConsumeIntegralInRange<int>(0, 9)) {
      case 0:
        stride = running + in.ConsumeIntegralInRange<int64_t>(1, 5);
        break;
      case 1:
        stride = 0;
        break;
      case 2:
        stride = -running;
        break;
      default:
        break;
    }
    strides[size_t(d)] = stride;
    running = std::max<int64_t>(1, std::abs(stride)) * std::max<int64_t>(shape[size_t(d)], 1);
  }
  int64_t lo = 0, hi = 0, numel = 1;
  for (int d = 0; d < rank; ++d) {
    numel *= shape[size_t(d)];
    if (shape[size_t(d)] == 0) continue;
    const int64_t reach = (shape[size_t(d)] - 1) * strides[size_t(d)];
    (reach < 0 ? lo : hi) += reach;
  }
  const int es = lattn::dtype_size(dtype);
  const int64_t bytes = numel == 0 ? 0 : (hi - lo + 1) * es;
  v.memory.reset(new char[size_t(std::max<int64_t>(bytes, 1))]);
  char* base = v.memory.get() - lo * es;
  v.t = Tensor(numel == 0 ? nullptr : base, dtype, shape, strides);
  if (numel == 0) return v;
  // Contents: index values for integer dtypes, random bytes otherwise.
  for (int64_t off = 0; off < bytes; off += es) {
    char* p = v.memory.get() + off;
    if (dtype == DType::i32) {
      const int32_t x = int32_t(pick_index(in, index_hi));
      std::memcpy(p, &x, 4);
    } else if (dtype == DType::i64) {
      const int64_t x = pick_index(in, index_hi);
      std::memcpy(p, &x, 8);
    } else {
      for (int b = 0; b < es; ++b) p[b] = char(in.ConsumeIntegral<uint8_t>());
    }
  }
  return v;
}

lattn::LatentCache make_cache(FuzzedDataProvider& in, const Sizes& s, View& storage) {
  storage = make_view(in, s, in.ConsumeBool() ? DType::bf16 : DType::fp8_e4m3, 3, 0);
  lattn::LatentCache c{storage.t, int(s.L), int(s.R), in.ConsumeBool() ? 1.0f : in.ConsumeFloatingPoint<float>()};
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  Sizes s;
  s.T = in.ConsumeIntegralInRange<int64_t>(0, 6);
  s.L = in.ConsumeIntegralInRange<int64_t>(1, 8);
  s.R = in.ConsumeIntegralInRange<int64_t>(1, 4);
  s.N = in.ConsumeIntegralInRange<int64_t>(1, 3);
  s.D = in.ConsumeIntegralInRange<int64_t>(1, 8);
  s.B = in.ConsumeIntegralInRange<int64_t>(0, 5);
  s.BS = in.ConsumeIntegralInRange<int64_t>(1, 4);
  s.batch = in.ConsumeIntegralInRange<int64_t>(0, 3);
  const int64_t slots = s.B * s.BS;
  try {
    switch (in.ConsumeIntegralInRange<int>(0, 4)) {
      case 0: {
        View storage;
        const lattn::LatentCache cache = make_cache(in, s, storage);
        View kv = make_view(in, s, DType::bf16, 2, 0), pe = make_view(in, s, DType::bf16, 2, 0);
        View slot = make_view(in, s, DType::i64, 1, slots);
        lattn::concat_and_cache_mla(kv.t, pe.t, cache, slot.t);
        break;
      }
      case 1: {
        View storage;
        const lattn::LatentCache cache = make_cache(in, s, storage);
        View dst = make_view(in, s, DType::bf16, 2, 0);
        View table = make_view(in, s, DType::i32, 2, s.B);
        View cu = make_view(in, s, DType::i32, 1, s.T + 1);
        View starts = make_view(in, s, DType::i32, 1, 2 * s.BS);
        const bool with_starts = in.ConsumeBool();
        const int batch = in.ConsumeBool() ? int(s.batch) : in.ConsumeIntegral<int>();
        lattn::gather_cache(cache, dst.t, table.t, cu.t, batch, with_starts ? starts.t : Tensor());
        break;
      }
      case 2: {
        View out = make_view(in, s, DType::f32, 3, 0), po = make_view(in, s, DType::f32, 3, 0),
             so = make_view(in, s, DType::f32, 3, 0);
        View pl = make_view(in, s, DType::f32, 2, 0), sl = make_view(in, s, DType::f32, 2, 0),
             ol = make_view(in, s, DType::f32, 2, 0);
        lattn::merge_attn_states(out.t, in.ConsumeBool() ? ol.t : Tensor(), po.t, pl.t, so.t, sl.t);
        break;
      }
      case 3: {
        View storage;
        const lattn::LatentCache cache = make_cache(in, s, storage);
        View map = make_view(in, s, DType::i64, 2, s.B);
        const lattn::LatentCache caches[] = {cache};
        lattn::copy_blocks(caches, map.t);
        break;
      }
      default: {
        View a, b;
        const lattn::LatentCache src = make_cache(in, s, a), dst = make_cache(in, s, b);
        View map = make_view(in, s, DType::i64, 2, s.B);
        lattn::swap_blocks(src, dst, map.t);
        break;
      }
    }
  } catch (const lattn::ValueError&) {
    // refused before writing: fine
  }
  return 0;
}
