# SPDX-License-Identifier: Apache-2.0
"""What every function of the package shares: outputs allocated like an input (numpy or torch, host or
CUDA), the CUDA stream of an input, and Philox uniforms."""

from __future__ import annotations

import sys

import numpy as np

from . import _args, _specdec
from ._args import is_torch as _is_torch

__all__ = ["philox_uniforms", "philox_exponentials"]


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
    """A new float32 array of `like`'s shape (and device), of the same kind: torch.empty_like is the
    cheapest torch allocation (~0.8 us); a bf16 / fp16 `like` gets a float32 output all the same. `like`
    is argument `name`: not an array is a TypeError naming it (its size bounds the allocation)."""
    if _is_torch(like):
        # torch's default preserve_format: a dense row-major input gives a row-major output, a padded
        # one a contiguous output; any other layout of `like` is refused by the call before `out` is read.
        torch = sys.modules["torch"]
        if like.dtype == torch.float32:
            return torch.empty_like(like)
        return torch.empty_like(like, dtype=torch.float32)
    shape = getattr(like, "shape", None)
    if shape is None:
        _args.shape(name, like)
    return np.empty(shape, dtype=np.float32)


def _empty_rows_like(like, name: str):
    """A new array of `like`'s shape, dtype (float32, float16 or bfloat16: what FlashInfer's filters return)
    and device, of the same kind; float32 for any other dtype (the call then refuses `like` by name)."""
    if _is_torch(like):
        return sys.modules["torch"].empty_like(like)
    shape = getattr(like, "shape", None)
    if shape is None:
        _args.shape(name, like)
    dtype = getattr(like, "dtype", None)
    if dtype is not None and getattr(dtype, "name", None) in ("float16", "bfloat16"):
        return np.empty(shape, dtype=dtype)
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


def _dtype_name(name: str, value, options) -> str:
    """`value`, a dtype as numpy reads one (np.uint8, np.dtype("uint8"), "uint8"), as one of the names
    `options`: a dtype not among them is a TypeError naming the dtype received; a string numpy does not
    read as a dtype a ValueError, anything else a TypeError (both naming the options)."""
    if isinstance(value, (type, np.dtype, str)):
        try:
            got = np.dtype(value).name
        except TypeError:
            got = None
        if got in options:
            return got
        if got is not None:
            raise TypeError(f"{name}: expected {', '.join(options)}; got {got}")
    return _args.choice(name, value, options)


def philox_uniforms(seed: int, offset: int, rows: int, count: int, dtype: str = "float64") -> np.ndarray:
    """``[rows x count]`` uniforms in [0, 1): row r is Philox-4x32-10 stream ``(seed, r)`` from position
    ``offset`` (specdec's ``philox_stream``: ``uniform_double`` for float64, ``uniform`` for float32), the
    streams the sampling functions read when given a seed.

    ``seed``, ``offset``: integers in [0, 2^64). ``rows``, ``count``: sizes in [0, 2^31 - 1], their product
    at most 2^40. ``dtype``: ``"float64"`` (default) or ``"float32"`` (also ``np.float32`` or a numpy
    dtype). Returns a new host numpy array ``[rows, count]`` of ``dtype``. Raises ``TypeError`` (a
    non-integer seed, offset or size; another dtype, named) or ``ValueError`` (a value out of range, a
    string that names no dtype)."""
    seed = _args.integer("seed", seed, 0, _args.UINT64_END - 1)
    offset = _args.integer("offset", offset, 0, _args.UINT64_END - 1)
    shape = _args.elements("count", (_args.size("rows", rows), _args.size("count", count)))
    out = np.empty(shape, dtype=_dtype_name("dtype", dtype, ("float64", "float32")))  # np.float32, "float64", ...
    _specdec.philox_uniforms(seed, offset, out)
    return out


def philox_exponentials(seed: int, offset: int, rows: int, count: int) -> np.ndarray:
    """float32 ``[rows x count]`` Exp(1) samples: row r is ``-log1p(-u)`` of Philox stream ``(seed, r)``'s
    float64 uniforms from ``offset`` (``philox_uniforms(seed, offset, rows, count)``), the double rounded
    to float32: ``(-np.log1p(-philox_uniforms(...))).astype(np.float32)`` where numpy's log1p is the C
    library's, computed in C++ (``specdec::sampling::philox_exponentials``). ``rejection_sample`` draws
    its ``exponentials`` so from ``seed + 1``."""
    seed = _args.integer("seed", seed, 0, _args.UINT64_END - 1)
    offset = _args.integer("offset", offset, 0, _args.UINT64_END - 1)
    shape = _args.elements("count", (_args.size("rows", rows), _args.size("count", count)))
    out = np.empty(shape, dtype=np.float32)
    _specdec.philox_exponentials(seed, offset, out)
    return out
