# SPDX-License-Identifier: Apache-2.0
"""FlashInfer's sampling and quantization functions under its names and argument orders (C++:
specdec/sampling, specdec/mask/packbits.hpp)."""

from __future__ import annotations

import sys

import numpy as np

from . import _args, _specdec
from ._args import is_torch as _is_torch
from ._args import seed_offset as _seed_offset
from ._common import _NONE_F32, _empty, _empty_f32_like, _empty_rows_like, _stream, philox_uniforms
from .rows import softmax

__all__ = ["top_k_renorm_probs", "top_p_renorm_probs", "top_k_renorm_prob", "top_p_renorm_prob", "top_k_mask_logits",
           "segment_packbits", "packbits", "sampling_from_probs", "sampling_from_logits", "top_k_sampling_from_probs",
           "top_p_sampling_from_probs", "min_p_sampling_from_probs", "top_k_top_p_sampling_from_probs",
           "top_k_top_p_sampling_from_logits", "chain_speculative_sampling"]


# ---- FlashInfer --------------------------------------------------------------------------------------


def top_k_renorm_probs(probs, top_k, is_deterministic=False, *, out=None):
    """FlashInfer's ``top_k_renorm_probs`` (alias ``top_k_renorm_prob``): keep the ``top_k`` largest
    probabilities of each row (ties with the k-th kept), zero the rest, renormalise.

    probs: float32, float16 or bfloat16 ``[batch, V]`` (a 16-bit row read as it is and filtered as the
    float32 row of the same values), rows summing to 1 (within 1e-3; FlashInfer renormalises any row:
    specdec refuses one that is not a distribution). top_k: an int, or one per row (``[batch]``; k >= V
    keeps the row). ``is_deterministic`` is FlashInfer's (its multi-block sums): specdec's result is
    always deterministic, bit for bit on every backend. out: optional ``[batch, V]`` of ``probs``' dtype
    (may be ``probs`` itself; a new one by default, as FlashInfer returns), keyword only; returned, each
    kept entry the float32 quotient rounded to that dtype. Host arrays, or (a CUDA build) CUDA tensors: then one
    kernel, one block per row, on the current stream of ``probs``. Raises TypeError (a dtype, named as
    received) or ValueError (a shape, k < 1, a row that is not a distribution) naming the argument.
    """
    _args.flag("is_deterministic", is_deterministic)
    if out is None:
        out = _empty_rows_like(probs, "probs")
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


def top_p_renorm_probs(probs, top_p, is_deterministic=False, *, out=None):
    """FlashInfer's ``top_p_renorm_probs`` (alias ``top_p_renorm_prob``): in each row of ``probs``, keep a token iff the mass of the
    strictly larger probabilities is below ``top_p`` (the smallest set of largest tokens reaching it, ties
    kept), zero the rest, renormalise. top_p: a float in (0, 1], or one per row. ``is_deterministic``,
    ``out``, shapes, devices and errors as ``top_k_renorm_probs``; the masses above each token are double
    sums in specdec's canonical order."""
    _args.flag("is_deterministic", is_deterministic)
    if out is None:
        out = _empty_rows_like(probs, "probs")
    _specdec.filter_rows(probs, out, _NO_K, _per_row("top_p", top_p, "float32", probs), True, _stream(probs))
    return out


