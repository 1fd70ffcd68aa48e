# SPDX-License-Identifier: Apache-2.0
"""Tree-attention masks of padded batches and FlashInfer's packed layout (C++: specdec/mask); a single
tree's masks in every layout are ``DraftTree.mask``."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from . import _args, _specdec
from ._args import is_torch as _is_torch
from ._common import _dtype_name, _empty, _stream
from .tree import DraftTree, _int32, _tree_arrays

__all__ = ["batch_tree_mask", "batch_tree_mask_flashinfer", "tree_mask_flashinfer"]


def batch_tree_mask(parents, node_counts=None, *, layout: str = "dense", prefix_length: int = 0, dtype: str = "bool",
                    out=None):
    """The tree-attention masks of a padded batch of trees (``verify_tree_batch``'s and
    :class:`Eagle2BatchBuilder`'s layout: int32 ``parents`` ``[batch, N]``, -1 at node 0, parents before
    children; ``node_counts`` int32 ``[batch]`` or None for N each), computed where ``parents`` lives (host
    arrays, or CUDA tensors: one kernel on the current stream, one block per request). ``layout``:

    - ``"dense"``: ``[batch, N, prefix_length + N]`` of ``dtype`` ("bool", "uint8" or "float32"), 1 where
      node i attends the prefix, itself and its ancestors (:meth:`DraftTree.mask` per tree);
    - ``"additive"``: the same in float32, 0 / -inf;
    - ``"packed_int32"``: TensorRT-LLM's ``[batch, N, ceil(N / 32)]`` int32 words;
    - ``"bitpacked_rows"``: SGLang's one item per node ``[batch, N]`` (uint8 / int16 / int32 bits for N <=
      8 / 16 / 32; numpy gives uint16 / uint32).

    Rows past a request's node count attend the prefix and themselves only. Written into ``out`` when
    given. A malformed tree or count is a ``ValueError`` naming it.

    ``parents``: int32 ``[batch, N]``, C-contiguous (numpy, CPU torch or a CUDA tensor). ``node_counts``:
    None or ``[batch]`` integers in [1, N] (a list, an integer array, a tensor; converted to int32 where
    ``parents`` is). ``prefix_length``: an int >= 0. ``dtype``: the dense layout's entries, a name or a
    numpy dtype. ``out``: optional array of the layout's shape (any shape with that many entries) and
    dtype (the dense layout: bool, uint8, int8 or float32; bitpacked rows: 1, 2 or 4-byte integers), in
    ``parents``' memory; ``dtype`` is then ignored. Returns the mask (``out``, or a new array of
    ``parents``' kind and device). Raises ``TypeError`` (``parents`` not an int32 array, ``out`` of
    another dtype, ``layout`` or ``dtype`` of the wrong kind or a dtype not listed, counts not integers)
    or ``ValueError`` (another ``layout``, a ``dtype`` string that names no dtype, shapes, strides,
    devices, a read-only ``out``, a malformed tree or count, more than 32 nodes for bitpacked rows)."""

    layouts = {"dense": 0, "additive": 1, "packed_int32": 2, "bitpacked_rows": 3}
    _args.choice("layout", layout, tuple(layouts))
    dtype = _dtype_name("dtype", dtype, ("bool", "uint8", "float32"))
    batch, n = _args.shape("parents", parents, 2)
    prefix_length = _args.size("prefix_length", prefix_length)
    on_cuda = _is_torch(parents) and parents.is_cuda
    if node_counts is None:
        counts = np.empty(0, dtype=np.int32)
    elif on_cuda:
        counts = _args.device_integers("node_counts", node_counts, "int32", parents, what="node counts")
    else:
        counts = _int32("node_counts", node_counts, "node counts")
    if out is None:
        if layout == "dense":
            out = _empty(parents, _args.elements("prefix_length", (batch, n, prefix_length + n)), dtype)
        elif layout == "additive":
            out = _empty(parents, _args.elements("prefix_length", (batch, n, prefix_length + n)), "float32")
        elif layout == "packed_int32":
            out = _empty(parents, (batch, n, (n + 31) // 32), "int32")
        else:
            torch_like = _is_torch(parents)
            item = "uint8" if n <= 8 else ("int16" if torch_like else "uint16") if n <= 16 else ("int32" if torch_like else "uint32")
            out = _empty(parents, (batch, n), item)
    _specdec.batch_tree_mask(parents, counts, prefix_length, layouts[layout], out, _stream(parents))
    return out


def batch_tree_mask_flashinfer(parents, node_counts=None, prefix_lengths=0):
    """FlashInfer's packed custom mask of a padded batch of trees (``batch_tree_mask``'s ``parents`` and
    ``node_counts``), computed where ``parents`` lives: ``(packed uint8, indptr int32 [batch + 1])``,
    request r's ``[n_r x (prefix_r + n_r)]`` mask (n_r its node count) flattened and packed little-endian
    from byte ``indptr[r]``, as :func:`tree_mask_flashinfer` gives for the same trees. ``prefix_lengths``
    an int or one per request. On CUDA tensors: two kernels on the current stream, each checked as every
    device call is (one synchronisation), with the packed size read back between them (as FlashInfer's
    wrapper does after ``segment_packbits``).

    ``parents``: int32 ``[batch, N]``, C-contiguous (numpy, CPU torch or a CUDA tensor). ``node_counts``:
    None (N each) or ``[batch]`` integers in [1, N]. ``prefix_lengths``: an int or ``[batch]`` integers, each
    in [0, 2^31 - 1]. Returns ``(packed, indptr)``: uint8 ``[indptr[-1]]`` and int32 ``[batch + 1]``, of
    ``parents``' kind and device. Raises ``TypeError`` (``parents`` not an int32 array, counts or lengths
    not integers) or ``ValueError`` (shapes, strides, a malformed tree, a count or length out of
    range)."""

    batch = _args.shape("parents", parents, 2)[0]
    stream = _stream(parents)
    if _is_torch(parents) and parents.is_cuda:
        import torch

        counts = torch.empty(0, dtype=torch.int32) if node_counts is None else \
            _args.device_integers("node_counts", node_counts, "int32", parents, what="node counts")
        prefixes = _args.device_integers("prefix_lengths", prefix_lengths, "int64", parents, scalar=True, hi=_args.INT32_MAX,
                                         what="lengths")
        if prefixes.numel() == 1 and batch != 1:
            prefixes = prefixes.expand(batch).contiguous()
        indptr = torch.empty(batch + 1, dtype=torch.int32, device=parents.device)
        _specdec.flashinfer_mask(parents, counts, prefixes, indptr, torch.empty(0, dtype=torch.uint8), stream)
        packed = torch.empty(int(indptr[-1].item()), dtype=torch.uint8, device=parents.device)
    else:
        counts = np.empty(0, dtype=np.int32) if node_counts is None else _int32("node_counts", node_counts, "node counts")
        prefixes = _args.integers("prefix_lengths", prefix_lengths, "int64", scalar=True, hi=_args.INT32_MAX, what="lengths")
        if len(prefixes) == 1 and batch != 1:
            prefixes = np.full(batch, prefixes[0], dtype=np.int64)
        indptr = _empty(parents, (batch + 1,), "int32")
        _specdec.flashinfer_mask(parents, counts, prefixes, indptr, np.empty(0, dtype=np.uint8), stream)
        packed = _empty(parents, (int(indptr[-1]),), "uint8")
    if packed.shape[0] > 0:
        _specdec.flashinfer_mask(parents, counts, prefixes, indptr, packed, stream)
    return packed, indptr


def tree_mask_flashinfer(trees: Sequence[DraftTree], prefix_lengths):
    """FlashInfer's packed custom mask of a ragged batch: ``(packed, indptr)``, request r's
    ``[n_r x (prefix_r + n_r)]`` mask flattened and packed little-endian from byte ``indptr[r]`` (the
    ``custom_mask`` / ``mask_indptr`` pair of FlashInfer's prefill wrapper after ``segment_packbits``).

    ``trees``: a :class:`DraftTree` or a sequence of them. ``prefix_lengths``: an int (every tree) or one
    per tree, each in [0, 2^31 - 1]. Returns ``(packed, indptr)``: new numpy arrays, uint8
    ``[indptr[-1]]`` and int32 ``[len(trees) + 1]``. Raises ``TypeError`` (not trees, lengths not
    integers) or ``ValueError`` (a malformed tree, a length out of range, a count of lengths that is
    neither one nor one per tree)."""
    prefixes = _args.integers("prefix_lengths", prefix_lengths, "int64", scalar=True, hi=_args.INT32_MAX, what="lengths")
    return _specdec.tree_mask_flashinfer(_tree_arrays(trees), prefixes)
