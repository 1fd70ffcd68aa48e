# SPDX-License-Identifier: Apache-2.0
"""vLLM v1's rejection sampler layout (C++: specdec/interop/vllm.hpp)."""

from __future__ import annotations

import re
import sys

import numpy as np

from . import _args, _specdec
from ._args import is_torch as _is_torch
from ._args import seed_offset as _seed_offset
from ._common import _empty, _stream, philox_exponentials, philox_uniforms

__all__ = ["rejection_sample", "apply_sampling_constraints", "apply_top_k_top_p", "GREEDY_TEMPERATURE", "MAX_SPEC_LEN"]


# ---- vLLM --------------------------------------------------------------------------------------------


#: vLLM's ``GREEDY_TEMPERATURE`` (``vllm/v1/sample/rejection_sampler.py``): a greedy request's temperature
#: in its ``SamplingMetadata``. Older vLLM used -1, which is still read as greedy.
GREEDY_TEMPERATURE = 0
#: vLLM's ``MAX_SPEC_LEN``: the most drafts per request its kernels take (specdec has no such limit).
MAX_SPEC_LEN = 128

_VLLM_EXTRAS = ("synthetic_mode", "synthetic_conditional_rates", "use_fp64_gumbel", "fly_window_size",
                "fly_entropy_threshold", "fly_entropy_top_k")
_SPECDEC_EXTRAS = ("uniform_probs", "exponentials", "seed", "offset", "generator", "cuda_stream")


def _is_metadata(x) -> bool:
    """vLLM's ``SamplingMetadata``, duck-typed (no vLLM import): anything with its ``all_greedy``."""
    return x is not None and not isinstance(x, (list, tuple)) and hasattr(x, "all_greedy") and not hasattr(x, "shape")


def rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs, target_logits=None,
                     bonus_token_ids=None, sampling_metadata=None, *extra, target_probs=None, uniform_probs=None, exponentials=None, seed=None,
                     offset=None, generator=None, cuda_stream=0, is_greedy=None, synthetic_mode=False,
                     synthetic_conditional_rates=None, use_fp64_gumbel=False, fly_window_size=None, fly_entropy_threshold=None,
                     fly_entropy_top_k=3):
    """vLLM v1's ``rejection_sample`` (``vllm/v1/sample/rejection_sampler.py``, vLLM 0.33), vLLM's layout:
    returns int32 ``[batch, max_spec_len + 1]``, the emitted tokens of each request then -1 (vLLM's
    PLACEHOLDER_TOKEN_ID). Two forms, told apart by the 8th argument:

    **vLLM's** (``sampling_metadata`` is vLLM's ``SamplingMetadata``, or any object with its attributes
    ``all_greedy``, ``all_random``, ``temperature`` (float ``[batch]``, None when every request is greedy),
    ``generators`` (dict: request index -> its own generator)): the 6th argument is ``target_logits``
    (float32 ``[num_tokens, V]``, after ``apply_sampling_constraints``; on the host also float16 /
    bfloat16), turned into float32 probabilities here as vLLM does (``softmax`` in float32; torch's own
    for torch tensors). A request is greedy iff its
    temperature is 0 (vLLM's ``GREEDY_TEMPERATURE``; older vLLM's -1 too): it emits the argmax of its
    target logits (the first maximum) until one differs from its draft, then the bonus after the last.
    ``num_draft_tokens`` (ints ``[batch]``) must equal the counts of ``cu_num_draft_tokens``. The randomness
    is vLLM's: the uniforms are ``[num_tokens]`` float64 from the global generator (torch's, on the
    tensors' device, for torch tensors: ``torch.rand`` as vLLM; numpy arrays: the Philox stream of
    ``seed``), then each request with a generator in ``generators`` and drafts redraws its own uniforms from
    it (``uniform_`` on its slice; a numpy ``Generator``: ``random``); the exponentials are one float32 row of
    V per request (``exponential_()``, then each such request's row from its generator;
    ``standard_exponential`` for a numpy ``Generator``). With torch tensors and no ``seed``, the tokens are
    vLLM's own for the same generator states. vLLM's options (its 9th-14th arguments) ``synthetic_mode``,
    ``synthetic_conditional_rates``, ``use_fp64_gumbel``, ``fly_window_size``, ``fly_entropy_threshold`` and
    ``fly_entropy_top_k`` are not supported: anything but their defaults is a ValueError naming it
    (``fly_entropy_top_k`` is read only with a window).

    **specdec's probabilities form** (the 8th argument None: every request random; or bool ``[batch]``:
    ``is_greedy`` per request, also by keyword): the 6th argument is ``target_probs`` (float32 ``[num_tokens, V]``,
    or on the host float16 / bfloat16; a greedy request reads its argmax; also by keyword ``target_probs=``), and positional arguments 9-14 are ``uniform_probs``,
    ``exponentials``, ``seed``, ``offset``, ``generator``, ``cuda_stream``.

    In both: draft_token_ids int32 ``[num_tokens]``, every request's drafts back to back;
    cu_num_draft_tokens int ``[batch]``, cumulative ends; draft_probs float32 ``[num_tokens, V]`` or None
    (n-gram drafts: q = 1), on the host also float16 / bfloat16: of target_probs' dtype, or any of the
    three under float32 target probabilities (vLLM's form: a drafter's 16-bit rows against the float32
    softmax); read as they are, with the float32 rows' tokens bit for bit (another pairing, or another
    dtype, is a TypeError naming ``draft_probs`` and the dtype received); bonus_token_ids int ``[batch]`` or ``[batch, 1]``. ``uniform_probs`` (float64
    ``[num_tokens]``) and ``exponentials`` (float32 ``[batch, V]``) replace the draws; ``seed`` / ``offset``
    (ints): request r reads Philox stream ``(seed, r)`` from ``offset`` for its uniforms and ``(seed + 1,
    r)`` for its exponentials (``-log1p(-u)`` rounded to float32: ``philox_exponentials``). Host arrays,
    or (a CUDA build) ``target`` a CUDA tensor:
    then every array is taken to its device, one kernel runs with one block per request on
    ``cuda_stream`` (0: the current stream), and the output is a CUDA tensor, the host's tokens bit for
    bit. Raises TypeError / ValueError naming the argument at fault.
    """
    if bonus_token_ids is None:
        raise TypeError("rejection_sample: missing bonus_token_ids (the 7th argument)")
    if (target_logits is None) == (target_probs is None):
        raise TypeError("rejection_sample: expected target_logits (the 6th argument) or target_probs (by keyword), one of them")
    if _is_metadata(sampling_metadata):
        if target_probs is not None:
            raise TypeError("rejection_sample: vLLM's form (sampling_metadata) takes target_logits; got target_probs")
        if is_greedy is not None:
            raise TypeError("rejection_sample: is_greedy comes from sampling_metadata (temperature 0); expected it not given")
        if len(extra) > len(_VLLM_EXTRAS):
            raise TypeError(f"rejection_sample: at most {8 + len(_VLLM_EXTRAS)} positional arguments in vLLM's form; "
                            f"got {8 + len(extra)}")
        options = dict(zip(_VLLM_EXTRAS, (synthetic_mode, synthetic_conditional_rates, use_fp64_gumbel, fly_window_size,
                                          fly_entropy_threshold, fly_entropy_top_k)))
        options.update(zip(_VLLM_EXTRAS, extra))
        for name in ("synthetic_mode", "use_fp64_gumbel"):  # off: False (or anything false)
            if options[name] is not None and bool(options[name]):
                raise ValueError(f"{name}: vLLM's option is not supported by specdec; expected False; got {options[name]!r}")
        for name in ("synthetic_conditional_rates", "fly_window_size", "fly_entropy_threshold"):
            if options[name] is not None:
                raise ValueError(f"{name}: vLLM's option is not supported by specdec; expected None; got {_args._kind(options[name])}")
        return _vllm_rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                                      target_logits, bonus_token_ids, sampling_metadata, uniform_probs, exponentials, seed,
                                      offset, generator, cuda_stream)
    if len(extra) > len(_SPECDEC_EXTRAS):
        raise TypeError(f"rejection_sample: at most {8 + len(_SPECDEC_EXTRAS)} positional arguments; got {8 + len(extra)}")
    given = dict(zip(_SPECDEC_EXTRAS, extra))
    if sampling_metadata is not None and is_greedy is not None:
        raise TypeError("rejection_sample: is_greedy given twice (as the 8th argument and by keyword)")
    return _rejection_sample_probs(draft_token_ids, max_spec_len, cu_num_draft_tokens, draft_probs,
                                   target_logits if target_probs is None else target_probs, bonus_token_ids, is_greedy if sampling_metadata is None else sampling_metadata, given.get("uniform_probs", uniform_probs),
                                   given.get("exponentials", exponentials), given.get("seed", seed), given.get("offset", offset),
                                   given.get("generator", generator), given.get("cuda_stream", cuda_stream))


