# SPDX-License-Identifier: Apache-2.0
"""specdec from Python: speculative-decoding primitives over specdec's C++ headers.

Functions take numpy arrays or torch tensors without copying them (DLPack / the buffer protocol; in a
CUDA build, see ``cuda``, the engine-facing kernels also take CUDA tensors and run on their device) and
return arrays of the same kind. specdec's row primitives (``argmax``, ``topk``, ``softmax``,
``log_softmax``, ``logsumexp``) come with it. Where a peer's function of the same name exists, the name, the
argument order and the outputs are the peer's, so an engine swaps specdec in without reshaping:

- FlashInfer (``flashinfer.sampling``, ``flashinfer.quantization``): ``top_k_renorm_probs``,
  ``top_p_renorm_probs``, ``top_k_mask_logits``, ``sampling_from_probs``,
  ``top_k_top_p_sampling_from_logits``, ``chain_speculative_sampling``,
  ``segment_packbits``;
- vLLM v1: ``rejection_sample`` (its rejection sampler's layout), ``apply_sampling_constraints``,
  ``apply_top_k_top_p``;
- SGLang (``sgl_kernel``): ``verify_tree_greedy``, ``tree_speculative_sampling_target_only``,
  ``build_tree_kernel_efficient``;
- Arctic Inference (vLLM's ``suffix`` method): ``SuffixDecodingCache``, ``SuffixTree``.

specdec's own drafting side (``specdec/drafting.py``): ``DraftTree`` and its masks in every layout,
``batch_tree_mask`` / ``batch_tree_mask_flashinfer`` for padded batches, ``propose_ngram``,
``Eagle2TreeBuilder`` and its device-resident form ``Eagle2BatchBuilder``, ``DraftLengthPolicy``,
``verify_greedy`` / ``verify_speculative`` on specdec's trees, and the drafter blocks (``DecoderLayer``, ``eagle_fuse``,
``Eagle3Block``, ``MtpModule``, ``JakiroLayer``, ``AmphistaHeads``, ``MoaDrafter``).

Randomness: functions that sample take ``seed`` and ``offset`` (one Philox-4x32-10 stream per row,
``(seed, row)``, read from ``offset``), a ``torch.Generator`` (one integer drawn from it seeds the call),
or explicit ``uniforms``; with none of them a seed is drawn from numpy's global generator. Bad input
raises ``TypeError`` (a dtype, or a value of the wrong kind: a float where an integer is expected) or
``ValueError`` (a shape, stride, device, writability or value), naming the argument, before anything is
allocated; errors from the C++ side carry its message. Integers are range-checked, never wrapped, and
indices are never negative (docs/python.md, "Errors").
"""

from __future__ import annotations

import re
import sys

import numpy as np

from . import _args, _specdec
from ._args import is_torch as _is_torch
from ._args import seed_offset as _seed_offset

__version__ = _specdec.__version__
#: Whether this build has the CUDA side (built where nvcc was found): the row primitives (``argmax``,
#: ``topk``, ``softmax``, ``log_softmax``, ``logsumexp``) and ``sampling_from_probs`` then take torch
#: tensors in CUDA memory and run on their device, on the current stream.
cuda = bool(_specdec.cuda)

__all__ = [
    "argmax",
    "topk",
    "softmax",
    "log_softmax",
    "logsumexp",
    "top_k_renorm_probs",
    "top_p_renorm_probs",
    "sampling_from_probs",
    "top_k_top_p_sampling_from_logits",
    "top_k_mask_logits",
    "segment_packbits",
    "chain_speculative_sampling",
    "rejection_sample",
    "apply_sampling_constraints",
    "apply_top_k_top_p",
    "verify_tree_greedy",
    "tree_speculative_sampling_target_only",
    "build_tree_kernel_efficient",
    "philox_uniforms",
]


# The one-row call's fixed cost is mostly the output's allocation: torch.empty with the sizes as
# separate integers and a cached dtype measured ~1.0 us where a shape tuple, a dtype looked up by name and
# device= cost ~2.6 us (a CPU tensor's device is the default).
_torch_dtypes: dict = {}


def _empty(like, shape, dtype: str):
    """A new array of `dtype` ("float32", "int32", ...) and `shape`, of the same kind as `like`."""
    if _is_torch(like):
        torch = sys.modules["torch"]
        torch_dtype = _torch_dtypes.get(dtype)
        if torch_dtype is None:
            torch_dtype = _torch_dtypes.setdefault(dtype, getattr(torch, dtype))
        if like.is_cuda:
            return torch.empty(shape, dtype=torch_dtype, device=like.device)
        return torch.empty(*shape, dtype=torch_dtype) if shape else torch.empty((), dtype=torch_dtype)
    return np.empty(shape, dtype=dtype)