def top_k_mask_logits(logits, top_k, *, out=None):
    """FlashInfer's ``top_k_mask_logits``: in each row of float32 ``[batch, V]`` (on the host also float16 or
    bfloat16, and ``out`` then of that dtype), every logit below the
    row's ``top_k``-th largest becomes -inf (ties with the k-th kept); top_k an int or one per row.
    ``out`` (keyword only) may be ``logits`` itself; returned. Host arrays or CUDA tensors, as
    ``top_k_renorm_probs``."""
    if out is None:
        out = _empty_rows_like(logits, "logits")
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
                        offset=None, return_valid=False, *, uniforms=None):
    """FlashInfer's ``sampling_from_probs``: one token per output row.

    probs: float32 ``[batch, V]``, rows summing to 1 within 1e-4 (FlashInfer draws over whatever mass a
    row has: specdec refuses a row that is not a distribution); on the host also float16 / bfloat16, read
    as it is, the float32 row's token, the tolerance widened by the type's rounding (2^-8 of the sum for
    bf16; 2^-11 of it and 2^-25 per entry for fp16).
    ``indices`` (int32 or int64 ``[batch']``): output row i samples row ``indices[i]``; the output's dtype
    is ``indices``' (int32 without them), as FlashInfer's. The draw is specdec's canonical inverse CDF
    (the first token whose running sum in index order exceeds ``u * sum``), so every backend returns the
    same token; FlashInfer's kernel draws from other streams, so the tokens follow the same distribution,
    not the same sequence. Randomness: ``uniforms`` (float32 ``[batch']`` in [0, 1), keyword only)
    replaces the draw; else output row i reads Philox stream ``(seed, i)`` at ``offset``: ints, or (for
    CUDA graphs) per-row int64 / uint64 arrays of length 1 or ``batch'`` (both arrays, FlashInfer's rule);
    neither given: one seed drawn from ``generator`` (a torch.Generator) or numpy's global generator.
    ``return_valid``: returns ``(samples, valid)``, ``valid`` bool ``[batch']`` False for a row without a
    positive entry (its sample 0), as FlashInfer; without it such a row is a ValueError.
    ``deterministic`` and ``check_nan`` are accepted for FlashInfer's signature (the draw is always
    deterministic and NaN is always a ValueError). Host arrays or CUDA tensors (one kernel on the current
    stream; uniforms drawn here are drawn on the host and uploaded).
    """
    del deterministic, check_nan
    return _sample("probs", probs, indices, None, (), generator, seed, offset, uniforms, return_valid)


def sampling_from_logits(logits, indices=None, deterministic=True, generator=None, check_nan=False, seed=None, offset=None):
    """FlashInfer's ``sampling_from_logits``: one token per output row from ``softmax(logits)``
    (temperature 1), as ``sampling_from_probs`` draws (FlashInfer adds Gumbel noise to the logits: the
    same distribution, other draws). logits: float32 ``[batch, V]`` (on the host also float16 / bfloat16:
    softmax reads them as they are, into float32 probabilities); the other arguments, the output's
    dtype and the errors as ``sampling_from_probs``.
    ``indices``, ``deterministic``, ``generator``, ``check_nan``, ``seed`` and ``offset``: as
    ``sampling_from_probs`` (FlashInfer's has no ``return_valid`` here).
    """
    del deterministic, check_nan
    return _sample("logits", logits, indices, None, (), generator, seed, offset, None, False, from_logits=True)


def top_k_sampling_from_probs(probs, top_k, indices=None, deterministic=True, generator=None, check_nan=False, seed=None,
                              offset=None, return_valid=False, *, uniforms=None):
    """FlashInfer's ``top_k_sampling_from_probs``: one token per output row from the row restricted to the
    tokens with fewer than ``top_k`` strictly larger probabilities (the top k, ties with the k-th kept),
    renormalised: ``top_k_renorm_probs`` then the draw of ``sampling_from_probs``. top_k: an int, or one
    per row of ``probs`` (read at ``indices[i]`` for output row i, as FlashInfer). Other arguments, the
    output's dtype, devices and errors as ``sampling_from_probs``; rows must be distributions (as
    ``top_k_renorm_probs``).
    ``deterministic``, ``generator``, ``check_nan``, ``seed``, ``offset``, ``return_valid`` and ``uniforms``:
    as ``sampling_from_probs``.
    """
    del deterministic, check_nan
    return _sample("probs", probs, indices, _top_k, (("top_k", top_k, "int64"),), generator, seed, offset, uniforms,
                   return_valid)


def top_p_sampling_from_probs(probs, top_p, indices=None, deterministic=True, generator=None, check_nan=False, seed=None,
                              offset=None, return_valid=False, *, uniforms=None):
    """FlashInfer's ``top_p_sampling_from_probs``: one token per output row from the row restricted to the
    tokens whose strictly larger probabilities weigh less than ``top_p`` (ties kept), renormalised:
    ``top_p_renorm_probs`` then the draw of ``sampling_from_probs``. top_p: a float in (0, 1], or one per
    row of ``probs`` (read at ``indices[i]``). Otherwise as ``top_k_sampling_from_probs``.
    ``deterministic``, ``generator``, ``check_nan``, ``seed``, ``offset``, ``return_valid`` and ``uniforms``:
    as ``sampling_from_probs``.
    """
    del deterministic, check_nan
    return _sample("probs", probs, indices, _top_p, (("top_p", top_p, "float32"),), generator, seed, offset, uniforms,
                   return_valid)


