# SPDX-License-Identifier: Apache-2.0
"""specdec's own drafting side: draft trees and their engine buffers, prompt-lookup and suffix drafts,
the EAGLE-2 builder, the draft-length policy, and verification of specdec's trees.

Every algorithm is the C++ headers' (specdec/tree, specdec/mask, specdec/policy, specdec/sampling);
this module converts arguments (specdec/_args.py: checked, named, never wrapped) and names results.
Trees are :class:`DraftTree` (node 0 the root, parents before children, breadth-first); tokens are int32
(lists, numpy arrays or CPU torch tensors are accepted; an int32 numpy array is read without a copy).
Stateful objects (the builders, the suffix structures, the blocks) may be shared between threads: each
serialises its calls (docs/python.md, "Threads").
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from typing import Hashable, Iterable, List, Optional, Sequence

import numpy as np

from . import _args, _specdec

__all__ = [
    "DraftTree",
    "tree_mask_flashinfer",
    "batch_tree_mask",
    "batch_tree_mask_flashinfer",
    "propose_ngram",
    "ngram_match_length",
    "SuffixTree",
    "SuffixDecodingDraft",
    "SuffixDecodingCache",
    "Eagle2TreeBuilder",
    "Eagle2BatchBuilder",
    "Eagle2BatchStep",
    "Eagle2BatchTrees",
    "DraftLengthPolicy",
    "VerifyResult",
    "verify_greedy",
    "verify_speculative",
    "tree_batch",
    "BatchVerification",
    "verify_tree_batch",
    "DecoderLayer",
    "eagle_fuse",
    "Eagle3Block",
    "MtpModule",
    "JakiroLayer",
    "AmphistaHeads",
    "MoaDrafter",
]


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


# ---- draft trees --------------------------------------------------------------------------------------


@dataclass
class DraftTree:
    """A draft tree in specdec's form (``specdec::draft_tree``): ``token[i]``, ``parent[i]`` (-1 for the
    root, node 0; parents come before children), ``depth[i]`` (int32) and ``score[i]`` (float32: the
    drafter's score, e.g. a cumulative log-probability or a suffix draft's probability). Node i's target
    row is the distribution of the token after node i.
    """

    token: np.ndarray
    parent: np.ndarray
    depth: np.ndarray
    score: np.ndarray

    @staticmethod
    def from_parents(tokens, parents, vocab_size: int = 0) -> "DraftTree":
        """A tree from tokens and parents (depths computed, scores zero), validated: ``ValueError`` on a
        malformed tree, or a token outside [0, vocab_size) when vocab_size > 0."""
        return DraftTree(*_specdec.make_tree(_int32("tokens", tokens), _int32("parents", parents, "parents"),
                                             _args.integer("vocab_size", vocab_size)))

    @staticmethod
    def chain(root: int, tokens) -> "DraftTree":
        """The root followed by ``tokens`` as a chain (prompt lookup's and vLLM's drafts)."""
        t = _int32("tokens", tokens)
        r = _args.integer("root", root, 0, _args.INT32_MAX, " (a token id)")
        return DraftTree.from_parents(np.concatenate([np.array([r], dtype=np.int32), t]), np.arange(-1, len(t), dtype=np.int32))

    @property
    def size(self) -> int:
        return len(_int32("tree.token", self.token))

    @property
    def max_depth(self) -> int:
        depth = _int32("tree.depth", self.depth, "depths")
        return int(depth.max()) if len(depth) else 0

    def _arrays(self, name: str = "tree"):
        """(token, parent, depth) as int32 arrays, checked; errors name `name`'s fields ("trees[2].token")."""
        return (_int32(f"{name}.token", self.token), _int32(f"{name}.parent", self.parent, "parents"),
                _int32(f"{name}.depth", self.depth, "depths"))

    def validate(self, vocab_size: int = 0) -> None:
        """``ValueError`` naming the first malformed node (specdec::validate)."""
        _specdec.validate_tree(*self._arrays(), _args.integer("vocab_size", vocab_size))

    def mask(self, prefix_length: int = 0, dtype=np.bool_, additive: bool = False, out=None):
        """The tree-attention mask ``[n x (prefix_length + n)]``: node i attends the whole prefix, itself
        and its ancestors. ``dtype`` bool, uint8, float32 or float64 (1 / 0), or with ``additive`` a float
        mask of 0 / -inf. Written into ``out`` when given (numpy or torch, C-contiguous)."""
        arrays = self._arrays()
        n = len(arrays[0])
        prefix_length = _args.size("prefix_length", prefix_length)
        additive = _args.flag("additive", additive)
        if out is None:
            try:
                dtype = np.dtype(np.float32 if additive and dtype is np.bool_ else dtype)
            except TypeError:
                raise TypeError(f"dtype: expected bool, uint8, float32 or float64; got {dtype!r}") from None
            out = np.empty(_args.elements("prefix_length", (n, prefix_length + n)), dtype=dtype)
        _specdec.tree_mask_dense(*arrays, prefix_length, out, additive)
        return out

    def mask_packed_int32(self) -> np.ndarray:
        """TensorRT-LLM's packed mask ``[n x ceil(n / 32)]`` int32: bit b of word w of row i set iff node i
        attends node 32 w + b."""
        arrays = self._arrays()
        n = len(arrays[0])
        out = np.empty((n, (n + 31) // 32), dtype=np.int32)
        _specdec.tree_mask_packed_int32(*arrays, out)
        return out

    def mask_bitpacked_rows(self) -> np.ndarray:
        """SGLang's QLEN_ONLY_BITPACKING rows: one item per node (uint8 / uint16 / uint32 for n <= 8 / 16 /
        32), bit j = tree column j."""
        arrays = self._arrays()
        n = len(arrays[0])
        dtype = np.uint8 if n <= 8 else np.uint16 if n <= 16 else np.uint32
        out = np.empty(n, dtype=dtype)
        _specdec.tree_mask_bitpacked_rows(*arrays, out)
        return out

    def positions(self, prefix_length: int) -> np.ndarray:
        """Per-node positions ``prefix_length + depth`` (int64), the root at ``prefix_length``."""
        return _specdec.tree_positions(*self._arrays(), _args.integer("prefix_length", prefix_length))

    def retrieve_paths(self, order: str = "node_index") -> np.ndarray:
        """Root-to-leaf paths ``[leaves x (max_depth + 1)]`` int32, padded with -1; ``order``
        ``"node_index"`` (EAGLE-2), ``"lexicographic"`` (EAGLE-1, TensorRT-LLM) or ``"reverse_node_index"``
        (Medusa)."""
        orders = {"node_index": 0, "lexicographic": 1, "reverse_node_index": 2}
        return _specdec.retrieve_paths(*self._arrays(), orders[_args.choice("order", order, tuple(orders))])

    def child_links(self):
        """``(first_child, next_sibling)`` int32 ``[n]``, -1 for none (SGLang's retrive_next_token /
        retrive_next_sibling)."""
        return _specdec.child_links(*self._arrays())


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
    given. A malformed tree or count is a ``ValueError`` naming it."""
    from . import _empty, _is_torch, _stream

    layouts = {"dense": 0, "additive": 1, "packed_int32": 2, "bitpacked_rows": 3}
    _args.choice("layout", layout, tuple(layouts))
    _args.choice("dtype", dtype, ("bool", "uint8", "float32"))
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
    wrapper does after ``segment_packbits``)."""
    from . import _empty, _is_torch, _stream

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
    ``custom_mask`` / ``mask_indptr`` pair of FlashInfer's prefill wrapper after ``segment_packbits``)."""
    prefixes = _args.integers("prefix_lengths", prefix_lengths, "int64", scalar=True, hi=_args.INT32_MAX, what="lengths")
    return _specdec.tree_mask_flashinfer(_tree_arrays(trees), prefixes)


# ---- prompt lookup ---------------------------------------------------------------------------------------


def propose_ngram(history, length: int, *, max_ngram: int = 3, min_ngram: int = 2, branches: int = 1,
                  max_history: int = 0) -> DraftTree:
    """Prompt lookup (llama.cpp's ngram-simple, vLLM's n-gram proposer, transformers'
    ``prompt_lookup_num_tokens``): the longest suffix of ``history`` (``max_ngram`` down to ``min_ngram``
    tokens) that occurred before proposes the ``length`` tokens that followed it; with ``branches`` > 1
    the most recent distinct continuations merge into one tree. Rooted at ``history[-1]``; the root alone
    when nothing matches. Only the last ``max_history`` tokens are searched (0: all)."""
    return DraftTree(*_specdec.propose_ngram(_int32("history", history), _args.integer("length", length),
                                             _args.integer("max_ngram", max_ngram), _args.integer("min_ngram", min_ngram),
                                             _args.integer("branches", branches), _args.integer("max_history", max_history)))


def ngram_match_length(history, *, max_ngram: int = 3, min_ngram: int = 2, max_history: int = 0) -> int:
    """The suffix length prompt lookup would match (0: none), a draft's quality known before verifying it."""
    return _specdec.ngram_match_length(_int32("history", history), _args.integer("max_ngram", max_ngram),
                                       _args.integer("min_ngram", min_ngram), _args.integer("max_history", max_history))


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
    """A finished EAGLE-2 selection: the tree (scores cumulative), ``selected`` (the candidates' flat
    indices, EAGLE's / SGLang's ``top_scores_index``) and ``parent_list`` (SGLang's, ``[1 + depth k]``)."""

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
    """

    def __init__(self, top_k: int = 10, depth: int = 5, total_tokens: int = 60, *, batch: int = 1,
                 score: str = "log_probability", d2t=None):
        _args.choice("score", score, ("log_probability", "probability"))
        top_k, depth, total_tokens, batch = _eagle2_config(top_k, depth, total_tokens, batch)
        self._builder = _specdec.Eagle2Builder(top_k, depth, total_tokens, score == "probability", _d2t(d2t), batch)

    def begin(self, root_logits, root_tokens, target_vocab: int = 0):
        return self._builder.begin(root_logits, _int32("root_tokens", root_tokens, scalar=True),
                                   _args.integer("target_vocab", target_vocab))

    def expand(self, frontier_logits):
        return self._builder.expand(frontier_logits)

    def expand_dual(self, left_logits, right_logits):
        """Jakiro's penultimate dual-head step (consumes the last two expansions)."""
        return self._builder.expand_dual(left_logits, right_logits)

    def finish(self) -> List[DynamicTree]:
        return [DynamicTree(DraftTree(t, p, d, s), sel, pl) for t, p, d, s, sel, pl in self._builder.finish()]

    @property
    def steps_done(self) -> int:
        return self._builder.steps_done


@dataclass
class Eagle2BatchStep:
    """The frontier after a step of :class:`Eagle2BatchBuilder`, arrays where the builder runs: ``input_ids``,
    ``frontier``, ``parent_slot`` int32 ``[batch, top_k]``; ``draft_mask`` uint8 ``[batch * top_k, top_k * (step + 1)]``
    (request b's rows are ``b * top_k ..``: the draft-side tree mask over the nodes drawn so far)."""

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
    reduced-vocabulary offsets (target id = t + d2t[t]). Errors: ``ValueError`` naming the argument (a
    data fault on the device when the step's kernels are checked, as every device call is)."""

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
        from . import _empty

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
        from . import _stream

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
        from . import _stream

        with self._lock:
            out = self._step_arrays(self._step + 1)
            self._builder.expand(frontier_logits, *out, self._step + 1, _stream(frontier_logits))
            self._step += 1
            return Eagle2BatchStep(self._step, *out)

    def expand_dual(self, left_logits, right_logits) -> Eagle2BatchStep:
        """Jakiro's penultimate dual-head step (consumes the last two expansions)."""
        from . import _stream

        with self._lock:
            out = self._step_arrays(self._step + 2)
            self._builder.expand_dual(left_logits, right_logits, *out, self._step + 2, _stream(left_logits))
            self._step += 2
            return Eagle2BatchStep(self._step, *out)

    def finish(self) -> Eagle2BatchTrees:
        from . import _empty, _stream

        with self._lock:
            b, t = self._batch, self._total
            like = self._like if self._like is not None else np.empty(0, dtype=np.float32)
            arrays = [_empty(like, (b, t), "int32"), _empty(like, (b, t), "int32"), _empty(like, (b, t), "int32"),
                      _empty(like, (b, t), "float32"), _empty(like, (b, max(t - 1, 0)), "int32")]
            self._builder.finish(*arrays, _stream(like))
            return Eagle2BatchTrees(*arrays)

    @property
    def steps_done(self) -> int:
        with self._lock:
            return max(self._step, 0)


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


class DraftLengthPolicy:
    """How many tokens to draft, decided against the clock (specdec::policy::draft_length_policy).

    ``DraftLengthPolicy(longest, contexts=1)``; per step ``choose(context=0, available=None)`` gives the
    draft length (0: verify the root alone); report ``verified(accepted, drafted, context=0)`` after each
    verification, ``target_forward_timed(rows, seconds)`` for each target forward and, for drafters that
    run a model, ``draft_token_timed(seconds)``. ``expected_tokens(length, context=0)`` and
    ``acceptance_rate(depth, context=0)`` read what it has measured. Out-of-range values raise ValueError
    naming them; a non-integer count a TypeError. Its calls hold the GIL throughout: threads sharing a
    policy are serialised."""

    def __init__(self, longest: int, contexts: int = 1):
        self._policy = _specdec.DraftLengthPolicy(_args.integer("longest", longest), _args.integer("contexts", contexts))

    @property
    def longest(self) -> int:
        return self._policy.longest

    @property
    def contexts(self) -> int:
        return self._policy.contexts

    def choose(self, context: int = 0, available: Optional[int] = None) -> int:
        return self._policy.choose(_args.integer("context", context),
                                   None if available is None else _args.integer("available", available))

    def verified(self, accepted: int, drafted: int, context: int = 0) -> None:
        self._policy.verified(_args.integer("accepted", accepted), _args.integer("drafted", drafted),
                              _args.integer("context", context))

    def target_forward_timed(self, rows: int, seconds: float) -> None:
        self._policy.target_forward_timed(_args.integer("rows", rows), _args.real("seconds", seconds))

    def draft_token_timed(self, seconds: float) -> None:
        self._policy.draft_token_timed(_args.real("seconds", seconds))

    def expected_tokens(self, length: int, context: int = 0) -> float:
        return self._policy.expected_tokens(_args.integer("length", length), _args.integer("context", context))

    def acceptance_rate(self, depth: int, context: int = 0) -> float:
        return self._policy.acceptance_rate(_args.integer("depth", depth), _args.integer("context", context))


# ---- verification of specdec's trees ---------------------------------------------------------------------


@dataclass
class VerifyResult:
    """One request's verification: ``accepted_nodes`` (node indices of the accepted path, root excluded),
    ``tokens`` (the accepted tokens, then the final one), ``bonus`` (the walk ended without a rejection).
    An engine keeps the KV rows of node 0 and ``accepted_nodes``."""

    accepted_nodes: List[int]
    tokens: List[int]
    bonus: bool


def _tree_arrays(trees) -> list:
    return [t._arrays(f"trees[{i}]") for i, t in enumerate(_trees("trees", trees))]


def _rows(target_rows) -> np.ndarray:
    return np.zeros(0, dtype=np.int64) if target_rows is None else _args.integers("target_rows", target_rows, "int64",
                                                                                   what="row indices")


def verify_greedy(logits, trees, target_rows=None) -> List[VerifyResult]:
    """Greedy verification of specdec's trees (SGLang's ``verify_tree_greedy`` and EAGLE's rule): the
    longest path whose every token is the target's argmax at its parent, then the argmax after it.
    ``logits`` ``[rows x V]`` float32 (numpy or torch, CPU): node i of tree r reads row
    ``target_rows[r] + i`` (default: the trees' rows one after another). Rows the walk never visits are
    never read."""
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
    ``offset`` (``generator``: a ``torch.Generator`` draws the seed; neither: numpy's global generator)."""
    from . import _seed_offset

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
    the largest tree's size; padding entries are 0 (tokens) and 0 (parents) and are never read."""
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
    multi-draft rule: deterministic drafts, or ``draft_probs`` float32 ``[rows' x V]`` with ``draft_rows``
    int64 ``[batch x N]`` (the row node i was drawn from, -1 for a deterministic node). Randomness:
    ``uniforms`` float64 ``[batch x U]`` in consumption order, or Philox stream ``(seed, r)`` for request r
    read from ``offset`` (an int, or int64 ``[batch]`` per request; ``generator`` draws the seed; neither:
    numpy's global generator), as ``verify_speculative``.

    Errors: shapes, dtypes and devices as ``ValueError`` / ``TypeError`` naming the argument; a malformed
    tree, a token, row, cap or bonus out of range, a row that is not a distribution where it is read whole,
    from the C++ side."""
    from . import _NONE_F32, _empty, _philox_streams, _seed_offset, _stream

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


# ---- drafter blocks ---------------------------------------------------------------------------------------


def _f32(a, name: str = "weights"):
    """A weight or input as float32 and C-contiguous where it is (a torch tensor stays on its device; no
    copy when it already is one); not numbers is a TypeError naming `name`."""
    if _is_torch_tensor(a):
        if a.dtype.is_complex or a.dtype == sys.modules["torch"].bool:
            raise TypeError(f"{name}: expected real numbers; got {_args._kind(a)}")
        return a.detach().float().contiguous()
    return _args.reals(name, a, ndim=None)


def _weights(weights, keep) -> dict:
    """A block's weights by checkpoint name (those `keep(name)` selects) as float32 arrays."""
    if not hasattr(weights, "items"):
        raise TypeError(f"weights: expected a dict of arrays by checkpoint name; got {type(weights).__name__}")
    out = {}
    for name, a in weights.items():
        if not isinstance(name, str):
            raise TypeError(f"weights: expected str names; got {type(name).__name__} {name!r}")
        if keep(name):
            out[name] = _f32(a, f"weights[{name!r}]")
    return out


class _Block:
    """Where a block runs: on the host for host weights (outputs numpy arrays), on a CUDA device for CUDA
    tensors (outputs CUDA tensors there, each call on the current stream). The native block serialises
    its calls (its lock); `_lock` makes a wrapper's reads of the cache and the call that follows one step
    (keys() sizes its output by the cache, then copies it)."""

    def _place(self, weights) -> None:
        self._weights = weights
        first = next((a for a in weights.values() if _is_torch_tensor(a) and a.is_cuda), None)
        self._cuda = first  # a tensor on the block's device, or None
        self._lock = threading.RLock()

    def _out(self, *shape):
        if self._cuda is None:
            return np.empty(shape, dtype=np.float32)
        import torch

        return torch.empty(shape, dtype=torch.float32, device=self._cuda.device)

    def _index(self, x, dtype: str, name: str):
        """Positions (int64) or tokens (int32) where the block runs."""
        what = "token ids" if dtype == "int32" else "positions"
        if self._cuda is None:
            return _args.integers(name, x, dtype, what=what)
        return _args.device_integers(name, x, dtype, self._cuda, what=what)

    @staticmethod
    def _rows(name: str, x) -> int:
        """The rows of 2-D input `name` (the output's rows)."""
        return _args.shape(name, x, 2)[0]

    def _stream(self) -> int:
        from . import _stream

        return 0 if self._cuda is None else _stream(self._cuda)

    @property
    def device(self) -> str:
        """``"cpu"``, or ``"cuda:N"`` where the block's weights are."""
        return "cpu" if self._cuda is None else str(self._cuda.device)


def _shape_args(heads, kv_heads, head_dim, rms_eps, rope_theta, capacity) -> tuple:
    """A block's layer shape, checked (the C++ side checks the values against the weights)."""
    return (_args.integer("heads", heads), _args.integer("kv_heads", kv_heads), _args.integer("head_dim", head_dim),
            _args.real("rms_eps", rms_eps), _args.real("rope_theta", rope_theta), _args.integer("capacity", capacity))


def _prefix(prefix) -> str:
    if not isinstance(prefix, str):
        raise TypeError(f"prefix: expected a str (the checkpoint names' prefix); got {type(prefix).__name__}")
    return prefix


class _Cached(_Block):
    """A block's KV cache(s), held by the native object: rows cached so far, and cropping to the first n
    (the tokens verified so far)."""

    @property
    def cache_size(self) -> int:
        return self._native.cache_size

    def crop(self, n: int) -> None:
        n = _args.integer("n", n)
        with self._lock:
            self._native.crop(n)


class _TreeCached(_Cached):
    def keep(self, prefix: int, offsets) -> None:
        """Keeps the cache's first ``prefix`` rows, then rows ``prefix + offsets[i]`` in order (a tree's
        accepted path, ascending), dropping the rest."""
        prefix, offsets = _args.integer("prefix", prefix), _int32("offsets", offsets, "offsets")
        with self._lock:
            self._native.keep(prefix, offsets, self._stream())


class DecoderLayer(_TreeCached):
    """The pre-norm Llama decoder layer every drafter is made of (EAGLE's and Jakiro's layer, MoA's
    self-attention, MTP's block), with its own KV cache (specdec::blocks::decoder_layer_forward on the
    host backend).

    ``weights``: a dict of float32 arrays named as in a checkpoint after ``prefix``:
    ``input_layernorm.weight`` (absent with ``input_norm=False``: EAGLE's layer 0),
    ``post_attention_layernorm.weight``, ``self_attn.{q,k,v,o}_proj.weight``,
    ``mlp.{gate,up,down}_proj.weight`` (others are ignored; arrays of another dtype are converted once).
    The layer views them in place and keeps them alive. ``forward(x, positions, mask=None)``: ``x`` float32
    ``[T x E]`` updated in place (the residual stream) and returned, ``positions`` int64 ``[T]`` (RoPE);
    keys are the cache followed by the rows, ``mask`` None (causal), ``"none"``, a bool / uint8
    ``[T x (cache + T)]`` allowed mask (``DraftTree.mask(cache_size)`` for a tree) or a float32
    additive one. The rows' keys and values are appended to the cache; ``crop(n)`` keeps the first n,
    ``keep(prefix, offsets)`` keeps the prefix and a tree's accepted rows. Shapes that do not match the
    configuration raise ValueError naming the tensor.
    """

    def __init__(self, weights, *, heads: int, kv_heads: int, head_dim: int, rms_eps: float = 1e-5,
                 rope_theta: float = 10000.0, input_norm: bool = True, capacity: int = 4096, prefix: str = ""):
        prefix = _prefix(prefix)
        h, kv, d, eps, theta, cap = _shape_args(heads, kv_heads, head_dim, rms_eps, rope_theta, capacity)
        self._place(_weights(weights, lambda name: name.startswith(prefix)))
        input_norm = _args.flag("input_norm", input_norm)
        self._native = _specdec.DecoderLayer(self._weights, prefix, h, kv, d, eps, theta, input_norm, cap)

    def forward(self, x, positions, mask=None):
        positions = self._index(positions, "int64", "positions")
        with self._lock:
            self._native.forward(x, positions, mask, self._stream())
        return x

    def keys(self):
        """The cached keys ``[cache_size x kv_heads head_dim]`` (after RoPE), a copy where the block runs."""
        return self._cached(True)

    def values(self):
        return self._cached(False)

    def _cached(self, keys: bool):
        with self._lock:  # the size read and the copy, one step (another thread's forward grows the cache)
            out = self._out(self._native.cache_size, self._native.cache_width)
            self._native.cached(keys, out, self._stream())
            return out


def eagle_fuse(tokens, feature, embed, fc_weight, fc_bias, out=None):
    """EAGLE's (and Jakiro's) fusion of the next token with the target's feature
    (specdec::blocks::eagle::fuse): ``out = [embed[tokens] ; feature] @ fc_weight.T + fc_bias``, embedding
    first. ``tokens`` int ``[T]`` in [0, V); ``feature`` float32 ``[T x E]`` (the target's last hidden state
    after its final norm); ``embed`` ``[V x E]`` (the target's embeddings); ``fc_weight`` ``[E x 2E]``,
    ``fc_bias`` ``[E]``; returns float32 ``[T x E]``. EAGLE's draft layer is this, then
    ``DecoderLayer(..., input_norm=False)`` on the result; the target's LM head gives the draft logits."""
    from . import _stream

    cols = _args.shape("embed", embed, 2)[1]
    if _is_torch_tensor(embed) and embed.is_cuda:
        import torch

        t = _args.device_integers("tokens", tokens, "int32", embed, what="token ids")
        if out is None:
            out = torch.empty((t.shape[0], cols), dtype=torch.float32, device=embed.device)
    else:
        t = _int32("tokens", tokens)
        if out is None:
            out = np.empty((t.shape[0], cols), dtype=np.float32)
    _specdec.eagle_fuse(t, feature, embed, fc_weight, fc_bias, out, _stream(embed))
    return out


class Eagle3Block(_TreeCached):
    """EAGLE-3's draft block (specdec::blocks::eagle3; SafeAILab's ``Model`` + ``LlamaDecoderLayeremb``,
    the tensors vLLM's and SGLang's ``llama_eagle3.py`` load), with its KV cache.

    ``weights`` by SafeAILab's names: ``embed_tokens.weight`` ``[V x E]`` (the target's), ``fc.weight``
    ``[E x 3 E_t]``, ``midlayer.{hidden_norm,input_layernorm,post_attention_layernorm}.weight``,
    ``midlayer.self_attn.{q,k,v}_proj.weight`` (from 2E), ``midlayer.self_attn.o_proj.weight``,
    ``midlayer.mlp.{gate,up,down}_proj.weight``, ``norm.weight``, ``lm_head.weight`` ``[V_d x E]`` (viewed in
    place, kept alive). ``fuse(taps)``: ``taps`` ``[T x 3 E_t]`` (the target's states entering its three
    tapped layers, ``blocks::eagle3::tap_layers``) to ``[T x E]``; ``forward(tokens, hidden, positions,
    mask=None)``: the draft layer for target ids ``tokens`` ``[T]`` with incoming state ``hidden`` ``[T x E]``
    (fused features first, the previous step's output after), self-attention over the cache and these rows
    (mask as DecoderLayer's), returning ``h2`` ``[T x E]``; ``logits(h2)``: ``[T x V_d]`` draft logits (draft id
    i is target id ``i + d2t[i]``: ``Eagle2TreeBuilder(d2t=...)`` maps them).
    """

    def __init__(self, weights, *, heads: int, kv_heads: int, head_dim: int, rms_eps: float = 1e-5,
                 rope_theta: float = 10000.0, capacity: int = 4096):
        shape = _shape_args(heads, kv_heads, head_dim, rms_eps, rope_theta, capacity)
        self._place(_weights(weights, lambda name: name != "d2t"))
        self._native = _specdec.Eagle3Block(self._weights, *shape)

    def fuse(self, taps):
        out = self._out(self._rows("taps", taps), self._native.hidden)
        self._native.fuse(taps, out, self._stream())
        return out

    def forward(self, tokens, hidden, positions, mask=None, out=None):
        if out is None:
            out = self._out(self._rows("hidden", hidden), self._native.hidden)
        tokens, positions = self._index(tokens, "int32", "tokens"), self._index(positions, "int64", "positions")
        with self._lock:
            self._native.forward(tokens, hidden, positions, mask, out, self._stream())
        return out

    def logits(self, h2):
        out = self._out(self._rows("h2", h2), self._native.draft_vocab)
        self._native.logits(h2, out, self._stream())
        return out


class MtpModule(_Cached):
    """One multi-token-prediction module (specdec::blocks::mtp: DeepSeek-V3's layout as vLLM's
    ``deepseek_mtp.py`` and SGLang's ``deepseek_nextn.py`` run it, with a Llama decoder layer), with its KV
    cache.

    ``weights`` by name: ``embed_tokens.weight`` ``[V x E]`` (the target's), and under ``prefix`` (e.g.
    ``"model.layers.61."``): ``enorm.weight``, ``hnorm.weight``, ``eh_proj.weight`` ``[E x 2E]``,
    ``mtp_block.*`` (the decoder layer, DecoderLayer's names), ``shared_head.norm.weight``,
    ``shared_head.head.weight`` ``[V x E]``. ``forward(tokens, hidden, positions, mask=None)``:
    ``o = layer(eh_proj([enorm(embed(tokens)) ; hnorm(hidden)]))`` ``[T x E]`` (``hidden``: the target's last
    hidden state after its final norm, then the previous step's ``o``), over the module's cache;
    ``projected=`` (an array ``[T x E]``) also receives the layer's input. ``logits(o)``: ``[T x V]``.
    ``zero_embedding_at_position_0``: vLLM's rule (rows at position 0 embed as zeros); SGLang's is False.
    """

    def __init__(self, weights, *, heads: int, kv_heads: int, head_dim: int, prefix: str = "", rms_eps: float = 1e-6,
                 rope_theta: float = 10000.0, zero_embedding_at_position_0: bool = True, capacity: int = 4096):
        prefix = _prefix(prefix)
        h, kv, d, eps, theta, cap = _shape_args(heads, kv_heads, head_dim, rms_eps, rope_theta, capacity)
        self._place(_weights(weights, lambda name: name.startswith(prefix) or name == "embed_tokens.weight"))
        self._native = _specdec.MtpModule(self._weights, prefix, h, kv, d, eps, theta,
                                          _args.flag("zero_embedding_at_position_0", zero_embedding_at_position_0), cap)

    def forward(self, tokens, hidden, positions, mask=None, out=None, projected=None):
        if out is None:
            out = self._out(self._rows("hidden", hidden), self._native.hidden)
        tokens, positions = self._index(tokens, "int32", "tokens"), self._index(positions, "int64", "positions")
        with self._lock:
            self._native.forward(tokens, hidden, positions, mask, out,
                                 projected if projected is not None else np.empty(0, dtype=np.float32), self._stream())
        return out

    def logits(self, o):
        out = self._out(self._rows("o", o), self._native.vocab)
        self._native.logits(o, out, self._stream())
        return out


class JakiroLayer(_TreeCached):
    """Jakiro's draft layer (specdec::blocks::moe::draft_layer_forward; haiduo/Jakiro ``cnets.py``):
    EAGLE's fusion of the next token with the target's feature, the decoder layer's attention (layer 0: no
    input norm), then two SwiGLU experts behind Jakiro's router instead of the MLP, with its KV cache.

    ``weights`` by Jakiro's names: ``embed_tokens.weight``, ``fc.weight`` / ``fc.bias``,
    ``layers.0.self_attn.*``, ``layers.0.post_attention_layernorm.weight``, ``layers.0.mlp_moe.gate.weight``
    ``[4 x E]``, ``layers.0.mlp_moe.experts.{0,1}.{gate,up,down}_proj.weight``. ``forward(tokens, feature,
    positions, mask=None, contrastive=False)``: the "left" output ``[T x E]`` (h + the router-weighted
    experts), or with ``contrastive`` (the penultimate forward of a tree, ``Eagle2TreeBuilder.expand_dual``)
    ``(left, right)``, right = h + the contrastive mix.
    """

    def __init__(self, weights, *, heads: int, kv_heads: int, head_dim: int, rms_eps: float = 1e-5,
                 rope_theta: float = 10000.0, capacity: int = 4096):
        shape = _shape_args(heads, kv_heads, head_dim, rms_eps, rope_theta, capacity)
        self._place(_weights(weights, lambda name: True))
        self._native = _specdec.JakiroLayer(self._weights, *shape)

    def forward(self, tokens, feature, positions, mask=None, contrastive: bool = False):
        contrastive = _args.flag("contrastive", contrastive)
        t, positions = self._index(tokens, "int32", "tokens"), self._index(positions, "int64", "positions")
        left = self._out(int(t.shape[0]), self._native.hidden)
        right = self._out(int(t.shape[0]), self._native.hidden) if contrastive else np.empty(0, dtype=np.float32)
        with self._lock:
            self._native.forward(t, feature, positions, mask, left, right, self._stream())
        return (left, right) if contrastive else left


class AmphistaHeads(_Cached):
    """Amphista's K drafting heads (specdec::blocks::amphista; Li et al., NAACL 2025, eq. 1-6): two staged
    adaptation layers (each a fusion of ``[feature ; embedding]`` and a causal decoder layer with its KV
    cache), the heads' inputs from the stages' last rows (``stage1_heads`` of them from stage 1; the paper
    says floor(K/2)), the auto-embedding block (a learned position embedding over the K slots and one
    bi-directional layer without RoPE), then each head's logits.

    ``weights`` by specdec's names (the paper ships no code): ``stage{1,2}.fuse.{weight,bias}``,
    ``stage{1,2}.layer.*`` (DecoderLayer's names), ``auto.pos_emb`` ``[K x E]``, ``auto.layer.*`` (its
    attention as ``auto.layer.{q,k,v,o}_proj.weight``), ``auto.heads.{k}.weight`` ``[V x E]``.
    ``forward(feature, embedding, positions)``: ``feature`` (the target's hidden states) and ``embedding``
    (the next tokens' embeddings) ``[T x E]``, returns the heads' logits ``[K x V]`` for the last row;
    ``intermediates=True`` returns a dict with ``s1``, ``s2`` (the stages' outputs), ``z``, ``u``, ``o`` and
    ``logits``.
    """

    def __init__(self, weights, *, heads: int, kv_heads: int, head_dim: int, stage1_heads=None, rms_eps: float = 1e-5,
                 rope_theta: float = 10000.0, capacity: int = 4096):
        h, kv, d, eps, theta, cap = _shape_args(heads, kv_heads, head_dim, rms_eps, rope_theta, capacity)
        self._place(_weights(weights, lambda name: True))
        k = sum(1 for name in self._weights if name.startswith("auto.heads.") and name.endswith(".weight"))
        stage1 = k // 2 if stage1_heads is None else _args.integer("stage1_heads", stage1_heads)
        self._native = _specdec.AmphistaHeads(self._weights, h, kv, d, k, stage1, eps, theta, cap)

    def forward(self, feature, embedding, positions, intermediates: bool = False):
        intermediates = _args.flag("intermediates", intermediates)
        t, e, k = self._rows("feature", feature), self._native.hidden, self._native.heads
        out = {"s1": self._out(t, e), "s2": self._out(t, e), "z": self._out(k, e), "u": self._out(k, e), "o": self._out(k, e),
               "logits": self._out(k, self._native.vocab)}
        positions = self._index(positions, "int64", "positions")
        with self._lock:
            self._native.forward(feature, embedding, positions, out["s1"], out["s2"], out["z"], out["u"], out["o"], out["logits"],
                                 self._stream())
        return out if intermediates else out["logits"]


class MoaDrafter(_Cached):
    """Mixture of Attentions' inference drafter (specdec::blocks::moa::drafter; Zimmer et al., HEBO's
    ``mixture-of-attentions`` branch), by the HEBO checkpoint's names (``layer_self_attention.*``,
    ``Ekv2E.{weight,bias}``, ``self_attention.*``, ``cross_attention.*``).

    ``lsa``, ``sa``, ``ca``: each part's ``dict(heads=, kv_heads=, head_dim=, rope_theta=10000.0)`` (widths
    and MLP sizes come from the weights); ``target_layers`` and ``target_head_dim`` describe the target's
    KV cache. ``add_verified(keys, values, first, count)``: the target's cache rows of newly verified
    tokens ``[first, first + count)``, one ``[tokens x kv_heads head_dim]`` array per target layer (post-RoPE),
    queued as the cross-attention's key/value stream; ``forward(x, positions, last=1, mask=None)``:
    self-attention over the new tokens' embeddings ``x`` ``[n x E]`` (updated in place) at ``positions``
    (causal, or a tree's mask), then cross-attention for the last ``last`` rows into the returned
    features ``[last x E]`` (the target's LM head gives the draft logits); ``crop(n)`` keeps n
    self-attention rows.
    """

    def __init__(self, weights, *, lsa, sa, ca, target_layers: int, target_head_dim: int, rms_eps: float = 1e-5,
                 capacity: int = 4096):
        def shape(name, part):
            if not hasattr(part, "get") or any(key not in part for key in ("heads", "kv_heads", "head_dim")):
                raise TypeError(f"{name}: expected a dict with heads, kv_heads, head_dim (and rope_theta); got "
                                f"{type(part).__name__}")
            return (_args.integer(f"{name}['heads']", part["heads"]), _args.integer(f"{name}['kv_heads']", part["kv_heads"]),
                    _args.integer(f"{name}['head_dim']", part["head_dim"]),
                    _args.real(f"{name}['rope_theta']", part.get("rope_theta", 10000.0)))

        parts = shape("lsa", lsa), shape("sa", sa), shape("ca", ca)
        self._place(_weights(weights, lambda name: True))
        self._native = _specdec.MoaDrafter(self._weights, *parts, _args.integer("target_layers", target_layers),
                                           _args.integer("target_head_dim", target_head_dim), _args.real("rms_eps", rms_eps),
                                           _args.integer("capacity", capacity))

    def add_verified(self, keys, values, first: int, count: int) -> None:
        def layers(name, arrays):
            if not isinstance(arrays, (list, tuple)):
                raise TypeError(f"{name}: expected one array per target layer (a list); got {type(arrays).__name__}")
            return [_f32(a, name) for a in arrays]

        keys, values = layers("keys", keys), layers("values", values)
        first, count = _args.integer("first", first), _args.integer("count", count)
        with self._lock:
            self._native.add_verified(keys, values, first, count, self._stream())

    def forward(self, x, positions, last: int = 1, mask=None):
        last = _args.integer("last", last, 0, self._rows("x", x), " (the rows of x)")
        features = self._out(last, self._native.hidden)
        positions = self._index(positions, "int64", "positions")
        with self._lock:
            self._native.forward(x, positions, features, mask, self._stream())
        return features

    @property
    def verified(self) -> int:
        return self._native.verified