def _rejection_sample_probs(draft_token_ids, max_spec_len, cu_num_draft_tokens, draft_probs, target_probs, bonus_token_ids,
                            is_greedy=None, uniform_probs=None, exponentials=None, seed=None, offset=None, generator=None,
                            cuda_stream=0):
    """specdec's probabilities form of :func:`rejection_sample` (``target_probs``; ``is_greedy`` None: every
    request random)."""
    on_cuda = _is_torch(target_probs) and target_probs.is_cuda
    max_spec_len = _args.integer("max_spec_len", max_spec_len, 0, _args.INT32_MAX - 1)
    tokens, v = _args.shape("target_probs", target_probs, 2)
    _check_rows("target_probs", tokens, draft_token_ids)
    cu = cu_num_draft_tokens
    if not on_cuda or uniform_probs is None:
        cu = _args.integers("cu_num_draft_tokens", cu_num_draft_tokens, "int64", scalar=True, what="cumulative counts")
        _check_counts(cu, tokens, max_spec_len)
    batch = _args.shape("cu_num_draft_tokens", cu, 1)[0]
    shape = _args.elements("max_spec_len", (batch, max_spec_len + 1))
    noise = None  # host arrays: the noise rows are drawn inside the call, only where a request rejects
    if uniform_probs is None or exponentials is None:
        s, o = _seed_offset(seed, offset, generator)
        if uniform_probs is None:
            uniform_probs = _philox_per_request(s, o, np.diff(cu, prepend=0))
        if exponentials is None:
            if on_cuda:
                exponentials = _philox_exponentials(s, o, batch, v)
            else:
                noise = ((s + 1) % _args.UINT64_END, o)  # _philox_exponentials' rows, never written
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
                              _args.reals("uniform_probs", uniform_probs, "float64"),
                              no_rows if exponentials is None else exponentials, out, 0, noise)
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


def _check_rows(name: str, tokens: int, draft_token_ids) -> None:
    """One target row per draft token: the rows are the argument at fault when they differ (the drafts
    and their counts agree among themselves, which the counts' check judges)."""
    drafts = _args.shape("draft_token_ids", draft_token_ids, 1)[0]
    if drafts != tokens:
        raise ValueError(f"{name}: expected {drafts} rows (one per draft token: draft_token_ids has {drafts}); got {tokens}")


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


def _host_values(x):
    """A tensor in device memory copied to the host (vLLM keeps its metadata on the GPU); anything else as is."""
    return x.cpu() if _is_torch(x) and x.device.type != "cpu" else x


def _greedy_flags(md, batch: int) -> np.ndarray:
    """vLLM's ``is_greedy`` (``temperature == GREEDY_TEMPERATURE``) as bools ``[batch]``; every request when
    ``all_greedy`` (vLLM then has no temperatures)."""
    if _args.flag("sampling_metadata.all_greedy", md.all_greedy):
        return np.ones(batch, dtype=bool)
    if getattr(md, "temperature", None) is None:
        raise ValueError("sampling_metadata.temperature: expected one temperature per request (all_greedy is False); got None")
    t = _args.reals("sampling_metadata.temperature", _host_values(md.temperature), scalar=True)
    if t.shape != (batch,):
        raise ValueError(f"sampling_metadata.temperature: expected shape ({batch},) (one per request); got {t.shape}")
    greedy = (t == GREEDY_TEMPERATURE) | (t == -1)
    if greedy.any() and _args.flag("sampling_metadata.all_random", getattr(md, "all_random", False)):
        r = int(np.argmax(greedy))
        raise ValueError(f"sampling_metadata: all_random is True but temperature[{r}] = {t[r]} (a greedy request)")
    return greedy


def _generators(md) -> dict:
    """vLLM's per-request generators (request index -> torch.Generator or numpy Generator)."""
    generators = getattr(md, "generators", None) or {}
    if not isinstance(generators, dict):
        raise TypeError(f"sampling_metadata.generators: expected a dict (request index -> generator); got {type(generators).__name__}")
    return generators


def _draw(g, n: int, exponential: bool, r: int):
    """``n`` draws from request ``r``'s generator as vLLM makes them: float64 uniforms (``uniform_``) or
    float32 Exp(1) (``exponential_``); a numpy Generator: ``random`` / ``standard_exponential``."""
    if isinstance(g, np.random.Generator):
        return g.standard_exponential(n, dtype=np.float32) if exponential else g.random(n)
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(g, torch.Generator):
        raise TypeError(f"sampling_metadata.generators[{r}]: expected a torch.Generator or numpy.random.Generator; got "
                        f"{type(g).__name__}")
    x = torch.empty(n, dtype=torch.float32 if exponential else torch.float64, device=g.device)
    return x.exponential_(generator=g) if exponential else x.uniform_(generator=g)


