# SPDX-License-Identifier: Apache-2.0
"""FlashInfer's sampling and quantization functions under its names and argument orders (C++:
specdec/sampling, specdec/mask/packbits.hpp)."""

from __future__ import annotations

import sys

import numpy as np

from . import _args, _specdec
from ._args import is_torch as _is_torch
from ._args import seed_offset as _seed_offset
from ._common import _NONE_F32, _empty, _empty_f32_like, _stream, philox_uniforms
from .rows import softmax

__all__ = ["top_k_renorm_probs", "top_p_renorm_probs", "top_k_mask_logits", "segment_packbits", "sampling_from_probs", "top_k_top_p_sampling_from_logits", "chain_speculative_sampling"]


# ---- FlashInfer --------------------------------------------------------------------------------------


def top_k_renorm_probs(probs, top_k, out=None):
    """FlashInfer's ``top_k_renorm_probs``: keep the ``top_k`` largest probabilities of each row (ties
    with the k-th kept), zero the rest, renormalise.

    probs: float32 ``[batch, V]``, rows summing to 1 (within 1e-3). top_k: an int, or one per row.
    out: optional float32 ``[batch, V]`` (may be ``probs`` itself); returned. Host arrays, or (a CUDA
    build) CUDA tensors: then one kernel, one block per row, on the current stream of ``probs``.
    """
    if out is None:
        out = _empty_f32_like(probs, "probs")
    _specdec.filter_rows(probs, out, _per_row("top_k", top_k, "int64", probs), _NO_P, True, _stream(probs))
    return out


def _per_row(name: str, value, dtype: str, rows):
    """top_k (int64) / top_p (float32), a number or one per row, as ``dtype`` where ``rows`` lives: on a
    CUDA tensor's device, else numpy (a float top_k is a TypeError, not truncated)."""
    if _is_torch(rows) and rows.is_cuda:
        if dtype == "int64":
            return _args.device_integers(name, value, dtype, rows, scalar=True)
        return _args.device_reals(name, value, dtype, rows, scalar=True)
    if dtype == "int64":
        return _args.integers(name, value, dtype, scalar=True)
    return _args.reals(name, value, dtype, scalar=True)


_NO_K = np.empty(0, dtype=np.int64)  # a filter that is off (an empty array, wherever the rows are)
_NO_P = np.empty(0, dtype=np.float32)


def top_p_renorm_probs(probs, top_p, out=None):
    """FlashInfer's ``top_p_renorm_probs``: keep a token iff the mass of the strictly larger
    probabilities is below ``top_p`` (the smallest set of largest tokens reaching it, ties kept), zero the
    rest, renormalise. top_p: a float in (0, 1], or one per row. Shapes and devices as
    ``top_k_renorm_probs``; the masses above each token are double sums in specdec's canonical order."""
    if out is None:
        out = _empty_f32_like(probs, "probs")
    _specdec.filter_rows(probs, out, _NO_K, _per_row("top_p", top_p, "float32", probs), True, _stream(probs))
    return out


def top_k_mask_logits(logits, top_k, out=None):
    """FlashInfer's ``top_k_mask_logits``: in each row of float32 ``[batch, V]``, every logit below the
    row's ``top_k``-th largest becomes -inf (ties with the k-th kept); top_k an int or one per row.
    ``out`` may be ``logits`` itself; returned. Host arrays or CUDA tensors, as ``top_k_renorm_probs``."""
    if out is None:
        out = _empty_f32_like(logits, "logits")
    _specdec.filter_rows(logits, out, _per_row("top_k", top_k, "int64", logits), _NO_P, False, _stream(logits))
    return out