def min_p_sampling_from_probs(probs, min_p, indices=None, deterministic=True, generator=None, check_nan=False, seed=None,
                              offset=None, return_valid=False, *, uniforms=None):
    """FlashInfer's ``min_p_sampling_from_probs``: one token per output row from the row restricted to the
    tokens with ``p >= min_p * max(p)`` (ties kept), renormalised (the draw is over the kept mass).
    min_p: a float in [0, 1], or one per row of ``probs`` (read at ``indices[i]``). probs: float32, or on
    the host float16 / bfloat16: the filter and the draw are the float32 rows' of the same values (the
    kept rows are renormalised in float32, as FlashInfer's kernel samples its input without rounding it
    again). Otherwise as ``sampling_from_probs``.
    ``deterministic``, ``generator``, ``check_nan``, ``seed``, ``offset``, ``return_valid`` and ``uniforms``:
    as ``sampling_from_probs``.
    """
    del deterministic, check_nan
    return _sample("probs", probs, indices, _min_p, (("min_p", min_p, "float32"),), generator, seed, offset, uniforms,
                   return_valid)


def top_k_top_p_sampling_from_probs(probs, top_k, top_p, indices=None, filter_apply_order="top_k_first", deterministic=True,
                                    generator=None, check_nan=False, seed=None, offset=None, return_valid=False, *,
                                    uniforms=None):
    """FlashInfer's ``top_k_top_p_sampling_from_probs``: the top-k and top-p filters, then one draw.
    ``filter_apply_order="top_k_first"``: ``top_k_renorm_probs``, then the top-p set of its result;
    ``"joint"``: a token kept iff fewer than k probabilities are strictly larger and their mass is below
    top_p, both on the row as given (never fewer tokens than top-k first). top_k / top_p: a number, or one
    per row of ``probs`` (read at ``indices[i]``). Otherwise as ``sampling_from_probs``. (FlashInfer's
    own fast path for an int top_k <= 256 at V >= 65536 keeps exactly k tokens at a tie: specdec keeps
    the ties, as FlashInfer's general path.)
    ``deterministic``, ``generator``, ``check_nan``, ``seed``, ``offset``, ``return_valid`` and ``uniforms``:
    as ``sampling_from_probs``.
    """
    del deterministic, check_nan
    joint = _args.choice("filter_apply_order", filter_apply_order, ("top_k_first", "joint")) == "joint"
    return _sample("probs", probs, indices, _top_k_top_p_joint if joint else _top_k_then_top_p,
                   (("top_k", top_k, "int64"), ("top_p", top_p, "float32")), generator, seed, offset, uniforms, return_valid)


def top_k_top_p_sampling_from_logits(logits, top_k, top_p, indices=None, filter_apply_order="top_k_first",
                                     deterministic=True, generator=None, check_nan=False, seed=None, offset=None, *,
                                     uniforms=None):
    """FlashInfer's ``top_k_top_p_sampling_from_logits``: per row ``softmax(logits)``, the filters of
    ``top_k_top_p_sampling_from_probs`` (either ``filter_apply_order``), one draw. logits: float32
    ``[batch, V]`` (-inf masks a token), or on the host float16 / bfloat16 (softened to float32 rows, as
    ``softmax``); top_k / top_p a number or one per row of ``logits`` (read at ``indices[i]``); the
    other arguments, the output's dtype and the errors as ``sampling_from_probs`` (and ``softmax``'s for
    a row holding NaN or +inf, or all -inf). On the host each row's softmax is made in cache and sampled
    there (the tokens of ``softmax`` followed by ``top_k_top_p_sampling_from_probs``).
    ``deterministic``, ``generator``, ``check_nan``, ``seed``, ``offset`` and ``uniforms``: as
    ``sampling_from_probs``.
    """
    del deterministic, check_nan
    joint = _args.choice("filter_apply_order", filter_apply_order, ("top_k_first", "joint")) == "joint"
    return _sample("logits", logits, indices, _top_k_top_p_joint if joint else _top_k_then_top_p,
                   (("top_k", top_k, "int64"), ("top_p", top_p, "float32")), generator, seed, offset, uniforms, False,
                   from_logits=True)


