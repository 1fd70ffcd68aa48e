# SPDX-License-Identifier: Apache-2.0
"""DFlash's block drafter (C++: specdec/blocks/dflash.hpp) as a session: ``DFlashDrafter`` and
``dflash_target_layer_ids``. One of the drafter blocks of :mod:`specdec.blocks` (a module of its own for
that one's length; ``specdec`` and ``specdec.drafting`` export both), with the same rules: it runs where
its weights are (host arrays, or CUDA tensors in a CUDA build), its float inputs are viewed in place
(float32, 2-D, C-contiguous, on its device), its ``tokens`` and ``positions`` converted, and errors name
the argument (``TypeError`` for a kind or dtype, ``ValueError`` for a shape, device, capacity or what the
C++ side refuses)."""

from __future__ import annotations

import re

from . import _args, _specdec
from .blocks import _Cached, _shape_args, _weights

__all__ = ["DFlashDrafter", "dflash_target_layer_ids"]

#: The tensors a DFlash drafter reads besides its layers': its own (z-lab's names, no ``model.``
#: prefix) and the two the target lends.
_NAMES = frozenset({"fc.weight", "hidden_norm.weight", "norm.weight", "embed_tokens.weight", "lm_head.weight"})
_LAYER = re.compile(r"layers\.(\d+)\.")
#: dflash::config's bound on the drafter's layers.
_MAX_LAYERS = 4096


def dflash_target_layer_ids(target_layers: int, draft_layers: int) -> list[int]:
    """The target layers whose outputs a DFlash drafter reads when its checkpoint names none
    (specdec::blocks::dflash::target_layer_ids; z-lab's ``build_target_layer_ids``): one per drafter layer,
    ``round(1 + i (L - 4) / (draft_layers - 1))`` over a target of ``L = target_layers`` layers with
    Python's half-to-even rounding, or ``[L // 2]`` for one drafter layer. Ids count layer *outputs* from
    0 (Hugging Face's ``hidden_states[id + 1]``); Qwen3-8B (36 layers) with 5 drafter layers: ``[1, 9, 17,
    25, 33]``.

    ``target_layers``, ``draft_layers``: ints. Returns a list of ``draft_layers`` ints, the order
    :meth:`DFlashDrafter.append_context`'s features concatenate in. Raises ``TypeError`` (not integers) or
    ``ValueError`` (``draft_layers`` outside [1, 4096], a target of fewer than 4 layers, 2 for one drafter
    layer, or more than 2^20)."""
    return list(_specdec.dflash_target_layer_ids(_args.integer("target_layers", target_layers),
                                                 _args.integer("draft_layers", draft_layers)))


