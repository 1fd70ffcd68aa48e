# SPDX-License-Identifier: Apache-2.0
"""SuffixDecoding (C++: specdec/tree/suffix*.hpp) under Arctic Inference's names: ``SuffixTree``,
``SuffixDecodingCache`` and the drafts they return (``SuffixDecodingDraft``)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Hashable, List, Optional

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


class SuffixTree:
    """Arctic Inference's ``SuffixTree``: every suffix of every stored sequence (int ids >= 0), cut to
    ``max_depth`` tokens, with occurrence counts. Drafts are Arctic Inference 0.3.0's bit for bit. Its
    calls hold the GIL throughout: threads sharing a tree are serialised."""

    def __init__(self, max_depth: int):
        self._tree = _specdec.SuffixTree(_args.integer("max_depth", max_depth))

    @property
    def max_depth(self) -> int:
        return self._tree.max_depth

    def num_seqs(self) -> int:
        return self._tree.num_sequences

    def extend(self, seq_id: int, tokens) -> None:
        self._tree.extend(_seq_id(seq_id), _int32("tokens", tokens))

    def append(self, seq_id: int, token: int) -> None:
        self._tree.extend(_seq_id(seq_id), _int32("token", token, scalar=True))

    def remove(self, seq_id: int) -> None:
        self._tree.remove(_seq_id(seq_id))

    def speculate(self, context, max_spec_tokens: int, max_spec_factor: float = 1.0, max_spec_offset: float = 0.0,
                  min_token_prob: float = 0.1, use_tree_spec: bool = False) -> SuffixDecodingDraft:
        return SuffixDecodingDraft(*self._tree.speculate(_int32("context", context), *_speculation(
            max_spec_tokens, max_spec_factor, max_spec_offset, min_token_prob, use_tree_spec)))

    def check_integrity(self) -> str:
        """An empty string when every invariant holds, else the first violation."""
        return self._tree.check_integrity()


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
    responses, evicted oldest first beyond ``max_cached_requests`` (-1: no bound; 0: no global tree).
    ``max_cached_tokens`` (specdec's addition, -1: off) bounds the global tree's tokens too. Request ids
    are any hashable values. Drafts are Arctic Inference 0.3.0's bit for bit. Threads may share a cache:
    its calls are serialised by a lock of its own (the request-id maps are Python state).
    """

    def __init__(self, max_tree_depth: int = 64, max_cached_requests: int = -1, max_cached_tokens: int = -1):
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
        return self._max_tree_depth

    @property
    def max_cached_requests(self) -> int:
        return self._max_cached_requests

    @property
    def active_requests(self) -> List[Hashable]:
        with self._lock:
            return [r for r, i in self._id.items() if self._cache.active(i)]

    @property
    def cached_requests(self) -> List[Hashable]:
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
        bounds). ``ValueError`` when ``req_id`` is already active."""
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
        request is not active."""
        with self._lock:
            self._cache.stop_request(self._active(req_id))

    def add_active_response(self, req_id: Hashable, token_ids) -> None:
        """Appends newly accepted tokens to the request's tree and its cached response."""
        tokens = _int32("token_ids", token_ids)
        with self._lock:
            self._cache.add_active_response(self._active(req_id), tokens)

    def evict_cached_response(self, req_id: Hashable) -> None:
        """Removes the request's response from the global tree. ``ValueError`` when it is not cached."""
        with self._lock:
            i = self._known(req_id)
            if not self._cache.cached(i):
                raise ValueError(f"req_id: request {req_id!r}'s response is not cached; expected a cached one")
            self._cache.evict_cached_response(i)

    def speculate(self, req_id: Hashable, context, max_spec_tokens: Optional[int] = None, max_spec_factor: float = 1.0,
                  max_spec_offset: float = 0.0, min_token_prob: float = 0.1,
                  use_tree_spec: bool = False) -> SuffixDecodingDraft:
        """The draft after ``context`` (the request's committed tokens; the last max_tree_depth are used)
        from the request's tree and the global tree, the request's own unless the global one scores
        higher. ``max_spec_tokens`` None: max_tree_depth. ``ValueError`` when the request is not active."""
        if max_spec_tokens is None:
            max_spec_tokens = self._max_tree_depth
        tokens = _int32("context", context)
        options = _speculation(max_spec_tokens, max_spec_factor, max_spec_offset, min_token_prob, use_tree_spec)
        with self._lock:
            return SuffixDecodingDraft(*self._cache.speculate(self._active(req_id), tokens, *options))

    def memory_bytes(self) -> int:
        with self._lock:
            return self._cache.memory_bytes()
