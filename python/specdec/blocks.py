# SPDX-License-Identifier: Apache-2.0
"""The drafter blocks (C++: specdec/blocks) as sessions: ``DecoderLayer``, ``eagle_fuse``,
``Eagle3Block``, ``MtpModule``, ``JakiroLayer``, ``AmphistaHeads``, ``MoaDrafter`` (and DFlash's
``DFlashDrafter``, in specdec/_dflash.py on these classes).

A block runs where its weights are: numpy arrays or CPU tensors on the host (outputs numpy arrays), or
in a CUDA build torch tensors on one CUDA device (outputs CUDA tensors there, each call on the current
stream). Weights are a dict of arrays by checkpoint name, converted to float32 once (kept alive, viewed
in place when already float32 and C-contiguous). A call's float arrays (``x``, ``hidden``, ``feature``,
``taps``, ...) are viewed, not copied: float32, 2-D, C-contiguous and on the block's device; its
``tokens`` and ``positions`` are converted (lists, integer arrays or tensors, range-checked to int32 /
int64). Errors name the argument: ``TypeError`` for an argument of the wrong kind or dtype (the dtype
received named), ``ValueError`` for a shape, stride, device, a read-only output, rows that do not fit
the KV cache, or what the C++ side refuses (a token outside the vocabulary, a weight of the wrong
shape)."""

from __future__ import annotations

import sys
import threading

import numpy as np

from . import _args, _specdec
from ._common import _stream
from .tree import _int32, _is_torch_tensor

__all__ = ["DecoderLayer", "eagle_fuse", "Eagle3Block", "MtpModule", "JakiroLayer", "AmphistaHeads", "MoaDrafter"]


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
        """The CUDA stream the block's calls are enqueued on (0 on the host)."""
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
        """The rows held in the block's KV cache (each stage's, for :class:`AmphistaHeads`; the
        self-attention cache's, for :class:`MoaDrafter`)."""
        return self._native.cache_size

    def crop(self, n: int) -> None:
        """Keeps the first ``n`` rows of the block's KV cache(s) (the tokens verified so far) and drops
        the rest. ``n``: an int in [0, cache_size]. Returns None. Raises ``TypeError`` (not an integer) or
        ``ValueError`` (out of range)."""
        n = _args.integer("n", n)
        with self._lock:
            self._native.crop(n)


