# SPDX-License-Identifier: Apache-2.0
"""SuffixDecoding (C++: specdec/tree/suffix*.hpp) under Arctic Inference's names: ``SuffixTree``,
``SuffixDecodingCache`` and the drafts they return (``SuffixDecodingDraft``)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Hashable, List, Optional

import numpy as np

from . import _args, _specdec
from .tree import DraftTree, _int32

__all__ = ["SuffixTree", "SuffixDecodingDraft", "SuffixDecodingCache"]


# ---- SuffixDecoding --------------------------------------------------------------------------------------


@dataclass
class SuffixDecodingDraft:
    """A suffix draft as Arctic Inference's ``SuffixDecodingDraft``: ``token_ids[i]``'s parent is
    ``token_ids[parents[i]]`` (-1: a child of the context's last token), ``probs`` the empirical
    probabilities, ``score`` their sum, ``match_len`` the matched context length."""

    token_ids: List[int] = field(default_factory=list)
    parents: List[int] = field(default_factory=list)
    probs: List[float] = field(default_factory=list)
    score: float = 0.0
    match_len: int = 0

    def tree(self, root: int) -> DraftTree:
        """The draft as a :class:`DraftTree` rooted at ``root`` (the last committed token), breadth-first,
        each level in the draft's order, scores the probabilities (specdec::suffix_draft_tree)."""
        return DraftTree(*_specdec.suffix_draft_tree(
            _args.integer("root", root, 0, _args.INT32_MAX, " (a token id)"), _int32("token_ids", self.token_ids),
            _int32("parents", self.parents, "parents"), _args.reals("probs", self.probs)))


def _seq_id(seq_id) -> int:
    return _args.integer("seq_id", seq_id, 0, _args.INT32_MAX, " (sequence ids are int32)")


def _speculation(max_spec_tokens, max_spec_factor, max_spec_offset, min_token_prob, use_tree_spec) -> tuple:
    """A suffix draft's options, checked (the C++ side checks their values)."""
    return (_args.integer("max_spec_tokens", max_spec_tokens), _args.real("max_spec_factor", max_spec_factor),
            _args.real("max_spec_offset", max_spec_offset), _args.real("min_token_prob", min_token_prob),
            _args.flag("use_tree_spec", use_tree_spec))


def _token_array(name: str, tokens) -> np.ndarray:
    """Argument `name` of the ``*_ndarray`` methods: a 1-D integer array (numpy, or a CPU torch tensor),
    as the C-contiguous int32 array the C++ side reads. A contiguous int32 array is passed as it is; any
    other integer dtype (int64, uint8, ...) or a strided view is range-checked, then copied (no Python
    list on the way). Not an array (a list, a tuple): ``TypeError``, as Arctic Inference's nanobind
    signature refuses it; a float or bool dtype: ``TypeError``; not 1-D: ``ValueError``; an entry
    outside int32: ``ValueError``. Each message names `name`."""
    if isinstance(tokens, np.ndarray) and tokens.dtype == np.int32 and tokens.ndim == 1:
        return tokens if tokens.flags.c_contiguous else np.ascontiguousarray(tokens)
    if not (hasattr(tokens, "shape") and hasattr(tokens, "dtype")):
        raise TypeError(f"{name}: expected a 1-D integer array (numpy int32 or int64, or a CPU tensor); got "
                        f"{type(tokens).__name__} (the list form is the method without _ndarray)")
    a = _args._host(name, tokens)
    if a.dtype.kind not in "iu" and not (a.size == 0 and a.dtype.kind in "fb"):
        raise TypeError(f"{name}: expected a 1-D integer array (int32, int64 or another integer dtype); got dtype {a.dtype}")
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array; got shape {a.shape}")
    return _int32(name, a)


class SuffixTree:
    """Arctic Inference's ``SuffixTree``: every suffix of every stored sequence (int ids >= 0), cut to
    ``max_depth`` tokens, with occurrence counts. Drafts are Arctic Inference 0.3.0's bit for bit. Its
    calls hold the GIL throughout: threads sharing a tree are serialised.

    Arctic Inference's methods, each under its name: ``num_seqs``, ``extend`` / ``extend_ndarray``,
    ``remove``, ``speculate`` / ``speculate_ndarray``, ``check_integrity``, ``estimate_memory``; plus
    ``append`` and ``max_depth``. Tokens are int32 values (any, negative included); the list forms take
    any sequence or array of integers, the ``_ndarray`` forms only arrays (as Arctic Inference's do)."""

    def __init__(self, max_depth: int):
        """An empty tree. ``max_depth`` (int, 1 .. 65536): the longest suffix stored, so the longest match
        plus draft. ``TypeError`` when it is not an integer, ``ValueError`` when out of range."""
        self._tree = _specdec.SuffixTree(_args.integer("max_depth", max_depth))

    @property
    def max_depth(self) -> int:
        """The depth the tree was made with (specdec's addition)."""
        return self._tree.max_depth

    def num_seqs(self) -> int:
        """The number of stored sequences (an extend with no tokens stores none)."""
        return self._tree.num_sequences

    def extend(self, seq_id: int, tokens) -> None:
        """Appends ``tokens`` to sequence ``seq_id`` (created on first use; none by an empty ``tokens``),
        one token at a time: O(max_depth) per token.

        ``seq_id``: an int in [0, 2^31). ``tokens``: the token ids, a sequence of ints or a 1-D array of
        any integer dtype (a contiguous int32 array is read in place, anything else converted).
        ``TypeError``: ``seq_id`` not an integer, ``tokens`` not integers (floats, bools, strings).
        ``ValueError``: ``seq_id`` out of range, ``tokens`` not 1-D or an entry outside int32. Nothing is
        stored when it raises."""
        self._tree.extend(_seq_id(seq_id), _int32("tokens", tokens))

    def extend_ndarray(self, seq_id: int, tokens) -> None:
        """``extend`` for an array, as Arctic Inference's ``extend_ndarray(seq_id, tokens)``: the same
        tree as ``extend(seq_id, tokens.tolist())``, without the list.

        ``tokens``: a 1-D integer array, numpy (or a CPU torch tensor): int32 contiguous is read in
        place; int64 or any other integer dtype, and strided views (``a[::2]``, ``a[::-1]``), are
        range-checked and copied to int32. ``TypeError``: ``tokens`` not an array (a list: use
        ``extend``), a float or bool dtype (Arctic Inference's nanobind cast would truncate 2.7 to 2);
        ``seq_id`` not an integer. ``ValueError``: ``tokens`` not 1-D, an entry outside int32 (never
        wrapped), ``seq_id`` outside [0, 2^31). Nothing is stored when it raises."""
        self._tree.extend(_seq_id(seq_id), _token_array("tokens", tokens))

    def append(self, seq_id: int, token: int) -> None:
        """Appends one token to sequence ``seq_id`` (specdec's addition; Arctic Inference's C++ has it,
        its module does not bind it). Raises as ``extend``, naming ``token``."""
        self._tree.extend(_seq_id(seq_id), _int32("token", token, scalar=True))

    def remove(self, seq_id: int) -> None:
        """Removes sequence ``seq_id`` and every suffix of it: O(length x max_depth). Nothing happens when
        it is not stored. ``TypeError`` / ``ValueError`` when ``seq_id`` is not an int in [0, 2^31)."""
        self._tree.remove(_seq_id(seq_id))

    def speculate(self, context, max_spec_tokens: int, max_spec_factor: float = 1.0, max_spec_offset: float = 0.0,
                  min_token_prob: float = 0.1, use_tree_spec: bool = False) -> SuffixDecodingDraft:
        """The draft after ``context`` (the committed tokens; the last is the draft's root), as Arctic
        Inference's ``speculate``. For each match length m = 1 .. len(context) - 1 whose last m context
        tokens occur in the tree, at most min(max_spec_tokens, int(m x max_spec_factor +
        max_spec_offset)) tokens are drafted from where they end: the most frequent continuation
        (``use_tree_spec`` False) or a tree grown best-first by probability (True), continuations whose
        probability (child count / parent count, multiplied along the path) is below ``min_token_prob``
        left out; the highest score wins, the longer match on ties.

        ``context``: token ids, a sequence or any 1-D integer array. ``max_spec_tokens``: an int in
        [0, 2^24]. The three reals: finite numbers (computed in float32, as Arctic Inference's).
        Returns a :class:`SuffixDecodingDraft` (``token_ids``, ``parents``, ``probs`` lists, ``score``,
        ``match_len``; empty with ``match_len`` 0 when nothing matches or the context has fewer than two
        tokens). ``TypeError``: an argument of the wrong kind (a float where an int is expected, float
        tokens); ``ValueError``: a value out of range (a non-finite real, a negative
        ``max_spec_tokens``, a token outside int32, ``context`` not 1-D)."""
        return SuffixDecodingDraft(*self._tree.speculate(_int32("context", context), *_speculation(
            max_spec_tokens, max_spec_factor, max_spec_offset, min_token_prob, use_tree_spec)))

    def speculate_ndarray(self, context, max_spec_tokens: int, max_spec_factor: float = 1.0,
                          max_spec_offset: float = 0.0, min_token_prob: float = 0.1,
                          use_tree_spec: bool = False) -> SuffixDecodingDraft:
        """``speculate`` for an array, as Arctic Inference's ``speculate_ndarray(context, max_spec_tokens,
        max_spec_factor, max_spec_offset, min_token_prob, use_tree_spec)``: the same draft as
        ``speculate(context.tolist(), ...)``, without the list. Arctic Inference's takes all six
        positionally and returns its native ``Draft``; this one has ``speculate``'s defaults and
        keywords and returns a :class:`SuffixDecodingDraft` with the same five fields (lists, a float,
        an int).

        ``context``: a 1-D integer array as ``extend_ndarray``'s ``tokens`` (int32 contiguous read in
        place, other integer dtypes and strided views range-checked and copied). Raises as
        ``speculate``, and ``TypeError`` when ``context`` is not an array (a list: use ``speculate``) or
        has a float or bool dtype."""
        return SuffixDecodingDraft(*self._tree.speculate(_token_array("context", context), *_speculation(
            max_spec_tokens, max_spec_factor, max_spec_offset, min_token_prob, use_tree_spec)))

    def check_integrity(self) -> str:
        """An empty string when every invariant holds (counts, sibling order, node slices, endpoints),
        else the first violation. O(stored tokens x max_depth): for tests and debugging."""
        return self._tree.check_integrity()

    def estimate_memory(self) -> int:
        """The bytes this tree occupies, an int: specdec's own footprint, not Arctic Inference's
        formula. The sum (C++ ``suffix_tree::memory_bytes``) of the tree object and the capacity of
        every array and table it holds: nodes, count runs, endpoints, the child and endpoint hash
        tables, each sequence's tokens and active-node ring, the free lists and the sequence-id map;
        not the allocator's per-allocation overhead. Storage freed by ``remove`` is kept for reuse and
        still counted. O(sequences); raises nothing.

        Why not Arctic Inference's number: its ``estimate_memory`` walks its own structures (a heap
        ``Node`` per node with two open-addressing hash maps, whose capacities depend on their insert
        and erase history, shared ``Group`` objects, ``sizeof(std::vector)`` = 24 bytes per token of
        capacity and ``sizeof(std::deque)`` = 80 bytes per active node). specdec keeps its tree in flat
        arrays and two hash tables per tree, none of those objects, so that number cannot be derived
        from it, and would not say what this tree holds. On the same random sequences (depths 8 to 64,
        vocabularies of 4 to 32000) this one is 0.48 to 0.71 times Arctic Inference's estimate (an empty
        tree: 392 bytes here, 240 there)."""
        return self._tree.memory_bytes()


def _request_id(req_id):
    """A request id, hashable (a list is a TypeError naming req_id, not Python's unnamed one)."""
    try:
        hash(req_id)
    except TypeError:
        raise TypeError(f"req_id: expected a hashable request id; got {type(req_id).__name__}") from None
    return req_id


class SuffixDecodingCache:
    """SuffixDecoding's two trees with Arctic Inference's ``SuffixDecodingCache`` interface (what vLLM's
    ``suffix`` method calls): one tree per active request (its prompt and response) and a global tree of
    responses, evicted oldest first beyond ``max_cached_requests`` (-1: no bound; 0: no global tree);
    ``max_tree_depth`` bounds every tree's depth (the longest suffix stored, 64 by default).
    ``max_cached_tokens`` (specdec's addition, -1: off) bounds the global tree's tokens too. Request ids
    are any hashable values. Drafts are Arctic Inference 0.3.0's bit for bit. Threads may share a cache:
    its calls are serialised by a lock of its own (the request-id maps are Python state).

    Token arguments (``prompt_token_ids``, ``token_ids``, ``context``) are sequences of ints or 1-D
    arrays of any integer dtype and layout: a contiguous int32 numpy array is read in place (Arctic
    Inference's ``extend_ndarray`` / ``speculate_ndarray`` path), anything else range-checked and
    converted. Arctic Inference's cache refuses an array that is not contiguous int32 with a
    ``ValueError``; this one takes it (int64, strided) and refuses only what is not integers
    (``TypeError``), not 1-D or outside int32 (``ValueError``), each naming the argument.
    """

    def __init__(self, max_tree_depth: int = 64, max_cached_requests: int = -1, max_cached_tokens: int = -1):
        """An empty cache. ``max_tree_depth`` (1 .. 65536): every tree's depth, so the longest match
        plus draft. ``max_cached_requests`` (-1 .. 2^31 - 1): responses kept in the global tree, -1
        unbounded, 0 no global tree. ``max_cached_tokens`` (>= -1, specdec's addition): tokens kept in
        the global tree, -1 unbounded. ``TypeError`` when one is not an integer, ``ValueError`` naming
        it when out of range."""
        max_tree_depth = _args.integer("max_tree_depth", max_tree_depth)
        max_cached_requests = _args.integer("max_cached_requests", max_cached_requests, hi=_args.INT32_MAX)
        try:
            self._cache = _specdec.SuffixCache(max_tree_depth, max_cached_requests,
                                               _args.integer("max_cached_tokens", max_cached_tokens))
        except ValueError as e:  # the header's tree calls it max_depth
            raise ValueError(str(e).replace("max_depth", "max_tree_depth")) from None
        self._lock = threading.RLock()
        self._max_tree_depth = max_tree_depth
        self._max_cached_requests = max_cached_requests
        self._id = {}  # request id -> the C++ cache's int64 id
        self._request = {}  # and back
        self._next = 0

    @property
    def max_tree_depth(self) -> int:
        """The trees' depth, as given."""
        return self._max_tree_depth

    @property
    def max_cached_requests(self) -> int:
        """The bound on cached responses, as given (-1: none; 0: no global tree)."""
        return self._max_cached_requests

    @property
    def active_requests(self) -> List[Hashable]:
        """The ids of the requests started and not yet stopped, as a new list (Arctic Inference's is a
        view of its dict's keys)."""
        with self._lock:
            return [r for r, i in self._id.items() if self._cache.active(i)]

    @property
    def cached_requests(self) -> List[Hashable]:
        """The ids of the requests whose responses are in the global tree, as a new list (Arctic
        Inference's is a view of its dict's keys)."""
        with self._lock:
            return [r for r, i in self._id.items() if self._cache.cached(i)]

    def _known(self, req_id: Hashable) -> int:
        i = self._id.get(_request_id(req_id))
        return -1 if i is None else i

    def _active(self, req_id: Hashable) -> int:
        """The C++ cache's id of active request `req_id` (named in the error when it is not active)."""
        i = self._known(req_id)
        if not self._cache.active(i):
            raise ValueError(f"req_id: request {req_id!r} is not active; expected a started one")
        return i

    def _forget_stale(self) -> None:
        # Evictions inside the C++ cache leave ids behind; a scan whenever they outnumber the live ones
        # keeps the maps bounded at O(1) amortised per call.
        if len(self._id) > 2 * (self._cache.num_active + self._cache.num_cached) + 64:
            for r in [r for r, i in self._id.items() if not (self._cache.active(i) or self._cache.cached(i))]:
                del self._request[self._id.pop(r)]

    def start_request(self, req_id: Hashable, prompt_token_ids) -> None:
        """Stores the prompt of a new request and, unless max_cached_requests is 0, gives its response a
        slot in the global tree (evicting a cached response of the same id, then the oldest beyond the
        bounds). ``req_id``: any hashable value (``TypeError`` otherwise); ``prompt_token_ids``: the
        prompt's token ids (see the class). ``ValueError`` when ``req_id`` is already active, or the
        tokens are not 1-D or outside int32; ``TypeError`` when they are not integers. Nothing changes
        when it raises."""
        prompt = _int32("prompt_token_ids", prompt_token_ids)
        with self._lock:
            if self._cache.active(self._known(req_id)):
                raise ValueError(f"req_id: request {req_id!r} is already active; expected a new one")
            if req_id not in self._id:
                self._id[req_id] = self._next
                self._request[self._next] = req_id
                self._next += 1
            self._cache.start_request(self._id[req_id], prompt)
            self._forget_stale()

    def stop_request(self, req_id: Hashable) -> None:
        """Drops the request's own tree; its response stays cached until evicted. ``ValueError`` when the
        request is not active, ``TypeError`` when ``req_id`` is not hashable."""
        with self._lock:
            self._cache.stop_request(self._active(req_id))

    def add_active_response(self, req_id: Hashable, token_ids) -> None:
        """Appends newly accepted tokens to the request's tree and, while it is cached, to its response in
        the global tree (then evicts the oldest responses beyond ``max_cached_tokens``). ``token_ids``:
        token ids (see the class). ``ValueError`` when the request is not active or the tokens are not
        1-D or outside int32; ``TypeError`` when they are not integers or ``req_id`` is not hashable."""
        tokens = _int32("token_ids", token_ids)
        with self._lock:
            self._cache.add_active_response(self._active(req_id), tokens)

    def evict_cached_response(self, req_id: Hashable) -> None:
        """Removes the request's response from the global tree (the request may still be active: its
        own tree stays, and later responses are no longer cached). ``ValueError`` when it is not cached,
        ``TypeError`` when ``req_id`` is not hashable."""
        with self._lock:
            i = self._known(req_id)
            if not self._cache.cached(i):
                raise ValueError(f"req_id: request {req_id!r}'s response is not cached; expected a cached one")
            self._cache.evict_cached_response(i)

    def speculate(self, req_id: Hashable, context, max_spec_tokens: Optional[int] = None, max_spec_factor: float = 1.0,
                  max_spec_offset: float = 0.0, min_token_prob: float = 0.1,
                  use_tree_spec: bool = False) -> SuffixDecodingDraft:
        """The draft after ``context`` (request ``req_id``'s committed tokens; the last max_tree_depth are
        used) from the request's tree and the global tree (``SuffixTree.speculate`` on each, the same
        options ``max_spec_factor``, ``max_spec_offset``, ``min_token_prob``, ``use_tree_spec``), the request's own unless the global one scores higher. ``max_spec_tokens`` None:
        max_tree_depth (Arctic Inference 0.3.0's None reads a ``max_depth`` attribute its cache does not
        have, an ``AttributeError``). Returns a :class:`SuffixDecodingDraft`. ``ValueError`` when the
        request is not active, an option is out of range (see ``SuffixTree.speculate``) or ``context``
        is not 1-D or outside int32; ``TypeError`` for an argument of the wrong kind."""
        if max_spec_tokens is None:
            max_spec_tokens = self._max_tree_depth
        tokens = _int32("context", context)
        options = _speculation(max_spec_tokens, max_spec_factor, max_spec_offset, min_token_prob, use_tree_spec)
        with self._lock:
            return SuffixDecodingDraft(*self._cache.speculate(self._active(req_id), tokens, *options))

    def memory_bytes(self) -> int:
        """The bytes the cache's trees occupy (each ``SuffixTree.estimate_memory``'s measure, the global
        tree and every active request's) plus an estimate of its request bookkeeping (specdec's
        addition: Arctic Inference's cache has no such method)."""
        with self._lock:
            return self._cache.memory_bytes()
