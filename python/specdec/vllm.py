# SPDX-License-Identifier: Apache-2.0
"""vLLM v1's rejection sampler layout (C++: specdec/interop/vllm.hpp)."""

from __future__ import annotations

import re

import numpy as np

from . import _args, _specdec
from ._args import is_torch as _is_torch
from ._args import seed_offset as _seed_offset
from ._common import _empty, _stream, philox_uniforms

__all__ = ["rejection_sample", "apply_sampling_constraints", "apply_top_k_top_p"]


# ---- vLLM --------------------------------------------------------------------------------------------


def rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs, target_probs,
                     bonus_token_ids, is_greedy=None, uniform_probs=None, exponentials=None, seed=None, offset=None,
                     generator=None, cuda_stream=0):
    """vLLM v1's ``rejection_sample`` (``vllm/v1/sample/rejection_sampler.py``), vLLM's layout: returns
    int32 ``[batch, max_spec_len + 1]``, the emitted tokens of each request then -1 (vLLM's
    PLACEHOLDER_TOKEN_ID).

    draft_token_ids: int32 ``[num_tokens]``, every request's drafts back to back; ``num_draft_tokens`` is
    accepted for vLLM's argument order (the counts come from ``cu_num_draft_tokens``, int ``[batch]``,
    cumulative ends); draft_probs: float32 ``[num_tokens, V]`` or None (n-gram drafts: q = 1);
    target_probs: float32 ``[num_tokens, V]`` (no row for the bonus position); bonus_token_ids: int
    ``[batch]`` or ``[batch, 1]``. vLLM's ``sampling_metadata`` becomes ``is_greedy`` (bool ``[batch]``;
    None: every request random), ``uniform_probs`` (float64 ``[num_tokens]``, one per draft position)
    and ``exponentials`` (float32 ``[batch, V]``, vLLM's Exp(1) ``q`` of the recovered-token race); when
    they are not given, request r reads Philox stream ``(seed, r)`` from ``offset`` for its uniforms and
    ``(seed + 1, r)`` for its exponentials (``-log(1 - u)``).

    Host arrays, or (a CUDA build) ``target_probs`` a CUDA tensor: then every array is taken to its device
    (vLLM's are already there), one kernel runs with one block per request on ``cuda_stream`` (0: the
    current stream), and the output is a CUDA tensor, the host's tokens bit for bit. Uniforms and
    exponentials drawn here from ``seed`` are drawn on the host and uploaded: pass vLLM's own to avoid the
    copy.
    """
    del num_draft_tokens
    on_cuda = _is_torch(target_probs) and target_probs.is_cuda
    max_spec_len = _args.integer("max_spec_len", max_spec_len, 0, _args.INT32_MAX - 1)
    tokens, v = _args.shape("target_probs", target_probs, 2)
    cu = cu_num_draft_tokens
    if not on_cuda or uniform_probs is None:
        cu = _args.integers("cu_num_draft_tokens", cu_num_draft_tokens, "int64", scalar=True, what="cumulative counts")
        _check_counts(cu, tokens, max_spec_len)
    batch = _args.shape("cu_num_draft_tokens", cu, 1)[0]
    shape = _args.elements("max_spec_len", (batch, max_spec_len + 1))
    if uniform_probs is None or exponentials is None:
        s, o = _seed_offset(seed, offset, generator)
        if uniform_probs is None:
            # Request r's uniforms are Philox stream (seed, r) from `offset`, as many as it has drafts.
            counts = np.diff(cu, prepend=0)
            per_request = philox_uniforms(s, o, batch, max(int(counts.max(initial=0)), 1))
            uniform_probs = np.concatenate([per_request[r, :counts[r]] for r in range(batch)]) if batch else np.empty(0)
        if exponentials is None:
            exponentials = (-np.log1p(-philox_uniforms((s + 1) % _args.UINT64_END, o, batch, v))).astype(np.float32)
    out = _empty(target_probs, shape, "int32")
    bonus_ndim = _args.ndim(bonus_token_ids)
    stream = _args.integer("cuda_stream", cuda_stream, 0, _args.UINT64_END - 1) or _stream(target_probs)
    if on_cuda:
        import torch

        none_f32 = torch.empty((0, 0), dtype=torch.float32, device=target_probs.device)
        none_u8 = torch.empty(0, dtype=torch.uint8, device=target_probs.device)
        if is_greedy is None:
            greedy = none_u8
        elif _is_torch(is_greedy) and is_greedy.dtype == torch.bool:
            greedy = is_greedy.to(device=target_probs.device, dtype=torch.uint8).reshape(-1).contiguous()
        else:
            greedy = _args.device_integers("is_greedy", is_greedy, "uint8", target_probs, scalar=True, lo=0, hi=1,
                                           what="flags (bools, or 0 and 1)")
        _specdec.rejection_sample(
            _args.device_integers("draft_token_ids", draft_token_ids, "int32", target_probs, what="token ids"),
            _args.device_integers("cu_num_draft_tokens", cu, "int64", target_probs, what="cumulative counts"), max_spec_len,
            none_f32 if draft_probs is None else draft_probs, target_probs,
            _bonus(_args.device_integers, bonus_token_ids, bonus_ndim, target_probs), greedy,
            _args.device_reals("uniform_probs", uniform_probs, "float64", target_probs),
            _args.device_reals("exponentials", exponentials, "float32", target_probs, ndim=2), out, stream)
        return out
    greedy = np.empty(0, dtype=np.uint8) if is_greedy is None else _args.flags("is_greedy", is_greedy)
    no_rows = np.empty((0, 0), dtype=np.float32)
    _specdec.rejection_sample(draft_token_ids, cu, max_spec_len, no_rows if draft_probs is None else draft_probs,
                              target_probs, _bonus(_args.integers, bonus_token_ids, bonus_ndim), greedy,
                              _args.reals("uniform_probs", uniform_probs, "float64"), exponentials, out)
    return out