def segment_packbits(x, indptr, bitorder="big"):
    """FlashInfer's ``segment_packbits``: each segment ``x[indptr[i]:indptr[i + 1]]`` of a bool (or uint8)
    array packed into its own bytes, zero-padded. Returns ``(y uint8, new_indptr int32)``, ``new_indptr``
    the byte offsets of the segments in ``y``. ``bitorder`` "big" (numpy.packbits' default) or "little"
    (SGLang's masks). Host arrays, or a CUDA tensor ``x`` (``indptr`` moved to its device as int32): two
    kernels on the current stream, each checked as every device call is (one synchronisation), with the
    output's size read back between them (FlashInfer's wrapper reads it too); ``y`` and ``new_indptr`` on
    ``x``'s device."""
    little = _args.choice("bitorder", bitorder, ("big", "little")) == "little"
    (n,) = _args.shape("x", x, 1)
    if _is_torch(x) and x.is_cuda:
        import torch

        ip = _args.device_integers("indptr", indptr, "int32", x, what="offsets")
        new_indptr = torch.empty_like(ip)
        stream = _stream(x)
        _specdec.segment_packbits_offsets(ip, new_indptr, stream)
        total = int(new_indptr[-1].item()) if ip.numel() else 0
        # Offsets within [0, n] pack into at most n / 8 + one byte per segment: a larger total (the
        # offsets are out of range) is refused before it is allocated; the kernel names the segment.
        if not 0 <= total <= (n + 7) // 8 + ip.numel():
            raise ValueError(f"indptr: expected non-decreasing offsets within [0, {n}] (the length of x); they would pack into "
                             f"{total} bytes")
        y = torch.empty(total, dtype=torch.uint8, device=x.device)
        _specdec.segment_packbits(x.contiguous(), ip, new_indptr, little, y, stream)
        return y, new_indptr
    ip = _args.integers("indptr", indptr, "int32", what="offsets")
    # Before y is sized by them (the C++ call checks the same, after): with the same message.
    bad = (ip[:-1] < 0) | (ip[1:] < ip[:-1]) | (ip[1:] > n)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"indptr gives segment {i} elements [{ip[i]}, {ip[i + 1]}); expected a non-decreasing range within "
                         f"[0, {n}]")
    new_indptr = np.empty(len(ip), dtype=np.int32)
    _specdec.segment_packbits_offsets(ip, new_indptr, 0)
    y = np.empty(int(new_indptr[-1]), dtype=np.uint8)
    _specdec.segment_packbits(x if not _is_torch(x) else x.contiguous(), ip, new_indptr, little, y, 0)
    if _is_torch(x):
        import torch

        return torch.from_numpy(y), torch.from_numpy(new_indptr)
    return y, new_indptr


def sampling_from_probs(probs, indices=None, deterministic=True, generator=None, check_nan=False, seed=None,
                        offset=None, uniforms=None):
    """FlashInfer's ``sampling_from_probs``: one token per row, int32 ``[batch]``.

    The draw is specdec's canonical inverse CDF (the first token whose running sum in index order
    exceeds ``u * sum``), so every backend returns the same token; FlashInfer's own kernel draws
    differently, so the tokens follow the same distribution, not the same sequence. ``indices`` (int
    ``[batch']``) selects the rows to sample, as in FlashInfer. ``uniforms`` (float32 ``[batch']`` in
    [0, 1)) replaces the random draw; otherwise row i reads Philox stream ``(seed, i)`` at ``offset``.
    ``deterministic`` and ``check_nan`` are accepted for compatibility (the draw is always
    deterministic and NaN is always an error).
    """
    del deterministic, check_nan
    if indices is not None:
        probs = _select_rows(probs, "probs", indices)
    n = _args.shape("probs", probs, 2)[0]
    if uniforms is None:
        s, o = _seed_offset(seed, offset, generator)
        if not (_is_torch(probs) and probs.is_cuda):  # the host draws the Philox uniforms itself
            out = _empty(probs, (n,), "int32")
            _specdec.sample_rows(probs, _NONE_F32, out, 0, s, o)
            return out
        uniforms = philox_uniforms(s, o, n, 1, "float32").reshape(n)
        if _is_torch(probs) and probs.is_cuda:
            import torch

            uniforms = torch.from_numpy(uniforms).to(probs.device)
    out = _empty(probs, (n,), "int32")
    _specdec.sample_rows(probs, uniforms if not _is_torch(uniforms) else uniforms.contiguous(), out, _stream(probs))
    return out


def top_k_top_p_sampling_from_logits(logits, top_k, top_p, indices=None, filter_apply_order="top_k_first",
                                     deterministic=True, generator=None, check_nan=False, seed=None, offset=None,
                                     uniforms=None):
    """FlashInfer's ``top_k_top_p_sampling_from_logits``: per row ``softmax(logits)``, the filters, one
    draw (``sampling_from_probs``, same randomness arguments); int32 ``[batch]``. top_k / top_p: a number
    or one per row. ``filter_apply_order="top_k_first"``: the top-k renormalisation
    (``top_k_renorm_probs``), then the top-p one on its result (``top_p_renorm_probs``); ``"joint"``: both
    judged on the softmax as given, a token kept iff fewer than k probabilities are strictly larger and
    their mass is below top_p (``specdec::sampling::top_k_top_p_joint_renorm``; never fewer tokens than
    top-k first).
    """
    del deterministic, check_nan
    _args.choice("filter_apply_order", filter_apply_order, ("top_k_first", "joint"))
    if indices is not None:
        logits = _select_rows(logits, "logits", indices)
    probs = softmax(logits)
    if filter_apply_order == "joint":
        _specdec.filter_rows(probs, probs, _per_row("top_k", top_k, "int64", probs), _per_row("top_p", top_p, "float32", probs),
                             True, _stream(probs))
    else:
        top_k_renorm_probs(probs, top_k, out=probs)
        top_p_renorm_probs(probs, top_p, out=probs)
    return sampling_from_probs(probs, generator=generator, seed=seed, offset=offset, uniforms=uniforms)


