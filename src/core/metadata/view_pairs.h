// src/core/metadata/view_pairs.h — the index arrays of a metadata as the
// pairs of views they are (internal).
//
// Every index array of MlaMetadata (and of its decode and prefill views) is
// one array seen twice: `X_cpu` on the host, where planning and validation
// read it, and `X` where the kernels read it (the host view itself on the
// CPU). Both halves belong to one MetadataStorage (metadata_storage.h: the
// host arena and its device mirror, at the same offsets), which to_device
// copies once per range. This is the one list of those pairs, with their
// names: binding the device views, and checking that they are where the
// kernels will read them, walk it instead of naming the arrays again.
#pragma once

#include <vector>

#include "lattn/device.h"
#include "lattn/metadata.h"
#include "lattn/tensor.h"

namespace lattn::detail {

template <class T>  // Tensor or const Tensor
struct BasicViewPair {
  const char* name;  // "metadata.decode.seq_lens", as errors name the array
  T* host;           // X_cpu
  T* device;         // X
};
using ViewPair = BasicViewPair<Tensor>;
using ConstViewPair = BasicViewPair<const Tensor>;

// Every pair of `m`, the decode and prefill views' included when present (19
// with both). Undefined views are listed too (a part a build left empty).
std::vector<ViewPair> view_pairs(MlaMetadata& m);
std::vector<ConstViewPair> view_pairs(const MlaMetadata& m);

// The device half of one pair: defined, on `device`, with the host half's
// dtype and shape. ValueError naming `op` and "<name> (device copy)".
void check_view_pair(const char* op, const ConstViewPair& pair, Device device);

}  // namespace lattn::detail