def _bonus(convert, bonus_token_ids, ndim, *like):
    """vLLM's bonus tokens, int ``[batch]`` or ``[batch, 1]``, as int32 ``[batch]`` (`convert`: to the host
    or to `like`'s device)."""
    if ndim == 2:
        got = convert("bonus_token_ids", bonus_token_ids, "int32", *like, ndim=2, what="token ids")
        if got.shape[1] != 1:
            raise ValueError(f"bonus_token_ids: expected shape [batch] or [batch, 1]; got {tuple(got.shape)}")
        return got.reshape(-1)
    return convert("bonus_token_ids", bonus_token_ids, "int32", *like, what="token ids")


def _check_counts(cu, tokens: int, max_spec_len: int) -> None:
    """vLLM's cumulative draft counts, checked as the C++ call checks them (the same messages), before the
    uniforms they lay out are drawn: non-decreasing ends within [0, tokens], at most max_spec_len each."""
    if len(cu) == 0:
        return
    starts = np.concatenate([[0], cu[:-1]])
    bad = (cu < starts) | (cu > tokens)
    if bad.any():
        r = int(np.argmax(bad))
        raise ValueError(f"cu_num_draft_tokens gives request {r} entries [{starts[r]}, {cu[r]}); expected a non-decreasing range "
                         f"within [0, {tokens}]")
    over = cu - starts > max_spec_len
    if over.any():
        r = int(np.argmax(over))
        raise ValueError(f"cu_num_draft_tokens gives request {r} {cu[r] - starts[r]} drafts; expected at most {max_spec_len} "
                         "(max_spec_len)")


def apply_sampling_constraints(logits, cu_num_draft_tokens, temperature, top_k=None, top_p=None, all_greedy=False):
    """vLLM v1's ``apply_sampling_constraints`` (``vllm/v1/sample/rejection_sampler.py``): what vLLM's
    rejection sampler does to the target logits before ``softmax`` and ``rejection_sample``, in place.
    Request r's rows (``cu_num_draft_tokens``, as ``rejection_sample``'s) are divided by
    ``temperature[r]`` (-1, vLLM's ``GREEDY_TEMPERATURE``: left at 1), then filtered as vLLM's
    ``apply_top_k_top_p``: logits below the ``top_k[r]``-th largest to -inf (ties kept; k = V: off), then
    top-p over what is left (ascending order, ties by index: every entry but the largest whose cumulative
    probability is at most ``1 - top_p[r]``). ``top_k`` / ``top_p`` None: that filter off for the batch;
    ``all_greedy``: nothing done (vLLM's shortcut). logits: float32 ``[num_tokens, V]``, C-contiguous.
    Returns ``logits``. Then: ``target_probs = specdec.softmax(logits)`` and ``rejection_sample``.
    """
    if _args.flag("all_greedy", all_greedy):
        return logits
    no_k, no_p = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
    _specdec.apply_sampling_constraints(logits, _args.integers("cu_num_draft_tokens", cu_num_draft_tokens, "int64", scalar=True,
                                                               what="cumulative counts"),
                                        _args.reals("temperature", temperature, scalar=True),
                                        no_k if top_k is None else _args.integers("top_k", top_k, "int64", scalar=True),
                                        no_p if top_p is None else _args.reals("top_p", top_p, scalar=True))
    return logits


def apply_top_k_top_p(logits, k=None, p=None):
    """vLLM v1's ``apply_top_k_top_p`` (``vllm/v1/sample/ops/topk_topp_sampler.py``): every row of float32
    ``[rows, V]`` logits filtered in place by its ``k[row]`` and ``p[row]`` (None: off), as
    ``apply_sampling_constraints`` does at temperature 1. Returns ``logits``."""
    rows = _args.shape("logits", logits, 2)[0]
    try:
        return apply_sampling_constraints(logits, np.arange(1, rows + 1, dtype=np.int64), np.ones(rows, dtype=np.float32), k, p)
    except (TypeError, ValueError) as e:  # in this function's names for vLLM's per-request filters
        renamed = re.sub(r"\btop_([kp])\b", r"\1", str(e))
        raise (ValueError if isinstance(e, ValueError) else TypeError)(renamed) from None