class _TreeCached(_Cached):
    def keep(self, prefix: int, offsets) -> None:
        """Keeps the cache's first ``prefix`` rows, then rows ``prefix + offsets[i]`` in order (a tree's
        accepted path, ascending), dropping the rest.

        ``prefix``: an int in [0, cache_size]. ``offsets``: ascending ints ``[m]``, each below ``cache_size -
        prefix`` (a list, or a host integer array: host bookkeeping whatever the block's device). Returns
        None. Raises ``TypeError`` (not integers) or ``ValueError`` (out of range, not ascending)."""
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

    ``heads``, ``kv_heads``, ``head_dim``: the attention's shape (ints; the projections must be
    ``[heads head_dim x E]`` and ``[kv_heads head_dim x E]``). ``rms_eps``, ``rope_theta``: reals.
    ``input_norm``: a bool. ``capacity``: the KV cache's rows, an int in [1, 2^31 - 1]. ``prefix``: a str.
    The constructor raises ``TypeError`` (``weights`` not a dict, a name that is not a str, an array that
    is not real numbers, an argument of the wrong kind) or ``ValueError`` (a weight missing or of another
    shape, weights on more than one device, a capacity out of range).
    """

    def __init__(self, weights, *, heads: int, kv_heads: int, head_dim: int, rms_eps: float = 1e-5,
                 rope_theta: float = 10000.0, input_norm: bool = True, capacity: int = 4096, prefix: str = ""):
        prefix = _prefix(prefix)
        shape = _shape_args(heads, kv_heads, head_dim, rms_eps, rope_theta, capacity)
        self._place(_weights(weights, lambda name: name.startswith(prefix)))
        input_norm = _args.flag("input_norm", input_norm)
        self._native = _specdec.DecoderLayer(self._weights, prefix, shape, input_norm)

    def forward(self, x, positions, mask=None):
        """The layer over ``x``'s rows, attending the cache and themselves; their keys and values are
        appended to the cache.

        ``x``: float32 ``[T, E]``, C-contiguous and writable, on the block's device: the residual stream,
        updated in place and returned. ``positions``: ``[T]`` integers (RoPE positions; int64). ``mask``:
        None (causal), ``"none"`` (every row attends every key), or ``[T, cache_size + T]`` on the block's
        device: bool / uint8 (nonzero: allowed; ``DraftTree.mask(cache_size)`` for a tree) or float32
        (added: 0 / -inf). Returns ``x``. Raises ``TypeError`` (``x`` or ``mask`` of another dtype or kind,
        positions not integers) or ``ValueError`` (shapes, strides, device, a read-only ``x``, rows past
        the cache's capacity, a row that attends nothing)."""
        positions = self._index(positions, "int64", "positions")
        with self._lock:
            self._native.forward(x, positions, mask, self._stream())
        return x

    def keys(self):
        """The cached keys ``[cache_size x kv_heads head_dim]`` (after RoPE), a copy where the block runs."""
        return self._cached(True)

    def values(self):
        """The cached values ``[cache_size x kv_heads head_dim]``, a copy where the block runs."""
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
    ``DecoderLayer(..., input_norm=False)`` on the result; the target's LM head gives the draft logits.

    E is ``fc_weight``'s rows; every other argument is checked against it. The matrices are float32,
    C-contiguous, in one memory: host (numpy or CPU torch) or, in a CUDA build, CUDA tensors on
    ``embed``'s device (``tokens`` moved there). ``out``: optional float32 ``[T x E]``, writable; returned
    (a new array of ``embed``'s kind otherwise). Raises ``TypeError`` (not an array, another dtype,
    tokens not integers) or ``ValueError`` (a shape, strides, device, a read-only ``out``, a token outside
    [0, V))."""

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

    ``heads``, ``kv_heads``, ``head_dim``, ``rms_eps``, ``rope_theta`` and ``capacity`` as
    :class:`DecoderLayer`'s (a checkpoint's ``d2t`` entry is ignored here). The constructor raises as
    :class:`DecoderLayer`'s.
    """

    def __init__(self, weights, *, heads: int, kv_heads: int, head_dim: int, rms_eps: float = 1e-5,
                 rope_theta: float = 10000.0, capacity: int = 4096):
        shape = _shape_args(heads, kv_heads, head_dim, rms_eps, rope_theta, capacity)
        self._place(_weights(weights, lambda name: name != "d2t"))
        self._native = _specdec.Eagle3Block(self._weights, shape)

    def fuse(self, taps):
        """EAGLE-3's fusion of the target's tapped states: ``fc(taps)``, the draft layer's first
        ``hidden``. ``taps``: float32 ``[T, 3 E_t]`` on the block's device. Returns a new float32 ``[T,
        E]``. Raises ``TypeError`` (not a float32 array) or ``ValueError`` (shape, strides, device)."""
        out = self._out(self._rows("taps", taps), self._native.hidden)
        self._native.fuse(taps, out, self._stream())
        return out

    def forward(self, tokens, hidden, positions, mask=None, out=None):
        """The draft layer over the cache and these rows; their keys and values join the cache.

        ``tokens``: ``[T]`` target token ids in [0, V) (int32). ``hidden``: float32 ``[T, E]`` on the
        block's device (the fused features, then the previous step's ``h2`` rows). ``positions``: ``[T]``
        integers (int64). ``mask``: as :meth:`DecoderLayer.forward`'s, ``[T, cache_size + T]``. ``out``:
        optional float32 ``[T, E]``, writable. Returns ``h2`` (``out``, or a new float32 ``[T, E]``).
        Raises ``TypeError`` (another dtype or kind) or ``ValueError`` (shapes, strides, device, a token out
        of range, rows past the cache's capacity)."""
        if out is None:
            out = self._out(self._rows("hidden", hidden), self._native.hidden)
        tokens, positions = self._index(tokens, "int32", "tokens"), self._index(positions, "int64", "positions")
        with self._lock:
            self._native.forward(tokens, hidden, positions, mask, out, self._stream())
        return out

    def logits(self, h2):
        """The draft logits of ``h2`` (float32 ``[T, E]``, :meth:`forward`'s output, on the block's
        device): a new float32 ``[T, V_d]`` (``norm`` then ``lm_head``). Raises ``TypeError`` (not a float32
        array) or ``ValueError`` (shape, strides, device)."""
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

    ``heads``, ``kv_heads``, ``head_dim``, ``rms_eps``, ``rope_theta`` and ``capacity`` as
    :class:`DecoderLayer`'s; ``prefix`` a str; ``zero_embedding_at_position_0`` a bool. The constructor
    raises as :class:`DecoderLayer`'s.
    """

    def __init__(self, weights, *, heads: int, kv_heads: int, head_dim: int, prefix: str = "", rms_eps: float = 1e-6,
                 rope_theta: float = 10000.0, zero_embedding_at_position_0: bool = True, capacity: int = 4096):
        prefix = _prefix(prefix)
        shape = _shape_args(heads, kv_heads, head_dim, rms_eps, rope_theta, capacity)
        self._place(_weights(weights, lambda name: name.startswith(prefix) or name == "embed_tokens.weight"))
        self._native = _specdec.MtpModule(self._weights, prefix, shape,
                                          _args.flag("zero_embedding_at_position_0", zero_embedding_at_position_0))

    def forward(self, tokens, hidden, positions, mask=None, out=None, projected=None):
        """The module over the cache and these rows; their keys and values join the cache.

        ``tokens``: ``[T]`` token ids in [0, V) (int32). ``hidden``: float32 ``[T, E]`` on the module's
        device. ``positions``: ``[T]`` integers (int64). ``mask``: as :meth:`DecoderLayer.forward`'s.
        ``out``, ``projected``: optional float32 ``[T, E]``, writable (``projected`` receives the decoder
        layer's input). Returns ``o`` (``out``, or a new float32 ``[T, E]``). Raises ``TypeError``
        (another dtype or kind) or ``ValueError`` (shapes, strides, device, a token out of range, rows past
        the cache's capacity)."""
        if out is None:
            out = self._out(self._rows("hidden", hidden), self._native.hidden)
        tokens, positions = self._index(tokens, "int32", "tokens"), self._index(positions, "int64", "positions")
        with self._lock:
            self._native.forward(tokens, hidden, positions, mask, out,
                                 projected if projected is not None else np.empty(0, dtype=np.float32), self._stream())
        return out

    def logits(self, o):
        """The target-vocabulary logits of ``o`` (float32 ``[T, E]``, :meth:`forward`'s output, on the
        module's device): a new float32 ``[T, V]`` (``shared_head.norm`` then ``shared_head.head``). Raises
        ``TypeError`` (not a float32 array) or ``ValueError`` (shape, strides, device)."""
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

    ``heads``, ``kv_heads``, ``head_dim``, ``rms_eps``, ``rope_theta`` and ``capacity`` as
    :class:`DecoderLayer`'s. The constructor raises as :class:`DecoderLayer`'s.
    """

    def __init__(self, weights, *, heads: int, kv_heads: int, head_dim: int, rms_eps: float = 1e-5,
                 rope_theta: float = 10000.0, capacity: int = 4096):
        shape = _shape_args(heads, kv_heads, head_dim, rms_eps, rope_theta, capacity)
        self._place(_weights(weights, lambda name: True))
        self._native = _specdec.JakiroLayer(self._weights, shape)

    def forward(self, tokens, feature, positions, mask=None, contrastive: bool = False):
        """The layer over the cache and these rows; their keys and values join the cache.

        ``tokens``: ``[T]`` token ids in [0, V) (int32). ``feature``: float32 ``[T, E]`` on the layer's
        device. ``positions``: ``[T]`` integers (int64). ``mask``: as :meth:`DecoderLayer.forward`'s.
        ``contrastive``: a bool. Returns ``left`` (a new float32 ``[T, E]``) or ``(left, right)``. Raises
        ``TypeError`` (another dtype or kind) or ``ValueError`` (shapes, strides, device, a token out of
        range, rows past the cache's capacity)."""
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

    ``heads``, ``kv_heads``, ``head_dim``, ``rms_eps``, ``rope_theta`` and ``capacity`` as
    :class:`DecoderLayer`'s (the stages' caches); K is the number of ``auto.heads.{k}.weight``;
    ``stage1_heads``: None (K // 2) or an int in [0, K]. The constructor raises as
    :class:`DecoderLayer`'s.
    """

    def __init__(self, weights, *, heads: int, kv_heads: int, head_dim: int, stage1_heads=None, rms_eps: float = 1e-5,
                 rope_theta: float = 10000.0, capacity: int = 4096):
        shape = _shape_args(heads, kv_heads, head_dim, rms_eps, rope_theta, capacity)
        self._place(_weights(weights, lambda name: True))
        k = sum(1 for name in self._weights if name.startswith("auto.heads.") and name.endswith(".weight"))
        stage1 = k // 2 if stage1_heads is None else _args.integer("stage1_heads", stage1_heads)
        self._native = _specdec.AmphistaHeads(self._weights, shape, k, stage1)

    def forward(self, feature, embedding, positions, intermediates: bool = False):
        """The heads' logits for the last of these rows; the rows join both stages' caches.

        ``feature``, ``embedding``: float32 ``[T, E]`` (T >= 1) on the heads' device. ``positions``: ``[T]``
        integers (int64). ``intermediates``: a bool. Returns float32 ``[K, V]`` logits, or with
        ``intermediates`` a dict of new arrays ``s1``, ``s2`` ``[T, E]``, ``z``, ``u``, ``o`` ``[K, E]`` and
        ``logits`` ``[K, V]``. Raises ``TypeError`` (another dtype or kind) or ``ValueError`` (shapes,
        strides, device, rows past the caches' capacity)."""
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

    ``weights`` as the other blocks' (a dict by checkpoint name). ``lsa``, ``sa``, ``ca``: dicts with int
    ``heads``, ``kv_heads``, ``head_dim`` and a real ``rope_theta`` (default 10000.0). ``target_layers``:
    the target's layer count L (an int >= 1); ``target_head_dim``: its head_dim (an int >= 1).
    ``rms_eps``: a real. ``capacity``: each cache's rows, an int in [1, 2^31 - 1]. The constructor raises
    ``TypeError`` (a part that is not such a dict, an argument of the wrong kind, an array that is not real
    numbers) or ``ValueError`` (a weight missing or of another shape, widths that disagree, a capacity
    out of range).
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
        """Queues target tokens ``[first, first + count)`` as verified: their key/value stream is computed
        now and joins the cross-attention at the next :meth:`forward`.

        ``keys``, ``values``: lists of ``target_layers`` arrays, layer l's cache rows ``[tokens, kv_heads
        head_dim]`` (post-RoPE, at least ``first + count`` rows; real numbers, converted to float32 on the
        drafter's device). ``first``: the next unverified token (an int, :attr:`verified`). ``count``: an
        int >= 0. Returns None. Raises ``TypeError`` (not lists of arrays, not real numbers, not integers)
        or ``ValueError`` (a layer count or width, ``first`` not :attr:`verified`, rows short, the
        capacity exceeded)."""
        def layers(name, arrays):
            if not isinstance(arrays, (list, tuple)):
                raise TypeError(f"{name}: expected one array per target layer (a list); got {type(arrays).__name__}")
            return [_f32(a, name) for a in arrays]

        keys, values = layers("keys", keys), layers("values", values)
        first, count = _args.integer("first", first), _args.integer("count", count)
        with self._lock:
            self._native.add_verified(keys, values, first, count, self._stream())

    def forward(self, x, positions, last: int = 1, mask=None):
        """Self-attention over the new tokens (their rows join the self-attention cache), then
        cross-attention of the last ``last`` rows over every verified token.

        ``x``: float32 ``[n, E]``, C-contiguous and writable, on the drafter's device: the new tokens'
        embeddings, updated in place. ``positions``: ``[n]`` integers (int64). ``last``: an int in [1, n].
        ``mask``: as :meth:`DecoderLayer.forward`'s, ``[n, cache_size + n]``. Returns the features, a new
        float32 ``[last, E]``. Raises ``TypeError`` (another dtype or kind) or ``ValueError`` (shapes,
        strides, device, a read-only ``x``, ``last`` out of range, rows past the cache's capacity)."""
        last = _args.integer("last", last, 1, self._rows("x", x), " (the rows of x)")
        features = self._out(last, self._native.hidden)
        positions = self._index(positions, "int64", "positions")
        with self._lock:
            self._native.forward(x, positions, features, mask, self._stream())
        return features

    @property
    def verified(self) -> int:
        """The target tokens whose key/value stream exists (cached or queued): the next
        :meth:`add_verified`'s ``first``."""
        return self._native.verified
