// src/cuda/smxx/decode_pieces.cuh — the walk over the (request, key-tile
// range) pieces that the split-KV plan (decode_params.h, DecodePlan) gives to
// one part, and the view of a piece's request that a CTA works from; shared
// by the decode kernels (sm80/decode, sm90/decode, the one-launch kernel) so
// they cannot disagree with each other or with decode_combine about which
// part writes which slot.
#pragma once

#include "cuda/smxx/batch_invariant_split.h"
#include "cuda/smxx/decode_params.h"

namespace lattn::cuda {

// A piece of a part's walk: tiles [tile_begin, tile_end) of request r,
// partial slot `slot` (-1: the piece writes the final output).
struct DecodePiece {
  int r, tile_begin, tile_end, slot;
};

// Request r's piece in part `part` (cost units [begin, end) of the plan's
// W = w per part): 1 with `piece` set, 0 when the part has no tiles of it
// (no keys, or none of its tiles), -1 when r and every later request lie past
// the part. In batch-invariant plans a piece is one or more whole splits and
// slot is its first split's (the next splits' slots follow it;
// decode_params.h).
__device__ __forceinline__ int decode_piece_of_request(const DecodeParams& p, int part, int tile_keys, int begin,
                                                       int end, int w, int r, DecodePiece& piece) {
  const DecodePlan& plan = p.plan;
  const int c0 = plan.cost_prefix[r];
  if (c0 >= end) return -1;
  const int c1 = plan.cost_prefix[r + 1];
  if (c1 == c0) return 0;
  const int first_tile_pos = c0 + plan.overhead_tiles;
  const int tiles = (p.seq_lens[r] + tile_keys - 1) / tile_keys;
  int tile_begin = max(begin, first_tile_pos) - first_tile_pos;
  int tile_end = min(min(end, c1) - first_tile_pos, tiles);
  // The part's slot; batch-invariant plans: the cost unit is one split,
  // splits [a, b) of the request are mapped to their tiles, one slot per
  // split (the piece's first split's is passed).
  int slot_index = part - first_tile_pos / w;
  if (plan.batch_invariant) {
    slot_index = tile_begin;
    batch_invariant_splits_range(tiles, tile_begin, tile_end, plan.split_rule, tile_begin, tile_end);
  }
  if (tile_end <= tile_begin) return 0;
  piece = {r, tile_begin, tile_end, plan.num_splits[r] >= 2 ? plan.split_offset[r] + slot_index : -1};
  return 1;
}

// Calls fn(request, tile_begin, tile_end, slot) for every request whose cost
// range meets part `part`'s: tiles [tile_begin, tile_end) of `tile_keys` keys
// each (never empty), slot = the partial-result slot when the request is
// split, else -1 (the part writes the final output). In batch-invariant plans
// a piece is one or more whole splits and slot is its first split's (the
// next splits' slots follow it; decode_params.h). Requests without keys
// are skipped (decode_combine writes their 0 / -inf). The arithmetic is
// decode_piece_of_request's, written out: calling it made every decode
// kernel's code longer (8 % more PTX registers in the key-major kernel),
// which was not timed.
template <class Fn>
__device__ __forceinline__ void for_each_decode_piece(const DecodeParams& p, int part, int tile_keys, Fn&& fn) {
  const DecodePlan& plan = p.plan;
  const int w = plan.header[0], total = plan.header[1];
  const int begin = part * w, end = min(begin + w, total);
  if (begin >= end) return;
  const int ovh = plan.overhead_tiles;
  for (int r = plan.part_first_req[part]; r < p.batch; ++r) {
    const int c0 = plan.cost_prefix[r];
    if (c0 >= end) break;
    const int c1 = plan.cost_prefix[r + 1];
    if (c1 == c0) continue;
    const int first_tile_pos = c0 + ovh;
    const int tiles = (p.seq_lens[r] + tile_keys - 1) / tile_keys;
    int tile_begin = max(begin, first_tile_pos) - first_tile_pos;
    int tile_end = min(min(end, c1) - first_tile_pos, tiles);
    // The part's slot; batch-invariant plans: the cost unit is one split,
    // splits [a, b) of the request are mapped to their tiles, one slot per
    // split (the piece's first split's is passed). One call of fn (the
    // attention kernel, inlined: a second copy changes its registers).
    int slot_index = part - first_tile_pos / w;
    if (plan.batch_invariant) {
      slot_index = tile_begin;
      batch_invariant_splits_range(tiles, tile_begin, tile_end, plan.split_rule, tile_begin, tile_end);
    }
    if (tile_end <= tile_begin) continue;
    const int slot = plan.num_splits[r] >= 2 ? plan.split_offset[r] + slot_index : -1;
    fn(r, tile_begin, tile_end, slot);
  }
}

// The first piece of part `part` whose request is r_from or later; false
// when the part has none left (a walk that looks one piece ahead).
__device__ __forceinline__ bool find_decode_piece(const DecodeParams& p, int part, int tile_keys, int r_from,
                                                  DecodePiece& piece) {
  const DecodePlan& plan = p.plan;
  const int w = plan.header[0], total = plan.header[1];
  const int begin = part * w, end = min(begin + w, total);
  if (begin >= end) return false;
  for (int r = max(r_from, plan.part_first_req[part]); r < p.batch; ++r) {
    const int found = decode_piece_of_request(p, part, tile_keys, begin, end, w, r, piece);
    if (found != 0) return found > 0;
  }
  return false;
}

// What a CTA knows about the request of the piece it works on.
struct DecodeRequestView {
  int q0;                // first token row of the request
  int s_q;               // query tokens
  int seq_len;           // keys
  int rows;              // s_q * num_heads (packed rows: token-major, head fastest)
  int row0;              // first packed row of this CTA's M tile
  const int32_t* table;  // the request's block-table row
};

// Request r as the CTA whose M tile starts at packed row row0 sees it; the
// CTA has no rows in it when row0 >= rows.
__device__ __forceinline__ DecodeRequestView make_decode_request_view(const DecodeParams& p, int r, int row0) {
  DecodeRequestView v;
  v.q0 = p.query_start_loc[r];
  v.s_q = p.query_start_loc[r + 1] - v.q0;
  v.seq_len = p.seq_lens[r];
  v.rows = v.s_q * p.num_heads;
  v.row0 = row0;
  v.table = p.block_table + r * p.block_table_stride;
  return v;
}

// Where the query's columns [col, col + 8) of the view's packed row gr
// (< rows) start: token q0 + gr / num_heads, head gr % num_heads; columns
// below kL in q_nope, the rest in q_pe (at col - kL).
template <class T, int kL>
__device__ __forceinline__ const T* decode_q_src(const DecodeParams& p, const DecodeRequestView& v, int gr, int col) {
  const int j = gr / p.num_heads, h = gr % p.num_heads;
  return col < kL ? static_cast<const T*>(p.q_nope) + (v.q0 + j) * p.q_nope_stride_t + h * p.q_nope_stride_h + col
                  : static_cast<const T*>(p.q_pe) + (v.q0 + j) * p.q_pe_stride_t + h * p.q_pe_stride_h + (col - kL);
}

// for_each_decode_piece restricted to the pieces that have rows of this
// CTA's M tile (kBlockM packed rows from blockIdx.x * kBlockM):
// fn(view, tile_begin, tile_end, slot), still one call site of fn.
template <int kBlockM, class Fn>
__device__ __forceinline__ void for_each_tile_piece(const DecodeParams& p, int part, int tile_keys, Fn&& fn) {
  for_each_decode_piece(p, part, tile_keys, [&](int r, int tile_begin, int tile_end, int slot) {
    const DecodeRequestView v = make_decode_request_view(p, r, blockIdx.x * kBlockM);
    if (v.row0 < v.rows) fn(v, tile_begin, tile_end, slot);
  });
}

// find_decode_piece restricted to the pieces that have rows of this CTA's M
// tile (kBlockM packed rows from blockIdx.x * kBlockM), with their view: a
// kernel that looks one piece ahead (the seesaw's early Q load) walks with it.
template <int kBlockM>
__device__ __forceinline__ bool find_tile_piece(const DecodeParams& p, int part, int tile_keys, int r_from,
                                                DecodePiece& piece, DecodeRequestView& view) {
  for (int r = r_from; find_decode_piece(p, part, tile_keys, r, piece); r = piece.r + 1) {
    view = make_decode_request_view(p, piece.r, blockIdx.x * kBlockM);
    if (view.row0 < view.rows) return true;
  }
  return false;
}

}  // namespace lattn::cuda