def _assign(dst, lo: int, hi: int, values) -> None:
    """dst[lo:hi] = values (dst / values numpy or torch, any devices)."""
    if _is_torch(dst):
        torch = sys.modules["torch"]
        dst[lo:hi] = values.to(dst.device) if _is_torch(values) else torch.from_numpy(values).to(dst.device)
    else:
        dst[lo:hi] = values.cpu().numpy() if _is_torch(values) else values


def _vllm_randomness(md, counts: np.ndarray, tokens: int, v: int, target_logits, need_exponentials: bool, uniform_probs,
                     exponentials, seed, offset, generator):
    """vLLM's ``generate_uniform_probs`` and the exponentials of ``sample_recovered_tokens``: the global
    draws (torch's generator on the tensors' device where no seed is given, else Philox streams), then each
    seeded request's own, in vLLM's order."""
    batch = len(counts)
    generators = _generators(md)
    for r in generators:
        _args.integer("sampling_metadata.generators key", r, 0, batch - 1, " (a request index)")
    use_torch = _is_torch(target_logits) and seed is None and generator is None
    torch = sys.modules.get("torch")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64) if batch else np.zeros(0, np.int64)
    if uniform_probs is None:
        if use_torch:
            uniform_probs = torch.rand((tokens,), dtype=torch.float64, device=target_logits.device)
        else:
            s, o = _seed_offset(seed, offset, generator)
            uniform_probs = _philox_per_request(s, o, counts)
            seed, offset = s, o
        for r, g in generators.items():
            if counts[r] > 0:
                _assign(uniform_probs, int(starts[r]), int(starts[r] + counts[r]), _draw(g, int(counts[r]), False, r))
    noise = None
    if exponentials is None and need_exponentials:
        own = [r for r in generators if counts[r] > 0]
        if use_torch:
            exponentials = torch.empty((batch, v), dtype=torch.float32, device=target_logits.device).exponential_()
        elif not own and not (_is_torch(target_logits) and target_logits.is_cuda):
            # Philox rows only: rejection_sample draws them itself, where a request rejects.
            noise = _seed_offset(seed, offset, generator)
        else:
            s, o = _seed_offset(seed, offset, generator)
            exponentials = _philox_exponentials(s, o, batch, v)
        for r in own:
            _assign(exponentials, r, r + 1, _draw(generators[r], v, True, r)[None])
    return uniform_probs, exponentials, noise


def _vllm_rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs, target_logits,
                           bonus_token_ids, md, uniform_probs, exponentials, seed, offset, generator, cuda_stream):
    """vLLM 0.33's form of :func:`rejection_sample` (``SamplingMetadata``, target logits)."""
    tokens, v = _args.shape("target_logits", target_logits, 2)
    _check_rows("target_logits", tokens, draft_token_ids)
    max_spec_len = _args.integer("max_spec_len", max_spec_len, 0, _args.INT32_MAX - 1)
    cu = _args.integers("cu_num_draft_tokens", _host_values(cu_num_draft_tokens), "int64", scalar=True, what="cumulative counts")
    _check_counts(cu, tokens, max_spec_len)
    batch = len(cu)
    counts = np.diff(cu, prepend=0) if batch else np.zeros(0, np.int64)
    n = _args.integers("num_draft_tokens", _host_values(num_draft_tokens), "int64", scalar=True, what="draft counts")
    if n.shape != counts.shape or (n != counts).any():
        raise ValueError(f"num_draft_tokens: expected the draft counts of cu_num_draft_tokens, {counts.tolist()}; got {n.tolist()}")
    greedy = _greedy_flags(md, batch)
    all_greedy = bool(greedy.all())
    uniform_probs, exponentials, noise = _vllm_randomness(md, counts, tokens, v, target_logits, not all_greedy, uniform_probs,
                                                          exponentials, seed, offset, generator)
    on_torch = _is_torch(target_logits)
    if all_greedy:
        out = _empty(target_logits, (batch, max_spec_len + 1), "int32")
        out[...] = -1
    else:
        if on_torch:
            target_probs = target_logits.softmax(dim=-1, dtype=sys.modules["torch"].float32)
        else:
            from .rows import softmax

            target_probs = softmax(target_logits)
        out = _rejection_sample_probs(draft_token_ids, max_spec_len, cu, draft_probs, target_probs, bonus_token_ids,
                                      greedy if greedy.any() else None, uniform_probs, exponentials,
                                      *(noise if noise is not None else ()), cuda_stream=cuda_stream)
    if greedy.any():
        # vLLM compares a greedy request's drafts with the argmax of its logits, not of their softmax
        # (equal logits can round to one probability): the walk on the host, over the logits' argmax.
        if on_torch:
            argmax = target_logits.argmax(dim=-1).cpu().numpy()
        else:
            from .rows import argmax as row_argmax

            argmax = row_argmax(target_logits)
        drafts = _args.integers("draft_token_ids", _host_values(draft_token_ids), "int32", lo=0, hi=v - 1, what="token ids")
        if drafts.shape != (tokens,):
            raise ValueError(f"draft_token_ids: expected shape ({tokens},) (one per row of target_logits); got {drafts.shape}")
        bonus = _bonus(_args.integers, _host_values(bonus_token_ids), _args.ndim(bonus_token_ids))
        if bonus.shape != (batch,):
            raise ValueError(f"bonus_token_ids: expected {batch} tokens (one per request); got {bonus.shape[0]}")
        walked = _greedy_walk(argmax, drafts, counts, bonus, greedy, max_spec_len + 1, v)
        rows = np.nonzero(greedy)[0]
        if on_torch:
            torch = sys.modules["torch"]
            out[torch.from_numpy(rows).to(out.device)] = torch.from_numpy(walked[rows]).to(out.device)
        else:
            out[rows] = walked[rows]
    return out