class DFlashDrafter(_Cached):
    """DFlash's block drafter (specdec::blocks::dflash; arXiv 2602.06036, z-lab/dflash's
    ``DFlashDraftModel``, the tensors SGLang's ``dflash.py`` loads), with its context cache: one forward
    drafts a whole block.

    ``weights``: a dict of arrays by z-lab's names (no ``model.`` prefix): ``fc.weight`` ``[E x K E]``,
    ``hidden_norm.weight`` and ``norm.weight`` ``[E]``, and per drafter layer i
    ``layers.{i}.input_layernorm.weight``, ``layers.{i}.post_attention_layernorm.weight``,
    ``layers.{i}.self_attn.{q,k,v,o}_proj.weight``, ``layers.{i}.self_attn.{q,k}_norm.weight``
    ``[head_dim]``, ``layers.{i}.mlp.{gate,up,down}_proj.weight``; plus the target's
    ``embed_tokens.weight`` and ``lm_head.weight`` ``[V x E]`` (a target with tied embeddings passes its
    table twice). Other names are ignored; arrays are converted to float32 once, viewed in place and kept
    alive. The layer count is the number of ``layers.{i}.`` indices; K (the target layers the features
    concatenate) is ``fc.weight``'s columns over E.

    Per step: :meth:`append_context` the target's features of the newly committed rows (the prompt's on the
    first step; later the last committed token and the accepted drafts), then :meth:`forward` the block
    ``[last committed token, mask_token, ...]`` (``block_size`` ids) at positions ``start ..
    start + block_size - 1``, ``start`` the last committed token's position; :meth:`logits` of rows 1 ..
    block_size - 1 give the drafts (each row's argmax proposes the token at ``start + j``). The block's
    rows never stay in the cache; :meth:`crop` rewinds the context.

    ``heads``, ``kv_heads``, ``head_dim``: the layers' attention shape (ints). ``rms_eps``: every norm's
    epsilon, q_norm / k_norm included (a real; Qwen3's 1e-6). ``rope_theta``: a real (the checkpoint's;
    Qwen3's 1000000.0). ``capacity``: the context cache's rows, context plus one block (an int in [1, 2^31
    - 1]). ``block_size``: the drafted block's length, an int in [2, 4096] (16 in every published
    drafter). ``mask_token``: the mask id, an int of the target's vocabulary (Qwen3: 151669). The
    constructor raises ``TypeError`` (``weights`` not a dict, a name that is not a str, an array that is
    not real numbers, an argument of the wrong kind) or ``ValueError`` (no ``layers.{i}.`` tensors, a
    weight missing or of another shape, weights on more than one device, ``mask_token`` outside [0, V),
    ``block_size`` or ``capacity`` out of range).
    """

    def __init__(self, weights, *, heads: int, kv_heads: int, head_dim: int, mask_token: int, block_size: int = 16,
                 rms_eps: float = 1e-6, rope_theta: float = 10000.0, capacity: int = 4096):
        shape = _shape_args(heads, kv_heads, head_dim, rms_eps, rope_theta, capacity)
        mask_token, block_size = _args.integer("mask_token", mask_token), _args.integer("block_size", block_size)
        self._place(_weights(weights, lambda name: name in _NAMES or _LAYER.match(name) is not None))
        indices = {int(m.group(1)) for m in map(_LAYER.match, self._weights) if m is not None}
        if not indices:
            raise ValueError('weights: expected the drafter\'s layers ("layers.0.input_layernorm.weight", ...); got none')
        if max(indices) >= _MAX_LAYERS:
            raise ValueError(f"weights: \"layers.{max(indices)}.\" names a layer past the {_MAX_LAYERS} a DFlash drafter "
                             "may have")
        # Layers are counted from 0 up to the largest index: a gap is a missing tensor, named by the C++ side.
        self._native = _specdec.DFlashDrafter(self._weights, shape, max(indices) + 1, block_size, mask_token)

    def append_context(self, features, positions) -> None:
        """Appends context rows to every layer's cache: ``ctx = hidden_norm(fc(features))``, then each
        layer's keys (k_norm, RoPE at ``positions``) and values of ctx.

        ``features``: float32 ``[N, K E]``, C-contiguous, on the drafter's device: row p the outputs of the
        target layers :func:`dflash_target_layer_ids` names (before any norm), concatenated in that order,
        at position ``positions[p]``. ``positions``: ``[N]`` integers (int64; the rows' absolute positions,
        the committed tokens after the cached ones). N may be 0. Returns None. Raises ``TypeError``
        (another dtype or kind) or ``ValueError`` (shapes, strides, device, rows past the capacity); on
        any error the cache is unchanged."""
        positions = self._index(positions, "int64", "positions")
        with self._lock:
            self._native.append_context(features, positions, self._stream())

    def forward(self, tokens, positions, out=None):
        """One drafting forward: the block's ``tokens`` at ``positions`` through every layer, attending the
        cached context and the whole block without a causal mask; writes the drafter's final norm of the
        last layer's rows. The block's keys are dropped again: :attr:`cache_size` is unchanged.

        ``tokens``: ``[T]`` target token ids in [0, V) (int32), T >= 1: the last committed token, then
        ``mask_token`` (T = ``block_size`` in the reference). ``positions``: ``[T]`` integers (int64),
        ``start .. start + T - 1``. ``out``: optional float32 ``[T, E]``, C-contiguous and writable, on the
        drafter's device. Returns ``out`` (or a new float32 ``[T, E]``), the rows :meth:`logits` takes.
        Raises ``TypeError`` (another dtype or kind) or ``ValueError`` (shapes, strides, device, a token
        out of range, no room for T rows beside the context)."""
        tokens, positions = self._index(tokens, "int32", "tokens"), self._index(positions, "int64", "positions")
        if out is None:
            out = self._out(int(tokens.shape[0]), self._native.hidden)
        with self._lock:
            self._native.forward(tokens, positions, out, self._stream())
        return out

    def logits(self, normed, out=None):
        """The target's LM head over ``normed`` (float32 ``[T, E]``, :meth:`forward`'s rows, on the
        drafter's device; the reference reads rows 1 .. block_size - 1 and drafts each row's argmax).
        ``out``: optional float32 ``[T, V]``, writable. Returns ``out`` (or a new float32 ``[T, V]``).
        Raises ``TypeError`` (not a float32 array) or ``ValueError`` (shape, strides, device)."""
        if out is None:
            out = self._out(self._rows("normed", normed), self._native.vocab)
        self._native.logits(normed, out, self._stream())
        return out

    @property
    def hidden(self) -> int:
        """E, the drafter's width (the target's: ``embed_tokens.weight``'s columns)."""
        return self._native.hidden

    @property
    def vocab(self) -> int:
        """V, the target's vocabulary (``embed_tokens.weight``'s and ``lm_head.weight``'s rows)."""
        return self._native.vocab

    @property
    def layers(self) -> int:
        """The drafter's decoder layers (the ``layers.{i}.`` indices of its weights)."""
        return self._native.layers

    @property
    def feature_layers(self) -> int:
        """K, the target layers whose outputs :meth:`append_context`'s features concatenate."""
        return self._native.feature_layers

    @property
    def block_size(self) -> int:
        """The tokens one forward drafts from, the last committed one included (its drafts: one fewer)."""
        return self._native.block_size

    @property
    def mask_token(self) -> int:
        """The mask id filling the block after its first token, an id of the target's vocabulary."""
        return self._native.mask_token
