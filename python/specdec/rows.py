# SPDX-License-Identifier: Apache-2.0
"""specdec's row primitives (C++: the backends' row_argmax, row_topk, row_softmax, row_log_softmax,
row_logsumexp) over numpy arrays or torch tensors, host or CUDA."""

from __future__ import annotations

from . import _args, _specdec
from ._common import _NONE_F32, _empty, _empty_f32_like, _stream

__all__ = ["argmax", "topk", "softmax", "log_softmax", "logsumexp"]


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