def _greedy_walk(argmax, drafts, counts, bonus, greedy, width: int, v: int) -> np.ndarray:
    """vLLM's greedy kernel, vectorised: request r emits the argmax at each of its positions until the first
    that differs from its draft (included), then, if none differs, its bonus token. Rows of non-greedy
    requests are left at -1."""
    batch, tokens = len(counts), len(drafts)
    out = np.full((batch, width), -1, dtype=np.int32)
    rid = np.repeat(np.arange(batch), counts)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64) if batch else np.zeros(0, np.int64)
    local = np.arange(tokens) - np.repeat(starts, counts)
    miss = (drafts != argmax).astype(np.int64)
    before = np.cumsum(miss) - miss  # mismatches at earlier positions, over the whole batch
    before -= np.repeat(np.where(counts > 0, before[np.minimum(starts, max(tokens - 1, 0))] if tokens else 0, 0), counts)
    emit = (before == 0) & greedy[rid]
    out[rid[emit], local[emit]] = argmax[emit]
    clean = (np.bincount(rid, weights=miss, minlength=batch) == 0) & greedy
    bad = clean & ((bonus < 0) | (bonus >= v))
    if bad.any():
        r = int(np.argmax(bad))
        raise ValueError(f"bonus_token_ids[{r}] = {bonus[r]}; expected a token id in [0, {v})")
    out[clean, counts[clean]] = bonus[clean]
    return out


def _philox_per_request(seed: int, offset: int, counts) -> np.ndarray:
    """Request r's uniforms: Philox stream (seed, r) from `offset`, as many as it has drafts, back to back."""
    width = max(int(counts.max(initial=0)), 1)
    per_request = philox_uniforms(seed, offset, len(counts), width)
    return per_request[np.arange(width) < np.asarray(counts)[:, None]]  # row by row: request r's first counts[r]


def _philox_exponentials(seed: int, offset: int, batch: int, v: int) -> np.ndarray:
    """Exp(1) draws ``[batch, V]`` float32: request r's row from Philox stream (seed + 1, r) at `offset`
    (``-log1p(-u)`` rounded to float32: ``philox_exponentials``)."""
    return philox_exponentials((seed + 1) % _args.UINT64_END, offset, batch, v)