def packbits(x, bitorder="big"):
    """FlashInfer's ``packbits``: the entries of 1-D ``x`` (any dtype: nonzero is 1) packed 8 to a byte,
    zero-padded: uint8 ``[(n + 7) // 8]``, as ``numpy.packbits``; ``bitorder`` "big" or "little". Host
    arrays or a CUDA tensor (``segment_packbits`` with one segment)."""
    order = _args.choice("bitorder", bitorder, ("big", "little"))
    (n,) = _args.shape("x", x, 1)
    if _is_torch(x):
        torch = sys.modules["torch"]
        bits = x if x.dtype == torch.bool else x != 0
        indptr = torch.tensor([0, n], dtype=torch.int32, device=x.device) if x.is_cuda else np.array([0, n], np.int32)
    else:
        bits = x if isinstance(x, np.ndarray) and x.dtype == np.bool_ else np.asarray(x) != 0
        indptr = np.array([0, n], np.int32)
    return segment_packbits(bits, indptr, order)[0]


# FlashInfer's singular names (flashinfer.sampling exports both).
top_k_renorm_prob = top_k_renorm_probs
top_p_renorm_prob = top_p_renorm_probs


# ---- the samplers' shared path -----------------------------------------------------------------------


def _host_top_k_top_p(rows, top_k, top_p, seed, offset, return_valid, joint, from_logits):
    """The common host call (a numpy matrix, one int k, one float p, an int seed or none, no valid flags)
    straight to the fused sampler: the general path's tokens without its conversions (~9 us of a one-row
    call). None: the general path decides."""
    if (return_valid is not False or type(rows) is not np.ndarray or rows.ndim != 2 or type(top_k) is not int
            or type(top_p) is not float or not (seed is None or type(seed) is int) or not (offset is None or type(offset) is int)
            or not 0 < top_k < 2**63):
        return None
    s, o = _args.seed_offset(seed, offset, None)
    tokens = np.empty(rows.shape[0], dtype=np.int32)
    _specdec.top_k_top_p_sample(rows, np.array((top_k,), dtype=np.int64), np.array((top_p,), dtype=np.float32), _NONE_F32,
                                tokens, s, o, joint, from_logits)
    return tokens


def _top_k(rows, k):
    return top_k_renorm_probs(rows, k)


def _top_p(rows, p):
    return top_p_renorm_probs(rows, p)


def _min_p(rows, p):
    """The rows with every entry below ``min_p * max`` zeroed, renormalised (the kept mass summed in
    float64)."""
    if _is_torch(rows):
        torch = sys.modules["torch"]
        rows = rows.float()  # a 16-bit row widened (exact): the float32 rows' filter and draw
        p = p if _is_torch(p) else torch.from_numpy(p).to(rows.device)
        kept = torch.where(rows >= rows.amax(dim=1, keepdim=True) * p.reshape(-1, 1), rows, 0)
        return kept / kept.sum(dim=1, keepdim=True, dtype=torch.float64).to(torch.float32)
    if p.size and (np.isnan(p).any() or p.min() < 0 or p.max() > 1):
        bad = p[np.isnan(p) | (p < 0) | (p > 1)][0]
        raise ValueError(f"min_p: expected values in [0, 1]; got {bad}")
    rows = rows if rows.dtype == np.float32 else _float32_rows(rows)
    kept = np.where(rows >= rows.max(axis=1, keepdims=True) * p.reshape(-1, 1), rows, np.float32(0))
    kept /= kept.sum(axis=1, keepdims=True, dtype=np.float64).astype(np.float32)
    return kept


def _float32_rows(rows):
    """16-bit host rows widened to float32 (exact; min-p's kept rows are a new array either way); any other
    dtype is a TypeError naming ``probs``, as the draw's."""
    if str(getattr(rows, "dtype", None)) not in ("float16", "bfloat16"):
        raise TypeError(f"probs: expected dtype float32 or float16 or bfloat16; got {rows.dtype}")
    return rows.astype(np.float32)


def _top_k_then_top_p(rows, k, p):
    kept = top_k_renorm_probs(rows, k)
    return top_p_renorm_probs(kept, p, out=kept)


def _top_k_top_p_joint(rows, k, p):
    out = _empty_rows_like(rows, "probs")
    _specdec.filter_rows(rows, out, k, p, True, _stream(rows))
    return out


