"""lattn's kernels as PyTorch custom operators (torch.library), for torch.compile
and CUDA graphs.

    import torch, lattn.torch_ops   # registers torch.ops.lattn.* (lattn does it itself when
                                    # torch was imported first)
    out, lse = torch.ops.lattn.mla_prefill(q, k, v, cu_seqlens_q, cu_seqlens_k, True, scale)
    plan_id = lattn.torch_ops.register_plan(lattn.mla_decode_plan(block_table, seq_lens, 16, n))
    out, lse = torch.ops.lattn.mla_decode(q_absorbed, cache, plan_id, scale)

Operators (schemas):
  lattn::mla_prefill(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k,
                     bool causal, float scale) -> (Tensor out, Tensor lse)
  lattn::mla_decode(Tensor q_absorbed, Tensor cache, int plan_id, float scale) -> (Tensor out, Tensor lse)
Shapes as lattn.mla_prefill / lattn.mla_decode (docs/python.md): out [Tq, N, V] / [T, N, L] in
q's dtype, lse [N, T] float32. Each has CPU and CUDA kernels (lattn's, on the current
stream) and a Meta kernel (and, on PyTorch >= 2.1, a fake implementation) that gives
the output shapes without running anything, which torch.compile traces with.

A decode plan is made outside the graph (it reads the block table on the host once per
step) and named by an int: capture a CUDA graph of mla_decode after planning, and re-plan
into the same plan id between replays only with a plan of the same shape (the plan's
arrays live at fixed addresses; docs/python.md).
"""

from __future__ import annotations

import itertools
import threading

import torch

import lattn

_PLANS: dict[int, object] = {}
_PLAN_IDS = itertools.count(1)
_PLANS_LOCK = threading.Lock()


def register_plan(plan) -> int:
    """Keeps a lattn.DecodePlan for torch.ops.lattn.mla_decode; returns its id."""
    if not isinstance(plan, lattn.DecodePlan):
        raise TypeError(f"register_plan: expected a lattn.DecodePlan, got {type(plan).__name__}")
    with _PLANS_LOCK:
        plan_id = next(_PLAN_IDS)
        _PLANS[plan_id] = plan
    return plan_id


def release_plan(plan_id: int) -> None:
    """Forgets a plan registered with register_plan."""
    with _PLANS_LOCK:
        _PLANS.pop(int(plan_id), None)


def _plan(plan_id: int):
    try:
        return _PLANS[int(plan_id)]
    except KeyError:
        raise ValueError(f"lattn::mla_decode: plan_id {plan_id} is not registered "
                         "(lattn.torch_ops.register_plan)") from None


def _prefill(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale):
    return tuple(lattn.mla_prefill(q, k, v, cu_seqlens_q, cu_seqlens_k, bool(causal), float(scale)))


def _prefill_meta(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale):
    out = q.new_empty((q.shape[0], q.shape[1], v.shape[2]))
    lse = q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
    return out, lse


def _decode(q_absorbed, cache, plan_id, scale):
    plan = _plan(plan_id)
    latent = lattn.LatentCache(cache, plan.kv_lora_rank, plan.qk_rope_head_dim,
                               dtype="fp8_e4m3" if plan.kv_cache_dtype == "fp8_e4m3" else None)
    return tuple(lattn.mla_decode(q_absorbed, latent, plan, float(scale)))


def _decode_meta(q_absorbed, cache, plan_id, scale):
    plan = _PLANS.get(int(plan_id))
    latent_dim = plan.kv_lora_rank if plan is not None else cache.shape[-1] - 64
    t, n = q_absorbed.shape[0], q_absorbed.shape[1]
    return q_absorbed.new_empty((t, n, latent_dim)), q_absorbed.new_empty((n, t), dtype=torch.float32)


_LIB = torch.library.Library("lattn", "DEF")
_LIB.define("mla_prefill(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, bool causal, "
            "float scale) -> (Tensor, Tensor)")
_LIB.define("mla_decode(Tensor q_absorbed, Tensor cache, int plan_id, float scale) -> (Tensor, Tensor)")
for _key in ("CPU", "CUDA"):
    _LIB.impl("mla_prefill", _prefill, _key)
    _LIB.impl("mla_decode", _decode, _key)

# The shapes without running: PyTorch >= 2.1 takes a fake implementation (which also
# serves meta tensors, and refuses a separate Meta kernel); older ones a Meta kernel.
_register_fake = getattr(torch.library, "register_fake", None) or getattr(torch.library, "impl_abstract", None)
if _register_fake is not None:
    _register_fake("lattn::mla_prefill", lib=_LIB)(_prefill_meta)
    _register_fake("lattn::mla_decode", lib=_LIB)(_decode_meta)
else:
    # (PyTorch 1.x has no autograd fallthrough for meta tensors of custom ops: register both keys.)
    for _key in ("Meta", "AutogradMeta"):
        _LIB.impl("mla_prefill", _prefill_meta, _key)
        _LIB.impl("mla_decode", _decode_meta, _key)
