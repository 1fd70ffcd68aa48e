# SPDX-License-Identifier: Apache-2.0
"""Verification of specdec's own trees (C++: specdec/sampling): request-based greedy and lossless
verification, and padded batches verified where they live (host or CUDA)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import numpy as np

from . import _args, _specdec
from ._args import seed_offset as _seed_offset
from ._common import _empty, _NONE_F32, _stream
from .flashinfer import _philox_streams
from .tree import _tree_arrays

__all__ = ["VerifyResult", "verify_greedy", "verify_speculative", "tree_batch", "BatchVerification", "verify_tree_batch"]


# ---- verification of specdec's trees ---------------------------------------------------------------------


@dataclass
class VerifyResult:
    """One request's verification: ``accepted_nodes`` (node indices of the accepted path, root excluded),
    ``tokens`` (the accepted tokens, then the final one), ``bonus`` (the walk ended without a rejection).
    An engine keeps the KV rows of node 0 and ``accepted_nodes``."""

    accepted_nodes: List[int]
    tokens: List[int]
    bonus: bool


def _rows(target_rows) -> np.ndarray:
    return np.zeros(0, dtype=np.int64) if target_rows is None else _args.integers("target_rows", target_rows, "int64",
                                                                                   what="row indices")


def verify_greedy(logits, trees, target_rows=None) -> List[VerifyResult]:
    """Greedy verification of specdec's trees (SGLang's ``verify_tree_greedy`` and EAGLE's rule): the
    longest path whose every token is the target's argmax at its parent, then the argmax after it.
    ``logits`` ``[rows x V]`` float32 (numpy or torch, CPU): node i of tree r reads row
    ``target_rows[r] + i`` (default: the trees' rows one after another). Rows the walk never visits are
    never read.

    ``logits``: float32, float16 or bfloat16 ``[rows, V]`` (a 16-bit row read as it is: the float32
    row's argmax), C-contiguous, host (numpy or CPU torch). ``trees``: a
    :class:`DraftTree` or a sequence of them. ``target_rows``: None or one integer per tree (int64
    range; a list or an integer array). Returns a list of :class:`VerifyResult`, one per tree. Raises
    ``TypeError`` (``logits`` not a float32 / float16 / bfloat16 array, not trees, rows not integers) or ``ValueError``
    (shapes, strides, device; a malformed tree, a token outside [0, V), a tree's rows past the logits;
    NaN or +inf in a visited row)."""
    return [VerifyResult(*r) for r in _specdec.verify_greedy(logits, _tree_arrays(trees), _rows(target_rows))]


def verify_speculative(target, trees, *, logits: bool = False, temperature: float = 1.0, target_rows=None,
                       draft_probs=None, draft_rows=None, seed: Optional[int] = None, offset: int = 0,
                       generator=None) -> List[VerifyResult]:
    """Lossless stochastic verification of specdec's trees (SpecInfer's multi-draft rule; a chain is
    Leviathan et al.'s): each child is tested against the residual left by its rejected siblings.
    ``target`` ``[rows x V]`` float32: probabilities, or with ``logits`` raw logits softened at
    ``temperature``. ``draft_probs`` ``[rows' x V]`` with ``draft_rows`` (per tree, int64 ``[n]``: the row
    each node was drawn from, -1 for a deterministic node); none: every draft is deterministic (prompt
    lookup, suffix drafts, top-k trees). Randomness: Philox stream ``(seed, r)`` for tree r from
    ``offset`` (``generator``: a ``torch.Generator`` draws the seed; neither: numpy's global generator).

    ``target``: float32, float16 or bfloat16 ``[rows, V]`` (read as they are: the float32 rows' results
    for the same values), C-contiguous, host (numpy or CPU torch); probabilities must sum to 1 (within
    1e-4, plus a 16-bit row's rounding) in every row read. ``trees``: a :class:`DraftTree` or a sequence of them.
    ``logits``: a bool. ``temperature``: a finite real > 0 (with ``logits``). ``target_rows``: None or one
    integer per tree, node i of tree r reading row ``target_rows[r] + i`` (default: the trees' rows one
    after another). ``draft_probs``: None or ``[rows', V]`` float32, float16 or bfloat16 (its own dtype), host; ``draft_rows``: None or a list
    of one integer array per tree. ``seed``, ``offset``: ints in [0, 2^64). Returns a list of
    :class:`VerifyResult`, one per tree. Raises ``TypeError`` (an array's kind or dtype, not trees, a
    ``draft_rows`` that is not a list, a ``generator`` that is not a ``torch.Generator``, integers
    expected) or ``ValueError`` (shapes, strides, device; a malformed tree, a token outside [0, V), a row
    out of range, a row that is not a distribution, NaN or +inf, a temperature out of range)."""

    s, o = _seed_offset(seed, offset, generator)
    draft = np.zeros((0, 0), dtype=np.float32) if draft_probs is None else draft_probs
    if draft_rows is None:
        rows = []
    elif isinstance(draft_rows, (list, tuple)):
        rows = [_args.integers("draft_rows", r, "int64", what="row indices") for r in draft_rows]
    else:
        raise TypeError(f"draft_rows: expected one int64 array per tree (a list); got {type(draft_rows).__name__}")
    return [VerifyResult(*r) for r in _specdec.verify_speculative(target, _args.flag("logits", logits),
                                                                 _args.real("temperature", temperature), _tree_arrays(trees),
                                                                 _rows(target_rows), draft, rows, s, o)]


# ---- padded batches: verification where the batch lives (host or CUDA) ------------------------------------


def tree_batch(trees, nodes: Optional[int] = None):
    """The padded batch layout of ``verify_tree_batch`` from specdec's trees: ``(tokens, parents,
    node_counts)``, int32 ``[batch x N]``, ``[batch x N]`` and ``[batch]`` numpy arrays, N = ``nodes`` or
    the largest tree's size; padding entries are 0 (tokens) and 0 (parents) and are never read.

    ``trees``: a :class:`DraftTree` or a sequence of them (none: shape ``[0 x 1]``). ``nodes``: None or an
    int >= the largest tree's size. Raises ``TypeError`` (not trees, a field or ``nodes`` not integers)
    or ``ValueError`` (``nodes`` too small or too large, a field past int32, a tree whose fields differ in
    length)."""
    arrays = _tree_arrays(trees)  # int32, checked: a token past int32 is refused, not stored wrapped
    largest = max((len(a[0]) for a in arrays), default=1)
    n = largest if nodes is None else _args.size("nodes", nodes)
    if largest > n:
        raise ValueError(f"nodes: expected at least the largest tree's size ({largest}); got {n}")
    shape = _args.elements("nodes", (len(arrays), n))
    tokens = np.zeros(shape, dtype=np.int32)
    parents = np.zeros(shape, dtype=np.int32)
    counts = np.zeros(len(arrays), dtype=np.int32)
    for r, (token, parent, _) in enumerate(arrays):
        if len(parent) != len(token):
            raise ValueError(f"trees: tree {r} has {len(token)} tokens and {len(parent)} parents; expected one parent per token")
        tokens[r, : len(token)] = token
        parents[r, : len(token)] = parent
        counts[r] = len(token)
    return tokens, parents, counts


@dataclass
class BatchVerification:
    """``verify_tree_batch``'s outputs, arrays of the target's kind and device: ``tokens`` int32 ``[batch x
    N]`` (the accepted tokens, then the final one, -1 after), ``accepted`` int32 ``[batch]`` (draft tokens
    accepted: each request emitted ``accepted + 1`` tokens), ``accepted_nodes`` int32 ``[batch x (N - 1)]``
    (node indices of the accepted path, root excluded, -1 after: the KV rows to keep) and
    ``uniforms_consumed`` int32 ``[batch]`` (the next step's Philox offset is ``offset + uniforms_consumed``)."""

    tokens: object
    accepted: object
    accepted_nodes: object
    uniforms_consumed: object


def verify_tree_batch(target, tokens, parents, *, greedy: bool = False, node_counts=None, target_rows=None,
                      draft_probs=None, draft_rows=None, max_accepted=None, bonus_tokens=None, uniforms=None,
                      seed: Optional[int] = None, offset=0, generator=None) -> BatchVerification:
    """Verification of a padded batch of draft trees where its arrays are: numpy or CPU torch on the host,
    CUDA torch tensors on their device in a CUDA build (one kernel, one block per request, on the current
    stream; every array on the target's device). specdec's ``sampling::verify_greedy`` /
    ``sampling::verify_speculative`` over ``sampling::tree_batch``: the decisions of ``verify_greedy`` /
    ``verify_speculative`` over the same trees, bit for bit.

    ``tokens``, ``parents``: int32 ``[batch x N]`` (request r's node i; node 0 the root with parent -1,
    every parent before its child; ``tree_batch`` builds them from ``DraftTree`` s). ``node_counts`` int32
    ``[batch]``: nodes used per request (default N). ``target_rows`` int64 ``[batch]``: the target row of
    each request's node 0 (default ``r * N``); node i reads row ``target_rows[r] + i``. ``max_accepted``
    int32 ``[batch]``: most draft tokens accepted, -1 for no cap. ``bonus_tokens`` int32 ``[batch]``: a token
    the caller drew, emitted when the walk ends without a rejection (-1: none).

    ``greedy=True``: ``target`` is float32 logits ``[rows x V]``; the walk accepts the child whose token is
    its parent row's argmax (only visited rows are read) and emits the last node's argmax. Otherwise
    ``target`` holds probabilities (soften logits with ``softmax`` first) and the walk is the lossless
    multi-draft rule: deterministic drafts, or ``draft_probs`` ``[rows' x V]`` with ``draft_rows``
    int64 ``[batch x N]`` (the row node i was drawn from, -1 for a deterministic node). Randomness:
    ``uniforms`` float64 ``[batch x U]`` in consumption order, or Philox stream ``(seed, r)`` for request r
    read from ``offset`` (an int, or int64 ``[batch]`` per request; ``generator`` draws the seed; neither:
    numpy's global generator), as ``verify_speculative``.

    Row dtypes: ``target`` and ``draft_probs`` float32; on the host also float16 / bfloat16, each its own
    (read as they are: the float32 rows' results, bit for bit; a 16-bit probability row's sum may miss 1
    by its rounding too). 16-bit greedy logits take every row's argmax first (a NaN in any row is then an
    error, where float32 logits are read only where the walk goes).

    Every array argument is viewed, not copied: C-contiguous, of the dtype given here exactly, and in
    ``target``'s memory (a list where an array is expected is a ``TypeError``). ``greedy``: a bool.
    ``seed``: an int in [0, 2^64). Returns a :class:`BatchVerification`.

    Errors: a dtype or an argument that is not an array as ``TypeError`` (the dtype received named),
    shapes, strides and devices as ``ValueError``, each naming the argument; a malformed tree, a token,
    row, cap or bonus out of range, a row that is not a distribution where it is read whole, NaN or +inf
    in a row read, as ``ValueError`` from the C++ side."""

    b, n = _args.shape("tokens", tokens, 2)
    greedy = _args.flag("greedy", greedy)

    def given(a):
        return _NONE_F32 if a is None else a

    streams, offsets = _NONE_F32, _NONE_F32
    if not greedy and uniforms is None:
        s, _ = _seed_offset(seed, 0, generator)
        streams, offsets = _philox_streams(target, b, s, offset)
    out = BatchVerification(_empty(target, (b, max(n, 1)), "int32"), _empty(target, (b,), "int32"),
                            _empty(target, (b, max(n - 1, 0)), "int32"), _empty(target, (b,), "int32"))
    _specdec.verify_batch(target, greedy, tokens, parents, given(node_counts), given(target_rows), given(draft_probs),
                          given(draft_rows), given(max_accepted), given(bonus_tokens), given(uniforms), streams, offsets,
                          out.tokens, out.accepted, out.accepted_nodes, out.uniforms_consumed, False, _NONE_F32, _stream(target))
    return out
