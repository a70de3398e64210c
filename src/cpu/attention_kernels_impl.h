// src/cpu/attention_kernels_impl.h — the flash-attention kernels of the
// `cpu` backend (f32 FMA path), written once over an instruction-set policy
// `I` (internal): the shared primitives (attention_tile_primitives.h, where
// the policy's contract and the algorithm are described), the prefill tile
// (attention_prefill_tile.h) and the decode split (attention_decode_split.h).
// The bf16 dot-product path is attention_bf16_impl.h.
//
// Include only from kernels_<isa>.cpp files: everything has internal linkage,
// so each ISA's copy stays in its own object file.
#pragma once

#include "cpu/attention_decode_split.h"
#include "cpu/attention_prefill_tile.h"
#include "cpu/attention_tile_primitives.h"