def _select_rows(rows, name: str, indices):
    """Rows `indices` of 2-D argument `name` (FlashInfer's ``indices``): each index in [0, rows) — a
    negative one is refused, not read from the end."""
    batch = _args.shape(name, rows, 2)[0]
    picked = _args.integers("indices", indices, "int64", lo=0, hi=batch - 1, what="row indices",
                            why=f" (the rows of {name})")
    if _is_torch(rows):
        return rows[sys.modules["torch"].from_numpy(picked).to(rows.device)]
    return rows[picked]


def chain_speculative_sampling(draft_probs, draft_token_ids, target_probs, maybe_output_accepted_token_num=None,
                               maybe_output_emitted_draft_token_num=None, deterministic=True, generator=None,
                               seed=None, offset=None, uniforms=None):
    """FlashInfer's ``chain_speculative_sampling``: verifies a batch of draft chains.

    draft_probs: float32 ``[batch, k, V]``; draft_token_ids: int32 ``[batch, k]``; target_probs: float32
    ``[batch, k + 1, V]``. Returns ``(output_token_ids, accepted_token_num, emitted_draft_token_num)``:
    int32 ``[batch, k + 1]`` (the accepted drafts, then the final token, -1 padded), and int32 ``[batch]``
    counters which, when given as ``maybe_output_*``, are added to (FlashInfer's ``+=``) and returned.

    FlashInfer's conventions: accept draft x iff ``u * p_draft(x) < p_target(x)``, uniforms in (0, 1];
    after a rejection at position i, positions i..k-1 are re-tested with fresh uniforms and the passes
    counted in ``accepted_token_num``; the final token is drawn from ``relu(target - draft)`` (or the
    bonus row) by inverse CDF. ``uniforms`` (float64 ``[batch, >= 2k + 1]``, in (0, 1], consumption
    order) replaces the random draw; otherwise row r reads Philox stream ``(seed, r)`` at ``offset``.
    """
    del deterministic
    batch, k = _args.shape("draft_token_ids", draft_token_ids, 2)
    counters = (("maybe_output_accepted_token_num", maybe_output_accepted_token_num),
                ("maybe_output_emitted_draft_token_num", maybe_output_emitted_draft_token_num))
    for name, counter in counters:
        if counter is not None:
            _counter(name, counter, batch)
    if uniforms is None:
        s, o = _seed_offset(seed, offset, generator)
        u = np.empty((0, 0), dtype=np.float64)
    else:
        s, o = 0, 0
        u = uniforms
    if _is_torch(target_probs) and target_probs.is_cuda:
        out, accepted, emitted = _chain_as_batch(draft_probs, draft_token_ids, target_probs, uniforms, s, o)
    else:
        out = _empty(target_probs, (batch, k + 1), "int32")
        accepted = _empty(target_probs, (batch,), "int32")
        emitted = _empty(target_probs, (batch,), "int32")
        _specdec.chain_speculative_sampling(draft_probs, draft_token_ids, target_probs, u, s, o, out, accepted, emitted)
    if maybe_output_accepted_token_num is not None:
        maybe_output_accepted_token_num += accepted
        accepted = maybe_output_accepted_token_num
    if maybe_output_emitted_draft_token_num is not None:
        maybe_output_emitted_draft_token_num += emitted
        emitted = maybe_output_emitted_draft_token_num
    return out, accepted, emitted


def _counter(name: str, counter, batch: int) -> None:
    """FlashInfer's ``maybe_output_*`` counters, added to in place: `batch` integers, writable (checked
    before the call, so that numpy's own errors, which name nothing, never arise)."""
    if _args.shape(name, counter, 1) != (batch,):
        raise ValueError(f"{name}: expected shape ({batch},); got {tuple(counter.shape)}")
    if _is_torch(counter):
        if counter.dtype.is_floating_point or counter.dtype.is_complex or counter.dtype == sys.modules["torch"].bool:
            raise TypeError(f"{name}: expected integer counters; got {_args._kind(counter)}")
        return
    if not isinstance(counter, np.ndarray) or counter.dtype.kind != "i" or counter.dtype.itemsize < 4:
        # The counts are int32 and added in place: into int32 or int64 (numpy refuses narrower or unsigned).
        raise TypeError(f"{name}: expected int32 or int64 counters (a numpy array or torch tensor); got {_args._kind(counter)}")
    if not counter.flags.writeable:
        raise ValueError(f"{name}: expected a writable array (the counts are added to it); got a read-only one")


