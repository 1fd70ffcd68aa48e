# SPDX-License-Identifier: Apache-2.0
"""specdec's row primitives (C++: the backends' row_argmax, row_topk, row_softmax, row_log_softmax,
row_logsumexp) over numpy arrays or torch tensors, host or CUDA.

Every function here takes ``logits`` ``[rows, V]``, C-contiguous: a numpy array or CPU torch tensor
(run on the host) of float32, float16 or bfloat16 (numpy holds bf16 as ``ml_dtypes.bfloat16``), or in a
CUDA build a CUDA tensor of one of those dtypes (run on its device, on the current stream; every other
array of the call on that device). A 16-bit row is read as it is (two bytes per entry, never copied to float32) and
gives, bit for bit, the results of the float32 row holding the same values; outputs are float32. Outputs are new arrays of the same kind and device unless
given (then written and returned). Errors, each naming the argument: ``TypeError`` for an argument that
is not an array or has another dtype (the message gives the dtype received), ``ValueError`` for its
dimensions, shape, strides, device or a read-only output, and for what the C++ side refuses (NaN or
+inf in a row, no column, a temperature out of range)."""

from __future__ import annotations

from . import _args, _specdec
from ._common import _NONE_F32, _empty, _empty_f32_like, _stream

__all__ = ["argmax", "topk", "softmax", "log_softmax", "logsumexp"]


# ---- specdec's row primitives ------------------------------------------------------------------------


def argmax(logits, out=None, values=None):
    """Row argmax: the lowest index of each row's maximum (an all -inf row gives 0).

    ``logits``: float32 ``[rows, V]`` (V >= 1), host or CUDA, or float16 / bfloat16 on the host. ``out``: optional int32 ``[rows]`` for the
    indices; ``values``: optional float32 ``[rows]`` that receives the maxima. Returns ``out`` (int32
    ``[rows]``, of ``logits``' kind and device). Raises ``TypeError`` (not an array, another dtype) or
    ``ValueError`` (shape, strides, device, a read-only output; NaN or +inf in a row; V = 0)."""
    if out is None:
        out = _empty(logits, (_args.shape("logits", logits, 2)[0],), "int32")
    _specdec.row_argmax(logits, out, values if values is not None else _NONE_F32, _stream(logits))
    return out


def topk(logits, k, values=None, indices=None):
    """The k largest entries of each row, descending, ties to the lower index, as ``torch.topk(logits,
    k)`` (which breaks ties differently and returns int64).

    ``logits``: float32, float16 or bfloat16 ``[rows, V]``, host or CUDA. ``k``: an int, 1 <= k <= V. ``values`` (float32) and
    ``indices`` (int32): optional outputs ``[rows, k]``. Returns ``(values, indices)``. Raises
    ``TypeError`` (an array's kind or dtype, a ``k`` that is not an integer) or ``ValueError`` (``k`` out of
    range, shapes, strides, device, a read-only output, NaN or +inf in a row)."""
    rows, v = _args.shape("logits", logits, 2)
    k = _args.integer("k", k, 0, v, " (the row length)")
    if values is None:
        values = _empty(logits, (rows, k), "float32")
    if indices is None:
        indices = _empty(logits, (rows, k), "int32")
    _specdec.row_topk(logits, k, values, indices, _stream(logits))
    return values, indices


def softmax(logits, temperature=1.0, out=None):
    """``softmax(logits / temperature)`` per row (temperature 0: one-hot at the argmax).

    ``logits``: float32, float16 or bfloat16 ``[rows, V]``, host or CUDA; -inf masks a token. ``temperature``: a real >= 0.
    ``out``: optional float32 ``[rows, V]`` (may be ``logits`` itself). Returns ``out``, float32 ``[rows,
    V]``. Raises ``TypeError`` (an array's kind or dtype, a temperature that is not a number) or
    ``ValueError`` (shapes, strides, device, a read-only output; NaN or +inf in a row, a row all -inf, a
    negative or non-finite temperature)."""
    if out is None:
        out = _empty_f32_like(logits, "logits")
    _specdec.row_softmax(logits, _args.real("temperature", temperature), out, False, _stream(logits))
    return out


def log_softmax(logits, temperature=1.0, out=None):
    """``log_softmax(logits / temperature)`` per row (temperature 0: 0 at the argmax, -inf elsewhere).

    ``logits``: float32, float16 or bfloat16 ``[rows, V]``, host or CUDA. ``temperature``: a real >= 0. ``out``: optional
    float32 ``[rows, V]`` (may be ``logits`` itself). Returns ``out``, float32 ``[rows, V]``. Raises as
    :func:`softmax`."""
    if out is None:
        out = _empty_f32_like(logits, "logits")
    _specdec.row_softmax(logits, _args.real("temperature", temperature), out, True, _stream(logits))
    return out


def logsumexp(logits, temperature=1.0, out=None):
    """``log sum exp(logits / temperature)`` per row (-inf for a row all -inf).

    ``logits``: float32, float16 or bfloat16 ``[rows, V]``, host or CUDA. ``temperature``: a real > 0. ``out``: optional
    float32 ``[rows]``. Returns ``out``, float32 ``[rows]``. Raises ``TypeError`` (an array's kind or
    dtype, a temperature that is not a number) or ``ValueError`` (shapes, strides, device, a read-only
    output, NaN or +inf in a row, a temperature <= 0 or not finite)."""
    if out is None:
        out = _empty(logits, (_args.shape("logits", logits, 2)[0],), "float32")
    _specdec.row_logsumexp(logits, _args.real("temperature", temperature), out, _stream(logits))
    return out