def apply_sampling_constraints(logits, cu_num_draft_tokens, sampling_metadata=None, top_k=None, top_p=None, all_greedy=False, *,
                               temperature=None):
    """vLLM v1's ``apply_sampling_constraints`` (``vllm/v1/sample/rejection_sampler.py``): what vLLM's
    rejection sampler does to the target logits before ``rejection_sample``, in place. Request r's rows
    (``cu_num_draft_tokens``, as ``rejection_sample``'s) are divided by its temperature (0, vLLM's
    ``GREEDY_TEMPERATURE``, or older vLLM's -1: left at 1), then filtered as vLLM's ``apply_top_k_top_p``
    (the PyTorch path): logits below the ``top_k[r]``-th largest to -inf (ties kept; k >= V: off), then
    top-p over what is left (ascending order, ties by index: every entry but the largest whose cumulative
    probability is at most ``1 - top_p[r]``). logits: float32, float16 or bfloat16 ``[num_tokens, V]``,
    C-contiguous, host memory, filtered in its own dtype as vLLM's in-place filter on its tensor: a
    16-bit row is divided in float32 and rounded back (to nearest even, as torch), then filtered by the
    float32 decisions on those values (vLLM's PyTorch path computes the top-p softmax and cumulative sum
    in the 16-bit dtype: the kept set can differ where a cumulative sum lies within that rounding of
    ``1 - top_p``). fp16 logits divided by a temperature below 1 can overflow to +inf, which is refused
    as any +inf logit. Returns ``logits``.

    ``sampling_metadata``: vLLM's ``SamplingMetadata`` (any object with ``all_greedy``, ``temperature``,
    ``top_k``, ``top_p``; vLLM 0.33's form): nothing is done when ``all_greedy``; ``top_k`` / ``top_p``
    None turn that filter off. specdec's older form passes the per-request values instead:
    ``temperature`` (float ``[batch]``, the 3rd argument or by keyword), ``top_k``, ``top_p`` (None: off)
    and ``all_greedy``. Raises ValueError naming the argument (a temperature neither > 0 nor greedy, a
    count that does not match, a top_k < 1, a top_p outside (0, 1]) and TypeError for wrong kinds.
    """
    if _is_metadata(sampling_metadata):
        if temperature is not None or top_k is not None or top_p is not None or all_greedy:
            raise TypeError("apply_sampling_constraints: temperature, top_k, top_p and all_greedy come from sampling_metadata; "
                            "expected them not given")
        md = sampling_metadata
        if _args.flag("sampling_metadata.all_greedy", md.all_greedy):
            return logits
        if md.temperature is None:
            raise ValueError("sampling_metadata.temperature: expected one temperature per request (all_greedy is False); got None")
        temperature = _host_values(md.temperature)
        top_k = None if getattr(md, "top_k", None) is None else _host_values(md.top_k)
        top_p = None if getattr(md, "top_p", None) is None else _host_values(md.top_p)
    elif sampling_metadata is not None:
        if temperature is not None:
            raise TypeError("apply_sampling_constraints: temperature given twice (as the 3rd argument and by keyword)")
        temperature = sampling_metadata
    elif temperature is None:
        raise TypeError("sampling_metadata: expected vLLM's SamplingMetadata (or specdec's temperature [batch]); got None")
    if _args.flag("all_greedy", all_greedy):
        return logits
    no_k, no_p = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
    _specdec.apply_sampling_constraints(logits, _args.integers("cu_num_draft_tokens", cu_num_draft_tokens, "int64", scalar=True,
                                                               what="cumulative counts"),
                                        _args.reals("temperature", temperature, scalar=True),
                                        no_k if top_k is None else _args.integers("top_k", top_k, "int64", scalar=True),
                                        no_p if top_p is None else _args.reals("top_p", top_p, scalar=True))
    return logits


def apply_top_k_top_p(logits, k=None, p=None, has_topp_only_rows=True):
    """vLLM v1's ``apply_top_k_top_p`` (``vllm/v1/sample/ops/topk_topp_sampler.py``): every row of float32
    (or float16 / bfloat16, in their dtype as ``apply_sampling_constraints``) ``[rows, V]`` logits filtered in place by its ``k[row]`` and ``p[row]`` (None: off), as
    ``apply_sampling_constraints`` does at temperature 1. Returns ``logits``. ``has_topp_only_rows`` (vLLM's
    hint for its Triton kernel) changes nothing: accepted for vLLM's signature. Ties follow vLLM's
    PyTorch path (every logit equal to the k-th kept), which vLLM runs where Triton is absent; its Triton
    kernel keeps exactly k at a tie."""
    del has_topp_only_rows
    rows = _args.shape("logits", logits, 2)[0]
    try:
        return apply_sampling_constraints(logits, np.arange(1, rows + 1, dtype=np.int64), np.ones(rows, dtype=np.float32), k, p)
    except (TypeError, ValueError) as e:  # in this function's names for vLLM's per-request filters
        renamed = re.sub(r"\btop_([kp])\b", r"\1", str(e))
        raise (ValueError if isinstance(e, ValueError) else TypeError)(renamed) from None
