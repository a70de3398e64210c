// src/core/ops/device_ops_types.h — the types the device-ops entries take
// (internal): the public value types and the argument structs declared
// elsewhere. One list for the table (core/ops/device_ops.h) and for each
// device's functions behind it (cuda/device_ops.h), so that both name the
// same types.
#pragma once

#include <cstddef>
#include <span>

#include "lattn/cache.h"
#include "lattn/device.h"
#include "lattn/stream.h"
#include "lattn/tensor.h"

namespace lattn {
struct SparseMlaArgs;  // lattn/sparse.h
struct IndexerArgs;
struct IndexerKeyCache;
}  // namespace lattn

namespace lattn::detail {
struct GemmProblem;  // core/ops/gemm.h
}  // namespace lattn::detail