def _empty_f32_like(like, name: str):
    """A new float32 array of `like`'s shape (and device), of the same kind: `like` is float32 where it is
    used (the call checks it), and torch.empty_like is the cheapest torch allocation (~0.8 us). `like` is
    argument `name`: not an array is a TypeError naming it (its size bounds the allocation)."""
    if _is_torch(like):
        # torch's default preserve_format: a dense row-major input gives a row-major output, a padded
        # one a contiguous output; any other layout of `like` is refused by the call before `out` is read.
        return sys.modules["torch"].empty_like(like)
    shape = getattr(like, "shape", None)
    if shape is None:
        _args.shape(name, like)
    return np.empty(shape, dtype=np.float32)


#: The zero-length array a C++ function reads as "no such output" (never written: it has no entries).
_NONE_F32 = np.empty(0, dtype=np.float32)


def _stream(x) -> int:
    """The current CUDA stream of a torch tensor in CUDA memory (the call is enqueued on it), else 0."""
    if _is_torch(x) and x.is_cuda:
        import torch

        return int(torch.cuda.current_stream(x.device).cuda_stream)
    return 0


def _full(like, shape, dtype: str, value):
    out = _empty(like, shape, dtype)
    out[...] = value
    return out


def philox_uniforms(seed: int, offset: int, rows: int, count: int, dtype: str = "float64") -> np.ndarray:
    """``[rows x count]`` uniforms in [0, 1): row r is Philox-4x32-10 stream ``(seed, r)`` from position
    ``offset`` (specdec's ``philox_stream``: ``uniform_double`` for float64, ``uniform`` for float32), the
    streams the sampling functions read when given a seed."""
    seed = _args.integer("seed", seed, 0, _args.UINT64_END - 1)
    offset = _args.integer("offset", offset, 0, _args.UINT64_END - 1)
    shape = _args.elements("count", (_args.size("rows", rows), _args.size("count", count)))
    if isinstance(dtype, (type, np.dtype)):  # np.float32, np.dtype("float64")
        dtype = np.dtype(dtype).name
    out = np.empty(shape, dtype=_args.choice("dtype", dtype, ("float64", "float32")))
    _specdec.philox_uniforms(seed, offset, out)
    return out


# ---- specdec's row primitives ------------------------------------------------------------------------


def argmax(logits, out=None, values=None):
    """Row argmax of float32 ``[rows, V]``: int32 ``[rows]``, the lowest index of each row's maximum (an
    all -inf row gives 0). ``values`` (float32 ``[rows]``, optional) receives the maxima. NaN or +inf
    is a ValueError."""
    if out is None:
        out = _empty(logits, (_args.shape("logits", logits, 2)[0],), "int32")
    _specdec.row_argmax(logits, out, values if values is not None else _NONE_F32, _stream(logits))
    return out


def topk(logits, k, values=None, indices=None):
    """The k largest entries of each row of float32 ``[rows, V]``, descending, ties to the lower index:
    ``(values float32 [rows, k], indices int32 [rows, k])``, as ``torch.topk(logits, k)`` (which breaks
    ties differently and returns int64)."""
    rows, v = _args.shape("logits", logits, 2)
    k = _args.integer("k", k, 0, v, " (the row length)")
    if values is None:
        values = _empty(logits, (rows, k), "float32")
    if indices is None:
        indices = _empty(logits, (rows, k), "int32")
    _specdec.row_topk(logits, k, values, indices, _stream(logits))
    return values, indices


def softmax(logits, temperature=1.0, out=None):
    """``softmax(logits / temperature)`` per row of float32 ``[rows, V]`` (temperature 0: one-hot at the
    argmax); ``out`` may be ``logits`` itself."""
    if out is None:
        out = _empty_f32_like(logits, "logits")
    _specdec.row_softmax(logits, _args.real("temperature", temperature), out, False, _stream(logits))
    return out


def log_softmax(logits, temperature=1.0, out=None):
    """``log_softmax(logits / temperature)`` per row (temperature 0: 0 at the argmax, -inf elsewhere)."""
    if out is None:
        out = _empty_f32_like(logits, "logits")
    _specdec.row_softmax(logits, _args.real("temperature", temperature), out, True, _stream(logits))
    return out


def logsumexp(logits, temperature=1.0, out=None):
    """``log sum exp(logits / temperature)`` per row: float32 ``[rows]``."""
    if out is None:
        out = _empty(logits, (_args.shape("logits", logits, 2)[0],), "float32")
    _specdec.row_logsumexp(logits, _args.real("temperature", temperature), out, _stream(logits))
    return out


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


# ---- SGLang ------------------------------------------------------------------------------------------