def _philox_streams(like, batch: int, seed: int, offset):
    """The padded-batch verifier's randomness: request r reads Philox stream (seed, r) from `offset` (an
    int, or already an int64 array of one offset per request). Returns (streams int64 [batch x 2], the
    uint64 pairs (seed, r) as int64; offsets int64 [batch]) of `like`'s kind and device."""
    pairs = np.zeros((batch, 2), dtype=np.uint64)
    pairs[:, 0] = np.uint64(seed % 2**64)
    pairs[:, 1] = np.arange(batch, dtype=np.uint64)
    streams = pairs.view(np.int64)
    if _is_torch(offset) or (isinstance(offset, np.ndarray) and offset.ndim > 0):
        offsets = offset  # per request, int64 [batch]: the call checks it
    elif isinstance(offset, (list, tuple)):
        offsets = _args.integers("offset", offset, "int64", what="stream offsets")
    else:
        o = _args.integer("offset", offset, 0, _args.UINT64_END - 1)
        offsets = np.full(batch, o, dtype=np.uint64).view(np.int64)  # read back as the uint64 it holds
        if _is_torch(like):
            offsets = sys.modules["torch"].from_numpy(offsets).to(like.device)
    if _is_torch(like):
        streams = sys.modules["torch"].from_numpy(streams).to(like.device)
    return streams, offsets


def _chain_as_batch(draft_probs, draft_token_ids, target_probs, uniforms, seed: int, offset: int):
    """chain_speculative_sampling through specdec's padded-batch verifier (sampling::tree_batch with
    FlashInfer's conventions): the form CUDA tensors take (one kernel); the host runs the request-based
    verifier, whose decisions these are, bit for bit (python/tests/test_batch_verify.py runs this on the
    host against it). Returns (output_token_ids, accepted_token_num, emitted_draft_token_num)."""
    batch, k = _args.shape("draft_token_ids", draft_token_ids, 2)
    v = _args.shape("target_probs", target_probs, 3)[-1]
    for name, x, want in (("draft_probs", draft_probs, (batch, k, v)), ("target_probs", target_probs, (batch, k + 1, v))):
        if tuple(x.shape) != want:
            raise ValueError(f"{name}: expected shape {want}; got {tuple(x.shape)}")
    if _is_torch(target_probs):
        torch = sys.modules["torch"]
        if not (_is_torch(draft_token_ids) and draft_token_ids.dtype == torch.int32):
            raise TypeError("draft_token_ids: expected an int32 torch tensor (as target_probs)")
        dev = target_probs.device
        tokens = torch.cat([torch.zeros((batch, 1), dtype=torch.int32, device=dev), draft_token_ids.to(dev)], dim=1)
        parents = torch.arange(-1, k, dtype=torch.int32, device=dev).repeat(batch, 1)
        rows = torch.arange(batch, dtype=torch.int64, device=dev)[:, None] * k + torch.arange(-1, k, dtype=torch.int64, device=dev)
        rows[:, 0] = -1
    else:
        tokens = np.concatenate([np.zeros((batch, 1), dtype=np.int32),
                                 _args.integers("draft_token_ids", draft_token_ids, "int32", ndim=2, what="token ids")], axis=1)
        parents = np.tile(np.arange(-1, k, dtype=np.int32), (batch, 1))
        rows = np.arange(batch, dtype=np.int64)[:, None] * k + np.arange(-1, k, dtype=np.int64)
        rows[:, 0] = -1
    streams, offsets = _NONE_F32, _NONE_F32
    if uniforms is None:
        streams, offsets = _philox_streams(target_probs, batch, seed, offset)
    draft = draft_probs.reshape(batch * k, v) if k > 0 else _NONE_F32
    out = _empty(target_probs, (batch, k + 1), "int32")
    accepted = _empty(target_probs, (batch,), "int32")
    emitted = _empty(target_probs, (batch,), "int32")
    _specdec.verify_batch(target_probs.reshape(batch * (k + 1), v), False, tokens, parents, _NONE_F32, _NONE_F32, draft,
                          rows if k > 0 else _NONE_F32, _NONE_F32, _NONE_F32, _NONE_F32 if uniforms is None else uniforms,
                          streams, offsets, out, emitted, _NONE_F32, _NONE_F32, True, accepted, _stream(target_probs))
    return out, accepted, emitted
