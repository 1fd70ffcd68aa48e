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
raises ``TypeError`` (a dtype) or ``ValueError`` (a shape, stride, device or value), naming the
argument; errors from the C++ side carry its message.
"""

from __future__ import annotations

import sys

import numpy as np

from . import _specdec

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


def _is_torch(x) -> bool:
    # A torch tensor can only exist once torch is imported: no import here (specdec never needs torch).
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


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


def _empty_f32_like(like):
    """A new float32 array of `like`'s shape (and device), of the same kind: `like` is float32 where it is
    used (the call checks it), and torch.empty_like is the cheapest torch allocation (~0.8 us)."""
    if _is_torch(like):
        # torch's default preserve_format: a dense row-major input gives a row-major output, a padded
        # one a contiguous output; any other layout of `like` is refused by the call before `out` is read.
        return sys.modules["torch"].empty_like(like)
    return np.empty(like.shape, dtype=np.float32)


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


def _small(x, dtype: str) -> np.ndarray:
    """A scalar or a short per-row parameter as a contiguous numpy array (copied: a few numbers)."""
    if _is_torch(x):
        x = x.detach().cpu().numpy()
    return np.ascontiguousarray(np.atleast_1d(np.asarray(x)), dtype=dtype)


def _seed_offset(seed, offset, generator) -> tuple[int, int]:
    if seed is not None:
        return int(seed), int(offset or 0)
    if generator is not None:
        import torch

        return int(torch.randint(0, 2**62, (1,), generator=generator).item()), int(offset or 0)
    return int(np.random.randint(0, 2**62, dtype=np.int64)), int(offset or 0)


def philox_uniforms(seed: int, offset: int, rows: int, count: int, dtype: str = "float64") -> np.ndarray:
    """``[rows x count]`` uniforms in [0, 1): row r is Philox-4x32-10 stream ``(seed, r)`` from position
    ``offset`` (specdec's ``philox_stream``: ``uniform_double`` for float64, ``uniform`` for float32), the
    streams the sampling functions read when given a seed."""
    out = np.empty((rows, count), dtype=dtype)
    _specdec.philox_uniforms(int(seed), int(offset), out)
    return out


# ---- specdec's row primitives ------------------------------------------------------------------------


def argmax(logits, out=None, values=None):
    """Row argmax of float32 ``[rows, V]``: int32 ``[rows]``, the lowest index of each row's maximum (an
    all -inf row gives 0). ``values`` (float32 ``[rows]``, optional) receives the maxima. NaN or +inf
    is a ValueError."""
    rows = int(logits.shape[0])
    if out is None:
        out = _empty(logits, (rows,), "int32")
    _specdec.row_argmax(logits, out, values if values is not None else _NONE_F32, _stream(logits))
    return out


def topk(logits, k, values=None, indices=None):
    """The k largest entries of each row of float32 ``[rows, V]``, descending, ties to the lower index:
    ``(values float32 [rows, k], indices int32 [rows, k])``, as ``torch.topk(logits, k)`` (which breaks
    ties differently and returns int64)."""
    rows = int(logits.shape[0])
    if values is None:
        values = _empty(logits, (rows, int(k)), "float32")
    if indices is None:
        indices = _empty(logits, (rows, int(k)), "int32")
    _specdec.row_topk(logits, int(k), values, indices, _stream(logits))
    return values, indices


def softmax(logits, temperature=1.0, out=None):
    """``softmax(logits / temperature)`` per row of float32 ``[rows, V]`` (temperature 0: one-hot at the
    argmax); ``out`` may be ``logits`` itself."""
    if out is None:
        out = _empty_f32_like(logits)
    _specdec.row_softmax(logits, float(temperature), out, False, _stream(logits))
    return out


def log_softmax(logits, temperature=1.0, out=None):
    """``log_softmax(logits / temperature)`` per row (temperature 0: 0 at the argmax, -inf elsewhere)."""
    if out is None:
        out = _empty_f32_like(logits)
    _specdec.row_softmax(logits, float(temperature), out, True, _stream(logits))
    return out


def logsumexp(logits, temperature=1.0, out=None):
    """``log sum exp(logits / temperature)`` per row: float32 ``[rows]``."""
    if out is None:
        out = _empty(logits, (int(logits.shape[0]),), "float32")
    _specdec.row_logsumexp(logits, float(temperature), out, _stream(logits))
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
        out = _empty_f32_like(probs)
    _specdec.filter_rows(probs, out, _per_row(top_k, "int64", probs), _NO_P, True, _stream(probs))
    return out


def _per_row(value, dtype: str, rows):
    """top_k / top_p (a number or one per row) as ``dtype`` where ``rows`` lives: on a CUDA tensor's
    device, else numpy."""
    if _is_torch(rows) and rows.is_cuda:
        import torch

        v = value.reshape(-1) if _is_torch(value) else torch.from_numpy(_small(value, dtype))
        return v.to(device=rows.device, dtype=getattr(torch, dtype)).contiguous()
    return _small(value, dtype)


_NO_K = np.empty(0, dtype=np.int64)  # a filter that is off (an empty array, wherever the rows are)
_NO_P = np.empty(0, dtype=np.float32)


def top_p_renorm_probs(probs, top_p, out=None):
    """FlashInfer's ``top_p_renorm_probs``: keep a token iff the mass of the strictly larger
    probabilities is below ``top_p`` (the smallest set of largest tokens reaching it, ties kept), zero the
    rest, renormalise. top_p: a float in (0, 1], or one per row. Shapes and devices as
    ``top_k_renorm_probs``; the masses above each token are double sums in specdec's canonical order."""
    if out is None:
        out = _empty_f32_like(probs)
    _specdec.filter_rows(probs, out, _NO_K, _per_row(top_p, "float32", probs), True, _stream(probs))
    return out