def _sample(name, rows, indices, prepare, params, generator, seed, offset, uniforms, return_valid, from_logits=False):
    """FlashInfer's sampling functions: output row i samples row ``indices[i]`` of ``rows`` (argument
    `name`), after ``prepare(rows, *per-row params)`` (the filters; their per-row values read at
    ``indices[i]``), by one uniform per output row. Returns int32 (or ``indices``' int64) ``[batch']``, and
    the valid flags with ``return_valid``."""
    if prepare in (_top_k_then_top_p, _top_k_top_p_joint) and indices is None and uniforms is None and generator is None:
        tokens = _host_top_k_top_p(rows, params[0][1], params[1][1], seed, offset, return_valid, prepare is _top_k_top_p_joint,
                                   from_logits)
        if tokens is not None:
            return tokens
    batch = _args.shape(name, rows, 2)[0]
    values = []
    for pname, value, dtype in params:
        v = _per_row(pname, value, dtype, rows)
        if v.shape[0] not in (1, batch):
            raise ValueError(f"{pname}: expected one value, or one per row of {name} ({batch}); got {v.shape[0]}")
        values.append(v)
    out_dtype = "int32"
    if indices is not None:
        out_dtype = _index_dtype(indices)
        picked = _args.integers("indices", _host_index(indices), "int64", lo=0, hi=batch - 1, what="row indices",
                                why=f" (the rows of {name})")
        rows = _take(rows, picked)
        values = [v if v.shape[0] == 1 else _take(v, picked) for v in values]
    n = rows.shape[0]
    return_valid = _args.flag("return_valid", return_valid)
    u = _row_uniforms(n, rows, generator, seed, offset, uniforms)
    fused = prepare in (_top_k_then_top_p, _top_k_top_p_joint) and not (_is_torch(rows) and rows.is_cuda)
    if from_logits and not fused:
        rows = softmax(rows)
    valid = None
    if return_valid:
        valid = rows.amax(dim=1) > 0 if _is_torch(rows) else (rows.max(axis=1) > 0 if n else np.zeros(0, bool))
        if not bool(valid.all()):
            keep = valid
            if u is None:  # row i's own stream, before the rows are compacted
                s, o = _args.seed_offset(seed, offset, generator)
                u = philox_uniforms(s, o, n, 1, "float32").reshape(n)
                seed, offset = s, o
            rows = rows[keep]
            values = [v if v.shape[0] == 1 else _where(v, keep) for v in values]
            u = _where(u, keep)
    if fused:
        # The host's fused form: the token of the filters and the draw, from the top k alone (from
        # logits: each row's softmax made in cache first, the bits of softmax()).
        tokens = _empty(rows, (rows.shape[0],), "int32")
        joint = prepare is _top_k_top_p_joint
        if u is None:
            s, o = _args.seed_offset(seed, offset, generator)
            _specdec.top_k_top_p_sample(rows, values[0], values[1], _NONE_F32, tokens, s, o, joint, from_logits)
        else:
            _specdec.top_k_top_p_sample(rows, values[0], values[1], u if not _is_torch(u) else u.contiguous(), tokens, 0, 0, joint,
                                        from_logits)
    elif prepare is not None:
        rows = prepare(rows, *values)
    if fused:
        pass
    elif u is None:  # the host draws row i's uniform itself: Philox stream (seed, i) at offset
        s, o = _args.seed_offset(seed, offset, generator)
        tokens = _empty(rows, (rows.shape[0],), "int32")
        _specdec.sample_rows(rows, _NONE_F32, tokens, 0, s, o)
    else:
        tokens = _empty(rows, (rows.shape[0],), "int32")
        _specdec.sample_rows(rows, u if not _is_torch(u) else u.contiguous(), tokens, _stream(rows))
    if valid is not None and tokens.shape[0] != n:
        full = _empty(tokens, (n,), "int32")
        full[...] = 0
        full[valid] = tokens
        tokens = full
    if out_dtype == "int64":
        tokens = tokens.to(sys.modules["torch"].int64) if _is_torch(tokens) else tokens.astype(np.int64)
    return (tokens, valid) if return_valid else tokens


def _where(x, keep):
    """The entries of `x` (numpy or torch) where `keep` (bools, numpy or torch) holds."""
    if _is_torch(keep) and not _is_torch(x):
        keep = keep.cpu().numpy()
    elif _is_torch(x) and not _is_torch(keep):
        keep = sys.modules["torch"].from_numpy(keep).to(x.device)
    return x[keep]


def _index_dtype(indices) -> str:
    """The output dtype FlashInfer's samplers give with ``indices``: theirs when int64, else int32."""
    dtype = getattr(indices, "dtype", None)
    return "int64" if dtype is not None and str(dtype).replace("torch.", "") == "int64" else "int32"


def _host_index(indices):
    return indices.cpu() if _is_torch(indices) and indices.device.type != "cpu" else indices