def verify_tree_greedy(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
                       retrive_next_sibling, target_predict, cuda_stream=0):
    """SGLang's ``sgl_kernel.verify_tree_greedy``, writing its three outputs in place.

    predicts: int32 ``[batch * N]`` (the accepted token at each accepted node, the bonus at the last,
    -1 elsewhere); accept_index: int32 ``[batch, num_spec_step]`` (retrive_index of accepted nodes, root
    first, -1 padded); accept_token_num: int32 ``[batch]``. candidates, retrive_index,
    retrive_next_token, retrive_next_sibling: int64 ``[batch, N]`` (``build_tree_kernel_efficient``'s);
    target_predict: int64 ``[batch, N]`` (or ``[batch * N]``), the target's argmax per node.
    Host arrays, or (a CUDA build) CUDA tensors, all on one device: then one kernel, one block per
    request, on ``cuda_stream`` (0: the current stream of ``candidates``).
    """
    stream = _args.integer("cuda_stream", cuda_stream, 0, _args.UINT64_END - 1) or _stream(candidates)
    _specdec.verify_tree_greedy(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                retrive_next_token, retrive_next_sibling, target_predict, stream)


def tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                          retrive_next_token, retrive_next_sibling, uniform_samples,
                                          uniform_samples_for_final_sampling, target_probs, draft_probs=None,
                                          threshold_single=1.0, threshold_acc=1.0, deterministic=True, cuda_stream=0):
    """SGLang's ``sgl_kernel.tree_speculative_sampling_target_only``: sampled verification of link-encoded
    trees against the target alone (SGLang's coin rule; ``threshold_single = threshold_acc = 1`` is
    lossless sampling), outputs written in place as ``verify_tree_greedy``'s.

    uniform_samples: float32 ``[batch, N]`` (the coin at node i is entry i);
    uniform_samples_for_final_sampling: float32 ``[batch]``; target_probs: float32 ``[batch, N, V]``.
    ``draft_probs`` is not read (target-only, as SGLang's kernel); ``threshold_acc`` is clamped to >= 1e-9
    as SGLang's launcher does. Parents must precede their children in node order (build_tree's order).
    Host arrays, or (a CUDA build) CUDA tensors, all on one device: then one kernel, one block per
    request, on ``cuda_stream`` (0: the current stream of ``candidates``).
    """
    del draft_probs, deterministic
    stream = _args.integer("cuda_stream", cuda_stream, 0, _args.UINT64_END - 1) or _stream(candidates)
    _specdec.tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                                   retrive_next_token, retrive_next_sibling, uniform_samples,
                                                   uniform_samples_for_final_sampling, target_probs,
                                                   _args.real("threshold_single", threshold_single),
                                                   _args.real("threshold_acc", threshold_acc), stream)


def build_tree_kernel_efficient(parent_list, selected_index, verified_seq_len, tree_mask, positions, retrive_index,
                                retrive_next_token, retrive_next_sibling, topk, depth, draft_token_num, tree_mask_mode):
    """SGLang's ``sgl_kernel.build_tree_kernel_efficient``: the tree buffers of a batch of EAGLE trees,
    written in place.

    parent_list: int64 ``[batch, 1 + topk * (depth - 1)]``; selected_index: int64 ``[batch, N - 1]``
    (``organize_draft_results``'s); verified_seq_len: int64 ``[batch]``; positions: int64 ``[batch * N]``;
    retrive_index / retrive_next_token / retrive_next_sibling: int64 ``[batch, N]``; tree_mask: for mode 0
    (FULL_MASK) bools of ``sum_b N (seq_len_b + N)``, mode 1 (QLEN_ONLY) ``batch * N * N`` bools, mode 2
    (QLEN_ONLY_BITPACKING) ``batch * N`` items of 1, 2 or 4 bytes (N <= 8, 16, 32). ``depth`` is SGLang's
    ``spec_steps``. Every entry of the outputs is written, the whole mask included (SGLang's kernel
    relies on its caller filling the mask with True first; the result is the same). Host arrays, or CUDA
    tensors (one kernel on the current stream, one block per request).
    """
    _specdec.build_tree_kernel_efficient(parent_list, selected_index, verified_seq_len, tree_mask, positions, retrive_index,
                                         retrive_next_token, retrive_next_sibling, _args.integer("topk", topk),
                                         _args.integer("depth", depth), _args.integer("draft_token_num", draft_token_num),
                                         _args.integer("tree_mask_mode", tree_mask_mode, 0, 2), _stream(verified_seq_len))


# specdec's own drafting side (trees, masks, n-gram and suffix drafts, EAGLE-2, the draft-length policy,
# verification of specdec's trees): specdec/drafting.py.
from .drafting import *  # noqa: E402,F401,F403
from .drafting import __all__ as _drafting_all  # noqa: E402

__all__ += _drafting_all