def top_k_mask_logits(logits, top_k, out=None):
    """FlashInfer's ``top_k_mask_logits``: in each row of float32 ``[batch, V]``, every logit below the
    row's ``top_k``-th largest becomes -inf (ties with the k-th kept); top_k an int or one per row.
    ``out`` may be ``logits`` itself; returned. Host arrays or CUDA tensors, as ``top_k_renorm_probs``."""
    if out is None:
        out = _empty_f32_like(logits)
    _specdec.filter_rows(logits, out, _per_row(top_k, "int64", logits), _NO_P, False, _stream(logits))
    return out


def segment_packbits(x, indptr, bitorder="big"):
    """FlashInfer's ``segment_packbits``: each segment ``x[indptr[i]:indptr[i + 1]]`` of a bool (or uint8)
    array packed into its own bytes, zero-padded. Returns ``(y uint8, new_indptr int32)``, ``new_indptr``
    the byte offsets of the segments in ``y``. ``bitorder`` "big" (numpy.packbits' default) or "little"
    (SGLang's masks). Host arrays, or a CUDA tensor ``x`` (``indptr`` moved to its device as int32): two
    kernels on the current stream, each checked as every device call is (one synchronisation), with the
    output's size read back between them (FlashInfer's wrapper reads it too); ``y`` and ``new_indptr`` on
    ``x``'s device."""
    if bitorder not in ("big", "little"):
        raise ValueError(f"bitorder: expected 'big' or 'little'; got {bitorder!r}")
    little = bitorder == "little"
    if _is_torch(x) and x.is_cuda:
        import torch

        ip = torch.as_tensor(indptr, device=x.device).to(torch.int32).contiguous()
        new_indptr = torch.empty_like(ip)
        stream = _stream(x)
        _specdec.segment_packbits_offsets(ip, new_indptr, stream)
        y = torch.empty(int(new_indptr[-1].item()), dtype=torch.uint8, device=x.device)
        _specdec.segment_packbits(x.contiguous(), ip, new_indptr, little, y, stream)
        return y, new_indptr
    ip = _small(indptr, "int32")
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
        rows = _small(indices, "int64")
        probs = probs[rows] if not _is_torch(probs) else probs[_as_torch_index(rows, probs)]
    n = int(probs.shape[0])
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
    if filter_apply_order not in ("top_k_first", "joint"):
        raise ValueError(f"filter_apply_order: expected 'top_k_first' or 'joint'; got {filter_apply_order!r}")
    if indices is not None:
        rows = _small(indices, "int64")
        logits = logits[rows] if not _is_torch(logits) else logits[_as_torch_index(rows, logits)]
    probs = softmax(logits)
    if filter_apply_order == "joint":
        _specdec.filter_rows(probs, probs, _per_row(top_k, "int64", probs), _per_row(top_p, "float32", probs), True,
                             _stream(probs))
    else:
        top_k_renorm_probs(probs, top_k, out=probs)
        top_p_renorm_probs(probs, top_p, out=probs)
    return sampling_from_probs(probs, generator=generator, seed=seed, offset=offset, uniforms=uniforms)


def _as_torch_index(rows, like):
    import torch

    return torch.from_numpy(rows).to(like.device)


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
    batch, k = int(draft_token_ids.shape[0]), int(draft_token_ids.shape[1])
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