def _take(x, picked):
    """Rows ``picked`` (int64 numpy) of ``x`` (numpy or torch, on its device)."""
    if _is_torch(x):
        return x[sys.modules["torch"].from_numpy(picked).to(x.device)]
    return x[picked]


def _row_uniforms(n: int, like, generator, seed, offset, uniforms):
    """Output row i's uniform: ``uniforms`` as given; per-row seed / offset arrays (FlashInfer's tensors,
    length 1 or n) drawn here (Philox stream (seed[i], i) at offset[i]); else None, the host drawing from
    (seed, i) at offset itself (a CUDA tensor: drawn here and uploaded)."""
    if uniforms is not None:
        return uniforms
    arrays = [_is_torch(x) or isinstance(x, (np.ndarray, list, tuple)) for x in (seed, offset)]
    if arrays[0] != arrays[1] and seed is not None and offset is not None:
        raise ValueError(f"seed and offset: expected both integers or both arrays of one per row (FlashInfer's rule); got "
                         f"{_args._kind(seed)} and {_args._kind(offset)}")
    if arrays[0] or arrays[1]:
        per_row = []
        for name, value in (("seed", seed), ("offset", offset)):
            v = _host_index(value)
            v = v.numpy() if _is_torch(v) else np.asarray(v)
            if v.dtype.kind == "u" and v.dtype.itemsize == 8:
                v = v.view(np.int64)
            elif not (v.dtype == np.int64 or (v.dtype.kind in "iu" and not isinstance(value, np.ndarray) and not _is_torch(value))):
                raise TypeError(f"{name}: expected an integer, or int64 / uint64 values of one per row; got {_args._kind(value)}")
            v = v.astype(np.int64)
            if v.ndim != 1 or v.shape[0] not in (1, n):
                raise ValueError(f"{name}: expected 1 or {n} values (one per output row); got shape {tuple(v.shape)}")
            per_row.append(np.ascontiguousarray(np.broadcast_to(v, (n,))))
        u = np.empty(n, dtype=np.float32)
        _specdec.row_uniforms(per_row[0], per_row[1], u)
        if _is_torch(like) and like.is_cuda:
            return sys.modules["torch"].from_numpy(u).to(like.device)
        return u
    if _is_torch(like) and like.is_cuda:
        s, o = _seed_offset(seed, offset, generator)
        return sys.modules["torch"].from_numpy(philox_uniforms(s, o, n, 1, "float32").reshape(n)).to(like.device)
    return None


def chain_speculative_sampling(draft_probs, draft_token_ids, target_probs, maybe_output_accepted_token_num=None,
                               maybe_output_emitted_draft_token_num=None, deterministic=True, generator=None,
                               seed=None, offset=None, uniforms=None):
    """FlashInfer's ``chain_speculative_sampling``: verifies a batch of draft chains.

    draft_probs: float32 ``[batch, k, V]``; draft_token_ids: int32 ``[batch, k]``; target_probs: float32
    ``[batch, k + 1, V]``; on the host both may instead be float16 or bfloat16 (both of one dtype: another
    is a TypeError naming ``draft_probs``), read as they are, with the float32 rows' results bit for bit (a
    row read whole may sum to 1 within 1e-4 plus its type's rounding). Returns ``(output_token_ids, accepted_token_num, emitted_draft_token_num)``:
    int32 ``[batch, k + 1]`` (the accepted drafts, then the final token, -1 padded), and int32 ``[batch]``
    counters which, when given as ``maybe_output_*``, are added to (FlashInfer's ``+=``) and returned.

    FlashInfer's conventions: accept draft x iff ``u * p_draft(x) < p_target(x)``, uniforms in (0, 1];
    after a rejection at position i, positions i..k-1 are re-tested with fresh uniforms and the passes
    counted in ``accepted_token_num``; the final token is drawn from ``relu(target - draft)`` (or the
    bonus row) by inverse CDF. ``uniforms`` (float64 ``[batch, >= 2k + 1]``, in (0, 1], consumption
    order) replaces the random draw; otherwise row r reads Philox stream ``(seed, r)`` at ``offset``.
    
    ``maybe_output_accepted_token_num`` / ``maybe_output_emitted_draft_token_num``: optional int32 or int64
    ``[batch]`` counters (writable), added to in place. ``generator``: a torch.Generator the seed is drawn
    from when ``seed`` is None. ``deterministic`` is accepted for FlashInfer's signature (always
    deterministic). Host arrays or CUDA tensors (one kernel on the current stream).
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
