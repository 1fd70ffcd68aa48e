# SPDX-License-Identifier: Apache-2.0
"""Draft trees and their builders (C++: specdec/tree): ``DraftTree``, prompt lookup (``propose_ngram``,
``ngram_match_length``) and the EAGLE-2 builders, host (``Eagle2TreeBuilder``) and device-resident
(``Eagle2BatchBuilder``). Arguments go through specdec/_args.py (checked, named, never wrapped);
stateful objects serialise their calls (docs/python.md, "Threads")."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import List

import numpy as np

from . import _args, _specdec
from ._common import _empty, _stream

__all__ = ["DraftTree", "propose_ngram", "ngram_match_length", "Eagle2TreeBuilder", "Eagle2BatchBuilder", "Eagle2BatchStep", "Eagle2BatchTrees"]


def _int32(name: str, x, what: str = "token ids", **bounds) -> np.ndarray:
    """Argument `name` (token ids, parents, counts, offsets) as a contiguous int32 numpy array, checked
    (specdec/_args.py): no copy when it already is one."""
    return _args.integers(name, x, "int32", what=what, **bounds)


def _trees(name: str, trees) -> list:
    """A DraftTree or a sequence of them, as a list (anything else a TypeError naming `name`)."""
    if isinstance(trees, DraftTree):
        return [trees]
    try:
        listed = list(trees)
    except TypeError:
        raise TypeError(f"{name}: expected a DraftTree or a sequence of them; got {type(trees).__name__}") from None
    for t in listed:
        if not isinstance(t, DraftTree):
            raise TypeError(f"{name}: expected a DraftTree or a sequence of them; got a sequence holding {type(t).__name__}")
    return listed


def _tree_arrays(trees) -> list:
    return [t._arrays(f"trees[{i}]") for i, t in enumerate(_trees("trees", trees))]


# ---- draft trees --------------------------------------------------------------------------------------


@dataclass
class DraftTree:
    """A draft tree in specdec's form (``specdec::draft_tree``): ``token[i]``, ``parent[i]`` (-1 for the
    root, node 0; parents come before children), ``depth[i]`` (int32) and ``score[i]`` (float32: the
    drafter's score, e.g. a cumulative log-probability or a suffix draft's probability), each ``[n]``.
    Node i's target row is the distribution of the token after node i.

    The constructors here and every function that returns a tree give host numpy arrays. A tree built
    by hand may hold lists, numpy arrays of any integer dtype or CPU torch tensors: they are converted to
    int32 (checked, never wrapped) where a method reads them, and a bad field raises ``TypeError`` (not
    integers) or ``ValueError`` (out of int32's range, another number of dimensions) naming it
    (``tree.token``, or ``trees[2].parent`` in a list of trees). A malformed tree (lengths that differ, a
    parent at or after its child, a wrong depth) is a ``ValueError`` naming the first bad node.
    """

    token: np.ndarray
    parent: np.ndarray
    depth: np.ndarray
    score: np.ndarray

    @staticmethod
    def from_parents(tokens, parents, vocab_size: int = 0) -> "DraftTree":
        """A tree from tokens and parents (depths computed, scores zero), validated.

        ``tokens``: token ids ``[n]`` (n >= 1; a list, or a host array or CPU tensor of an integer
        dtype), node 0 the root. ``parents``: ``[n]``, -1 for node 0, every other parent an earlier node.
        ``vocab_size``: when > 0, every token must be in [0, vocab_size). Returns a :class:`DraftTree` of
        numpy arrays. Raises ``TypeError`` (entries that are not integers) or ``ValueError`` (an entry
        past int32, lengths that differ, a malformed tree, a token out of range)."""
        return DraftTree(*_specdec.make_tree(_int32("tokens", tokens), _int32("parents", parents, "parents"),
                                             _args.integer("vocab_size", vocab_size)))

    @staticmethod
    def chain(root: int, tokens) -> "DraftTree":
        """The root followed by ``tokens`` as a chain (prompt lookup's and vLLM's drafts).

        ``root``: the committed token id (an int in [0, 2^31 - 1]). ``tokens``: the drafted token ids
        ``[n]`` (a list, or a host array or CPU tensor of an integer dtype). Returns a :class:`DraftTree`
        of ``n + 1`` nodes. Raises ``TypeError`` (not integers) or ``ValueError`` (a token negative or
        past int32)."""
        t = _int32("tokens", tokens)
        r = _args.integer("root", root, 0, _args.INT32_MAX, " (a token id)")
        return DraftTree.from_parents(np.concatenate([np.array([r], dtype=np.int32), t]), np.arange(-1, len(t), dtype=np.int32))

    @property
    def size(self) -> int:
        """The number of nodes n, the root included (``len(token)``, read as int32 token ids)."""
        return len(_int32("tree.token", self.token))

    @property
    def max_depth(self) -> int:
        """The largest node depth (0 for the root alone, or for no nodes)."""
        depth = _int32("tree.depth", self.depth, "depths")
        return int(depth.max()) if len(depth) else 0

    def _arrays(self, name: str = "tree"):
        """(token, parent, depth) as int32 arrays, checked; errors name `name`'s fields ("trees[2].token")."""
        return (_int32(f"{name}.token", self.token), _int32(f"{name}.parent", self.parent, "parents"),
                _int32(f"{name}.depth", self.depth, "depths"))

    def validate(self, vocab_size: int = 0) -> None:
        """Checks the tree (specdec::validate): at least the root, equal lengths, node 0 the only root
        (parent -1, depth 0), every parent before its child, depth = the parent's + 1, and with
        ``vocab_size`` > 0 every token in [0, vocab_size). Returns None. Raises ``ValueError`` naming the
        first malformed node, or ``TypeError`` / ``ValueError`` naming a field that is not int32
        integers."""
        _specdec.validate_tree(*self._arrays(), _args.integer("vocab_size", vocab_size))

    def mask(self, prefix_length: int = 0, dtype=np.bool_, additive: bool = False, out=None):
        """The tree-attention mask ``[n x (prefix_length + n)]``: node i attends the whole prefix, itself
        and its ancestors (specdec::tree_mask_dense / tree_mask_additive).

        ``prefix_length``: the cached positions before the root, an int >= 0. ``dtype``: bool (default),
        uint8, float32 or float64 (1 / 0); with ``additive`` (a bool) the mask is float (float32 unless
        ``dtype`` is float64), 0 where attention is allowed and -inf elsewhere. ``out``: optional host
        array ``[n, prefix_length + n]`` (numpy or CPU torch, C-contiguous, writable) of one of those
        dtypes (float32 / float64 with ``additive``), written instead of a new one; ``dtype`` is then
        ignored. Returns the mask (``out``, or a new numpy array). Raises ``TypeError`` (a ``dtype`` or an
        ``out`` of another dtype, the dtype named) or ``ValueError`` (a negative or too large
        ``prefix_length``, ``out``'s shape, strides or writability, a malformed tree)."""
        arrays = self._arrays()
        n = len(arrays[0])
        prefix_length = _args.size("prefix_length", prefix_length)
        additive = _args.flag("additive", additive)
        if out is None:
            asked = dtype
            try:
                dtype = np.dtype(np.float32 if additive and dtype is np.bool_ else dtype)
            except TypeError:
                dtype = None
            allowed = ("float32", "float64") if additive else ("bool", "uint8", "float32", "float64")
            if dtype is None or dtype.name not in allowed:
                got = dtype.name if dtype is not None else repr(asked)
                raise TypeError(f"dtype: expected {', '.join(allowed)}{' (an additive mask)' if additive else ''}; got {got}")
            out = np.empty(_args.elements("prefix_length", (n, prefix_length + n)), dtype=dtype)
        _specdec.tree_mask_dense(*arrays, prefix_length, out, additive)
        return out

    def mask_packed_int32(self) -> np.ndarray:
        """TensorRT-LLM's packed mask: a new numpy int32 array ``[n, ceil(n / 32)]``, bit b of word w of
        row i set iff node i attends node 32 w + b (itself or an ancestor). Raises ``ValueError`` on a
        malformed tree."""
        arrays = self._arrays()
        n = len(arrays[0])
        out = np.empty((n, (n + 31) // 32), dtype=np.int32)
        _specdec.tree_mask_packed_int32(*arrays, out)
        return out

    def mask_bitpacked_rows(self) -> np.ndarray:
        """SGLang's QLEN_ONLY_BITPACKING rows: a new numpy array ``[n]``, one item per node (uint8 /
        uint16 / uint32 for n <= 8 / 16 / 32), bit j set iff node i attends tree node j. Raises
        ``ValueError`` on a malformed tree or one of more than 32 nodes."""
        arrays = self._arrays()
        n = len(arrays[0])
        dtype = np.uint8 if n <= 8 else np.uint16 if n <= 16 else np.uint32
        out = np.empty(n, dtype=dtype)
        _specdec.tree_mask_bitpacked_rows(*arrays, out)
        return out

    def positions(self, prefix_length: int) -> np.ndarray:
        """Per-node positions ``prefix_length + depth``: a new numpy int64 array ``[n]``, the root at
        ``prefix_length`` (an int >= 0). Raises ``TypeError`` (not an integer) or ``ValueError`` (a
        negative ``prefix_length``, a malformed tree)."""
        return _specdec.tree_positions(*self._arrays(), _args.integer("prefix_length", prefix_length))

    def retrieve_paths(self, order: str = "node_index") -> np.ndarray:
        """Root-to-leaf paths: a new numpy int32 array ``[leaves, max_depth + 1]``, each row the node
        indices from the root (column 0 is 0) to a leaf, padded with -1. ``order``: the rows' order,
        ``"node_index"`` (leaves ascending: EAGLE-2), ``"lexicographic"`` (EAGLE-1, TensorRT-LLM) or
        ``"reverse_node_index"`` (Medusa). Raises ``TypeError`` (``order`` not a string) or
        ``ValueError`` (another string, a malformed tree)."""
        orders = {"node_index": 0, "lexicographic": 1, "reverse_node_index": 2}
        return _specdec.retrieve_paths(*self._arrays(), orders[_args.choice("order", order, tuple(orders))])

    def child_links(self):
        """``(first_child, next_sibling)``: new numpy int32 arrays ``[n]``, node i's lowest-index child and
        the next child of i's parent after i, -1 for none (SGLang's retrive_next_token /
        retrive_next_sibling). Raises ``ValueError`` on a malformed tree."""
        return _specdec.child_links(*self._arrays())


# ---- prompt lookup ---------------------------------------------------------------------------------------


def propose_ngram(history, length: int, *, max_ngram: int = 3, min_ngram: int = 2, branches: int = 1,
                  max_history: int = 0) -> DraftTree:
    """Prompt lookup (llama.cpp's ngram-simple, vLLM's n-gram proposer, transformers'
    ``prompt_lookup_num_tokens``): the longest suffix of ``history`` (``max_ngram`` down to ``min_ngram``
    tokens) that occurred before proposes the ``length`` tokens that followed it; with ``branches`` > 1
    the most recent distinct continuations merge into one tree. Rooted at ``history[-1]``; the root alone
    when nothing matches. Only the last ``max_history`` tokens are searched (0: all).

    ``history``: the token ids so far ``[t]`` (t >= 1; a list, or a host array or CPU tensor of an integer
    dtype; an int32 numpy array is read in place). The other arguments are ints. Returns a
    :class:`DraftTree` (numpy arrays). Raises ``TypeError`` (not integers) or ``ValueError`` (a token
    past int32, an empty history, options out of range: ``1 <= min_ngram <= max_ngram``, ``branches``
    >= 1, ``length`` and ``max_history`` >= 0)."""
    return DraftTree(*_specdec.propose_ngram(_int32("history", history), _args.integer("length", length),
                                             _args.integer("max_ngram", max_ngram), _args.integer("min_ngram", min_ngram),
                                             _args.integer("branches", branches), _args.integer("max_history", max_history)))


def ngram_match_length(history, *, max_ngram: int = 3, min_ngram: int = 2, max_history: int = 0) -> int:
    """The suffix length prompt lookup would match (0: none), a draft's quality known before verifying it.

    ``history``, ``max_ngram``, ``min_ngram`` and ``max_history`` as :func:`propose_ngram`'s (an empty
    history matches nothing: 0). Returns an int. Raises ``TypeError`` (not integers) or ``ValueError``
    (a token past int32, options out of range)."""
    return _specdec.ngram_match_length(_int32("history", history), _args.integer("max_ngram", max_ngram),
                                       _args.integer("min_ngram", min_ngram), _args.integer("max_history", max_history))


# ---- EAGLE-2 ------------------------------------------------------------------------------------------


def _eagle2_config(top_k, depth, total_tokens, batch) -> tuple:
    """An EAGLE-2 builder's sizes, integers (the C++ side checks their ranges before allocating)."""
    return (_args.integer("top_k", top_k), _args.integer("depth", depth), _args.integer("total_tokens", total_tokens),
            _args.integer("batch", batch))


def _d2t(d2t) -> list:
    """EAGLE-3's draft-to-target offsets, one int32 per draft token (none: the identity)."""
    return [] if d2t is None else _int32("d2t", d2t, "offsets").tolist()


@dataclass
class DynamicTree:
    """A finished EAGLE-2 selection for one request (:meth:`Eagle2TreeBuilder.finish`), host numpy arrays:
    ``tree``, a :class:`DraftTree` of ``total_tokens`` nodes (scores cumulative); ``selected`` int32
    ``[total_tokens - 1]``, the candidates' flat indices (EAGLE's / SGLang's ``top_scores_index``); and
    ``parent_list`` int32 ``[1 + depth top_k]`` (SGLang's ``organize_draft_results``; empty when depth is
    0)."""

    tree: DraftTree
    selected: np.ndarray
    parent_list: np.ndarray


class Eagle2TreeBuilder:
    """EAGLE-2's dynamic top-k tree, step by step, for ``batch`` requests (specdec::eagle2_tree_builder).

    ``begin(root_logits, root_tokens)`` takes the drafter's logits after each request's committed token
    (``[batch x V']`` float32) and returns the frontier (a ``DraftStep``: ``input_ids``, ``frontier``,
    ``parent_slot`` ``[batch x top_k]``, ``draft_mask`` ``[batch x top_k x top_k (step + 1)]``,
    ``attention_mask(prefix_length, request)``, ``positions(root_position, request)``); the engine runs
    its drafter on ``input_ids`` and calls ``expand(frontier_logits)`` (``[batch top_k x V']``) ``depth``
    times; ``finish()`` reranks every candidate and returns one :class:`DynamicTree` per request with
    ``total_tokens`` nodes. ``score`` ``"log_probability"`` (EAGLE-2/3) or ``"probability"`` (SGLang);
    ``d2t`` EAGLE-3's reduced-vocabulary offsets (target id = t + d2t[t]). Threads may share a builder:
    its steps are serialised by the builder's lock.

    Every array is on the host (numpy or CPU torch; a CUDA tensor is a ``ValueError``: see
    :class:`Eagle2BatchBuilder`). ``top_k`` (1 <= k <= 46340, and at most V' at ``begin``), ``depth`` (>= 0),
    ``total_tokens`` (1 <= T <= 1 + k + depth k^2) and ``batch`` (>= 1) are ints; ``score`` a string;
    ``d2t`` None or one int per draft token (a list or integer array), each t + d2t[t] in [0, 2^31 - 1].
    The constructor raises ``TypeError`` (not an integer, not a string) or ``ValueError`` (a value out of
    range, another ``score``).
    """

    def __init__(self, top_k: int = 10, depth: int = 5, total_tokens: int = 60, *, batch: int = 1,
                 score: str = "log_probability", d2t=None):
        _args.choice("score", score, ("log_probability", "probability"))
        top_k, depth, total_tokens, batch = _eagle2_config(top_k, depth, total_tokens, batch)
        self._builder = _specdec.Eagle2Builder(top_k, depth, total_tokens, score == "probability", _d2t(d2t), batch)
        self._rows, self._vocab = top_k * batch, None  # a frontier's logits: [batch top_k x V'], V' once begun

    def begin(self, root_logits, root_tokens, target_vocab: int = 0):
        """Starts a build (discarding any build in progress) from each request's root.

        ``root_logits``: float32 ``[batch, V']``, the drafter's logits after each request's committed
        token (host, C-contiguous). ``root_tokens``: the committed token ids ``[batch]`` (a list or an
        integer array; a single int for one request). ``target_vocab``: an int; when > 0 the root tokens
        and every drafted token (mapped through ``d2t``) must be in [0, target_vocab). Returns the first
        frontier, a ``DraftStep`` of host numpy arrays: ``step`` (0), ``top_k``, ``batch``, ``input_ids``
        (the frontier's target token ids), ``frontier`` (their flat candidate indices) and
        ``parent_slot`` (-1 at step 0), each int32 ``[batch, top_k]``; ``draft_mask`` uint8 ``[batch,
        top_k, top_k (step + 1)]``; ``attention_mask(prefix_length, request=0)``, uint8 ``[top_k,
        prefix_length + top_k (step + 1)]`` (the request's cached draft positions, then ``draft_mask``);
        ``positions(root_position, request=0)``, int64 ``[top_k]`` (``root_position + 1 + step``). Raises
        ``TypeError`` (``root_logits`` not a float32 array, tokens not integers) or ``ValueError``
        (shapes, strides or device; ``top_k`` > V'; NaN or +inf in a row; a token out of range)."""
        self._vocab = None  # a refused begin leaves no build (nor its vocabulary)
        step = self._builder.begin(root_logits, _int32("root_tokens", root_tokens, scalar=True),
                                   _args.integer("target_vocab", target_vocab))
        self._vocab = int(root_logits.shape[1])
        return step

    def expand(self, frontier_logits):
        """One expansion: each frontier node's ``top_k`` best children become candidates, and the
        ``top_k`` best of those (by cumulative score) the next frontier.

        ``frontier_logits``: float32 ``[batch top_k, V']``, row ``b top_k + r`` the drafter's logits
        after frontier slot r of request b (host, C-contiguous). Returns the next frontier, a
        ``DraftStep`` as :meth:`begin`'s (``step`` one more; unused after the last expansion). Raises
        ``TypeError`` (not a float32 array) or ``ValueError`` (shape, strides or device; NaN or +inf in a
        row; a mapped token out of range; called before :meth:`begin` or after ``depth`` expansions)."""
        return self._builder.expand(frontier_logits)

    def expand_dual(self, left_logits, right_logits):
        """Jakiro's penultimate dual-head step, consuming the last two expansions: ``left_logits`` drive
        this expansion as :meth:`expand`'s logits do, and the top-k of ``right_logits`` (the right head's,
        for the same frontier) become the children of the frontier just selected, slot for slot.

        ``left_logits``, ``right_logits``: float32 ``[batch top_k, V']`` each (host, C-contiguous).
        Returns the ``DraftStep`` after both (``step`` two more). Raises ``TypeError`` (not a float32
        array) or ``ValueError`` (a shape, ``right_logits`` of another shape than ``left_logits``, NaN or
        +inf, called when not exactly two expansions remain)."""
        _dual_shapes(left_logits, right_logits, self._rows, self._vocab)
        return self._builder.expand_dual(left_logits, right_logits)

    def finish(self) -> List[DynamicTree]:
        """Reranks every candidate of every request and returns one :class:`DynamicTree` per request (a
        list of ``batch``), each with ``total_tokens`` nodes: the root and the best candidates in
        ascending flat index (EAGLE's ``topK_genrate`` order). The build stays: ``finish`` may be called
        again. Raises ``ValueError`` before :meth:`begin` or before all ``depth`` expansions."""
        return [DynamicTree(DraftTree(t, p, d, s), sel, pl) for t, p, d, s, sel, pl in self._builder.finish()]

    @property
    def steps_done(self) -> int:
        """Expansions done since :meth:`begin` (0 after it; ``expand_dual`` counts two)."""
        return self._builder.steps_done


def _dual_shapes(left_logits, right_logits, rows: int, vocab) -> None:
    """expand_dual's two heads are each ``[rows x vocab]`` (vocab: the build's draft vocabulary, None
    before begin): the head of another shape is named (the builders word both as "logits"). Arrays that
    are not 2-D are left to the call, which names them."""
    shapes = [tuple(int(e) for e in getattr(a, "shape", ())) for a in (left_logits, right_logits)]
    if any(len(shape) != 2 for shape in shapes):
        return
    for name, shape in zip(("left_logits", "right_logits"), shapes):
        if shape[0] != rows or (vocab is not None and shape[1] != vocab):
            raise ValueError(f"{name}: expected shape ({rows}, {'*' if vocab is None else vocab}) (batch * top_k frontier rows of "
                             f"the draft vocabulary); got {shape}")
    if shapes[0] != shapes[1]:
        raise ValueError(f"right_logits: expected left_logits' shape {shapes[0]}; got {shapes[1]}")


@dataclass
class Eagle2BatchStep:
    """The frontier after a step of :class:`Eagle2BatchBuilder`, arrays where the builder runs: ``step``
    (0 after begin, then the expansions done), ``input_ids`` (the frontier's target token ids),
    ``frontier`` (their flat candidate indices), ``parent_slot`` (the previous frontier slot each came
    from, -1 at step 0), each int32 ``[batch, top_k]``; ``draft_mask`` uint8 ``[batch * top_k, top_k *
    (step + 1)]`` (request b's rows are ``b * top_k ..``: the draft-side tree mask over the nodes drawn so
    far)."""

    step: int
    input_ids: object
    frontier: object
    parent_slot: object
    draft_mask: object


@dataclass
class Eagle2BatchTrees:
    """The trees of :meth:`Eagle2BatchBuilder.finish`, one row per request, ``T = total_tokens`` columns:
    ``tokens`` / ``parents`` int32 ``[batch, T]`` (node 0 the root, parent -1; the ``tokens`` / ``parents`` of
    :func:`verify_tree_batch`), ``depths`` int32 ``[batch, T]``, ``scores`` float32 ``[batch, T]`` (cumulative
    log-probabilities), ``selected`` int32 ``[batch, T - 1]`` (the flat candidate indices, EAGLE's
    ``top_scores_index``)."""

    tokens: object
    parents: object
    depths: object
    scores: object
    selected: object


class Eagle2BatchBuilder:
    """EAGLE-2's / EAGLE-3's / Jakiro's dynamic tree for ``batch`` requests with every array where the
    drafter's logits live (specdec::eagle2_batch_builder): host arrays, or CUDA tensors on ``device``
    (``"cuda"``, ``"cuda:1"``, a ``torch.device`` or an index), where each step is a top-k launch and one
    kernel (one block per request) on the current stream, with no copy to the host: drafting and
    :func:`verify_tree_batch` never leave the GPU. The protocol is :class:`Eagle2TreeBuilder`'s
    (``begin(root_logits, root_tokens)``, ``expand(frontier_logits)`` ``depth`` times or ``expand_dual``
    for Jakiro's last two, ``finish()``), with log-probability scores; the frontier, masks and trees are
    :class:`Eagle2TreeBuilder`'s, bit for bit. Each step's arrays are fresh (the builder's own buffers are
    overwritten by the next step); ``finish()`` returns :class:`Eagle2BatchTrees`. ``d2t``: EAGLE-3's
    reduced-vocabulary offsets (target id = t + d2t[t]). Errors: ``TypeError`` for an argument of the
    wrong kind or dtype, ``ValueError`` naming the argument (a data fault on the device when the step's
    kernels are checked, as every device call is).

    ``top_k``, ``depth``, ``total_tokens``, ``batch`` and ``d2t`` as :class:`Eagle2TreeBuilder`'s.
    ``device``: None or ``"cpu"`` (the host), ``"cuda"`` (the current device), ``"cuda:N"``, a
    ``torch.device`` or an index N; every logits array of the build must then be in that memory. The
    constructor raises ``TypeError`` / ``ValueError`` as :class:`Eagle2TreeBuilder`'s, and ``ValueError``
    for another device string or a CUDA device in a CPU-only build."""

    def __init__(self, top_k: int = 10, depth: int = 5, total_tokens: int = 60, *, batch: int = 1, d2t=None,
                 device=None):
        self._device = _cuda_index(device)
        self._top_k, self._depth, self._total, self._batch = _eagle2_config(top_k, depth, total_tokens, batch)
        self._builder = _specdec.Eagle2Batch(self._top_k, self._depth, self._total, self._batch, _d2t(d2t), self._device)
        self._like = None
        self._step = -1
        # _like and _step are this object's Python state, read and advanced around each native step: one
        # step at a time (the native builder serialises its own state too).
        self._lock = threading.Lock()

    def _step_arrays(self, step: int, like=None):
        """A step's four output arrays of `like`'s kind and device (the build's logits by default)."""
        b, k = self._batch, self._top_k
        like = self._like if like is None else like
        if like is None:  # expand before begin: the builder refuses it by name
            like = np.empty(0, dtype=np.float32)
        return [_empty(like, (b, k), "int32") for _ in range(3)] + [_empty(like, (b * k, k * (step + 1)), "uint8")]

    def _tokens_here(self, root_tokens, like):
        if self._device < 0:
            return _int32("root_tokens", root_tokens, scalar=True)
        return _args.device_integers("root_tokens", root_tokens, "int32", like, scalar=True, what="token ids")

    def begin(self, root_logits, root_tokens, target_vocab: int = 0) -> Eagle2BatchStep:
        """Starts a build (discarding any build in progress) from each request's root.

        ``root_logits``: float32 ``[batch, V']``, C-contiguous, in the builder's memory (numpy or CPU
        torch for a host builder, a CUDA tensor on its device). ``root_tokens``: the committed token ids
        ``[batch]`` (a list, an integer array, or a tensor; moved to the device as int32, range-checked).
        ``target_vocab``: an int; when > 0 root tokens and mapped draft tokens must be in [0,
        target_vocab). Returns an :class:`Eagle2BatchStep` (step 0) of ``root_logits``' kind and device.
        Raises ``TypeError`` (not an array, another dtype, tokens not integers) or ``ValueError``
        (shapes, strides, device, ``top_k`` > V', NaN or +inf in a row, a token out of range)."""
        if not hasattr(root_logits, "shape"):
            _args.shape("root_logits", root_logits)
        target_vocab = _args.integer("target_vocab", target_vocab)
        with self._lock:
            out = self._step_arrays(0, root_logits)
            tokens = self._tokens_here(root_tokens, root_logits)
            self._builder.begin(root_logits, tokens, target_vocab, *out, _stream(root_logits))
            self._like, self._step = root_logits, 0
            return Eagle2BatchStep(0, *out)

    def expand(self, frontier_logits) -> Eagle2BatchStep:
        """One expansion, as :meth:`Eagle2TreeBuilder.expand`. ``frontier_logits``: float32 ``[batch
        top_k, V']`` in the builder's memory (row ``b top_k + r``: frontier slot r of request b). Returns
        the next :class:`Eagle2BatchStep`. Raises ``TypeError`` (not a float32 array) or ``ValueError``
        (shape, strides, device, NaN or +inf, a mapped token out of range, called before :meth:`begin`
        or after ``depth`` expansions)."""
        with self._lock:
            self._began("frontier_logits", "expand")
            out = self._step_arrays(self._step + 1)
            self._builder.expand(frontier_logits, *out, self._step + 1, _stream(frontier_logits))
            self._step += 1
            return Eagle2BatchStep(self._step, *out)

    def expand_dual(self, left_logits, right_logits) -> Eagle2BatchStep:
        """Jakiro's penultimate dual-head step, consuming the last two expansions, as
        :meth:`Eagle2TreeBuilder.expand_dual`. ``left_logits``, ``right_logits``: float32 ``[batch top_k,
        V']`` each, in the builder's memory. Returns the :class:`Eagle2BatchStep` after both. Raises
        ``TypeError`` (not a float32 array) or ``ValueError`` (shapes, devices, NaN or +inf, called when
        not exactly two expansions remain)."""
        with self._lock:
            self._began("left_logits", "expand_dual")
            _dual_shapes(left_logits, right_logits, self._batch * self._top_k, int(self._like.shape[1]))
            out = self._step_arrays(self._step + 2)
            self._builder.expand_dual(left_logits, right_logits, *out, self._step + 2, _stream(left_logits))
            self._step += 2
            return Eagle2BatchStep(self._step, *out)

    def finish(self) -> Eagle2BatchTrees:
        """Reranks every request's candidates and returns the trees as :class:`Eagle2BatchTrees`, arrays of
        the logits' kind and device. Raises ``ValueError`` before :meth:`begin` or before all ``depth``
        expansions."""
        with self._lock:
            b, t = self._batch, self._total
            like = self._like if self._like is not None else np.empty(0, dtype=np.float32)
            arrays = [_empty(like, (b, t), "int32"), _empty(like, (b, t), "int32"), _empty(like, (b, t), "int32"),
                      _empty(like, (b, t), "float32"), _empty(like, (b, max(t - 1, 0)), "int32")]
            self._builder.finish(*arrays, _stream(like))
            return Eagle2BatchTrees(*arrays)

    @property
    def steps_done(self) -> int:
        """Expansions done since :meth:`begin` (0 after it, and before it; ``expand_dual`` counts two)."""
        with self._lock:
            return max(self._step, 0)

    def _began(self, name: str, method: str) -> None:
        """An expansion before any begin: refused by the builder's words, not as a step count (the arrays
        sized for step 0 would be blamed)."""
        if self._step < 0:
            raise ValueError(f"{name}: specdec::eagle2_batch_builder::{method}: called before begin()")


def _is_torch_tensor(x) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def _cuda_index(device) -> int:
    """-1 for the host (None, "cpu"), else the CUDA device's index ("cuda" is the current one)."""
    if device is None:
        return -1
    if isinstance(device, (int, np.integer)) and not isinstance(device, (bool, np.bool_)):
        return _args.integer("device", device, 0, _args.INT32_MAX)
    text = str(device)
    if text == "cpu":
        return -1
    if text == "cuda":
        import torch

        return int(torch.cuda.current_device())
    if text.startswith("cuda:") and text[5:].isdigit():
        return _args.integer("device", int(text[5:]), 0, _args.INT32_MAX)
    raise ValueError(f"device: expected None, 'cpu', 'cuda', 'cuda:N' or an index; got {device!r}")