def _philox_streams(like, batch: int, seed: int, offset):
    """The padded-batch verifier's randomness: request r reads Philox stream (seed, r) from `offset` (an
    int, or already an int64 array of one offset per request). Returns (streams int64 [batch x 2], the
    uint64 pairs (seed, r) as int64; offsets int64 [batch]) of `like`'s kind and device."""
    pairs = np.zeros((batch, 2), dtype=np.uint64)
    pairs[:, 0] = np.uint64(seed % 2**64)
    pairs[:, 1] = np.arange(batch, dtype=np.uint64)
    streams = pairs.view(np.int64)
    if not np.isscalar(offset):
        offsets = offset
    else:
        offsets = np.full(batch, int(offset), dtype=np.int64)
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
    batch, k = int(draft_token_ids.shape[0]), int(draft_token_ids.shape[1])
    v = int(target_probs.shape[-1])
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
        tokens = np.concatenate([np.zeros((batch, 1), dtype=np.int32), np.asarray(draft_token_ids, dtype=np.int32)], axis=1)
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
    cu = cu_num_draft_tokens
    if not on_cuda or uniform_probs is None:
        cu = _small(cu_num_draft_tokens, "int64")
    batch = len(cu)
    v = int(target_probs.shape[1])
    if uniform_probs is None or exponentials is None:
        s, o = _seed_offset(seed, offset, generator)
        if uniform_probs is None:
            per_request = philox_uniforms(s, o, batch, max(int(max_spec_len), 1))
            starts = np.concatenate([[0], cu[:-1]]) if batch else cu
            uniform_probs = np.concatenate([per_request[r, :cu[r] - starts[r]] for r in range(batch)]) if batch else \
                np.empty(0)
        if exponentials is None:
            exponentials = (-np.log1p(-philox_uniforms(s + 1, o, batch, v))).astype(np.float32)
    out = _empty(target_probs, (batch, int(max_spec_len) + 1), "int32")
    if on_cuda:
        import torch

        def there(x, dtype):
            t = x if _is_torch(x) else torch.from_numpy(np.ascontiguousarray(np.atleast_1d(np.asarray(x)), dtype=dtype))
            return t.to(device=target_probs.device, dtype=getattr(torch, dtype)).contiguous()

        none_f32 = torch.empty((0, 0), dtype=torch.float32, device=target_probs.device)
        none_u8 = torch.empty(0, dtype=torch.uint8, device=target_probs.device)
        _specdec.rejection_sample(there(draft_token_ids, "int32").reshape(-1), there(cu, "int64").reshape(-1), int(max_spec_len),
                                  none_f32 if draft_probs is None else draft_probs, target_probs,
                                  there(bonus_token_ids, "int32").reshape(-1),
                                  none_u8 if is_greedy is None else there(is_greedy, "uint8").reshape(-1),
                                  there(uniform_probs, "float64").reshape(-1), there(exponentials, "float32"), out,
                                  int(cuda_stream) if cuda_stream else _stream(target_probs))
        return out
    bonus = _small(bonus_token_ids, "int32").reshape(-1)
    greedy = np.empty(0, dtype=np.uint8) if is_greedy is None else _small(is_greedy, "uint8")
    no_rows = np.empty((0, 0), dtype=np.float32)
    _specdec.rejection_sample(draft_token_ids, cu, int(max_spec_len), no_rows if draft_probs is None else draft_probs,
                              target_probs, bonus, greedy, np.ascontiguousarray(uniform_probs, dtype=np.float64)
                              if not _is_torch(uniform_probs) else uniform_probs.double().contiguous(),
                              exponentials, out)
    return out


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
    if all_greedy:
        return logits
    no_k, no_p = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
    _specdec.apply_sampling_constraints(logits, _small(cu_num_draft_tokens, "int64"), _small(temperature, "float32"),
                                        no_k if top_k is None else _small(top_k, "int64"),
                                        no_p if top_p is None else _small(top_p, "float32"))
    return logits


def apply_top_k_top_p(logits, k=None, p=None):
    """vLLM v1's ``apply_top_k_top_p`` (``vllm/v1/sample/ops/topk_topp_sampler.py``): every row of float32
    ``[rows, V]`` logits filtered in place by its ``k[row]`` and ``p[row]`` (None: off), as
    ``apply_sampling_constraints`` does at temperature 1. Returns ``logits``."""
    rows = int(logits.shape[0])
    return apply_sampling_constraints(logits, np.arange(1, rows + 1, dtype=np.int64), np.ones(rows, dtype=np.float32), k, p)


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
    stream = int(cuda_stream) if cuda_stream else _stream(candidates)
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
    stream = int(cuda_stream) if cuda_stream else _stream(candidates)
    _specdec.tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                                   retrive_next_token, retrive_next_sibling, uniform_samples,
                                                   uniform_samples_for_final_sampling, target_probs,
                                                   float(threshold_single), float(threshold_acc), stream)


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
                                         retrive_next_token, retrive_next_sibling, int(topk), int(depth),
                                         int(draft_token_num), int(tree_mask_mode), _stream(verified_seq_len))


# specdec's own drafting side (trees, masks, n-gram and suffix drafts, EAGLE-2, the draft-length policy,
# verification of specdec's trees): specdec/drafting.py.
from .drafting import *  # noqa: E402,F401,F403
from .drafting import __all__ as _drafting_all  # noqa: E402

__all__ += _drafting_all
