# SPDX-License-Identifier: Apache-2.0
"""SGLang's sgl-kernel speculative kernels under their names (C++: specdec/interop/sglang*.hpp)."""

from __future__ import annotations

import sys

import numpy as np

from . import _args, _specdec
from ._args import is_torch as _is_torch
from ._common import _stream

# segment_packbits (sgl-kernel's in-place form) stays in this module: specdec.segment_packbits is FlashInfer's.
__all__ = ["verify_tree_greedy", "tree_speculative_sampling_target_only", "tree_speculative_sampling_target_only_rejmask",
           "chain_speculative_sampling_target_only", "build_tree_kernel_efficient", "reconstruct_indices_from_tree_mask"]


# ---- SGLang ------------------------------------------------------------------------------------------


def verify_tree_greedy(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
                       retrive_next_sibling, target_predict, cuda_stream=0):
    """SGLang's ``sgl_kernel.verify_tree_greedy``, writing its three outputs in place.

    predicts: int32 ``[batch * N]`` (the accepted token at each accepted node, the bonus at the last,
    -1 elsewhere); accept_index: int32 ``[batch, num_spec_step]`` (retrive_index of accepted nodes, root
    first, -1 padded); accept_token_num: int32 ``[batch]``. candidates, retrive_index,
    retrive_next_token, retrive_next_sibling: int64 ``[batch, N]`` (``build_tree_kernel_efficient``'s);
    target_predict: int64 ``[batch, N]`` (or ``[batch * N]``), the target's argmax per node.
    Host arrays, or (a CUDA build) CUDA tensors, all on one device: then one kernel, one block per
    request, on ``cuda_stream`` (0: the current stream of ``candidates``).
    """
    stream = _args.integer("cuda_stream", cuda_stream, 0, _args.UINT64_END - 1) or _stream(candidates)
    _specdec.verify_tree_greedy(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                retrive_next_token, retrive_next_sibling, target_predict, stream)


def tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                          retrive_next_token, retrive_next_sibling, uniform_samples,
                                          uniform_samples_for_final_sampling, target_probs, *rest, draft_probs=None,
                                          threshold_single=1.0, threshold_acc=1.0, deterministic=True, cuda_stream=0):
    """SGLang's ``sgl_kernel.tree_speculative_sampling_target_only``: sampled verification of link-encoded
    trees against the target alone, outputs written in place as ``verify_tree_greedy``'s.

    Accept rule (sgl-kernel 0.3.21's): at each node the children are tried in sibling order, each adding
    its target probability p to a running mass, and a child is accepted iff ``coin <= mass /
    threshold_acc`` or ``p >= threshold_single`` (``threshold_single = threshold_acc = 1``: lossless
    sampling); the final token is drawn from the last accepted node's target row with the rejected
    children's tokens removed. uniform_samples: float32 ``[batch, N]`` in [0, 1) (the coin at node i is
    entry i); uniform_samples_for_final_sampling: float32 ``[batch]``; target_probs: float32 ``[batch, N,
    V]``, or on the host float16 / bfloat16 (SGLang's target softmax in the model's dtype), read as they
    are, with the float32 rows' results bit for bit (a final row may sum to 1 within 1e-4 plus its type's
    rounding); predicts int32 ``[batch * N]``, accept_index int32 ``[batch, num_spec_step]``, accept_token_num
    int32 ``[batch]``; candidates, retrive_index, retrive_next_token, retrive_next_sibling int64 ``[batch,
    N]``. ``threshold_acc`` is clamped to >= 1e-9 as SGLang's launcher does; ``deterministic`` (SGLang's
    choice of prefix-sum kernel) changes nothing here: the draw is always deterministic. Parents must precede their
    children in node order (build_tree's order).

    Both argument orders are taken: sgl-kernel 0.3.21's, whose 11th argument is ``draft_probs`` (an array:
    neither read nor written here; SGLang passes zeros and discards them, which the removal of rejected
    tokens reproduces; any dtype), and the newer one without it, whose 11th is ``threshold_single`` (a number).
    Host arrays, or (a CUDA build) CUDA tensors, all on one device: then one kernel, one block per
    request, on ``cuda_stream`` (0: the current stream of ``candidates``). Raises TypeError / ValueError
    naming the argument at fault (a coin outside [0, 1), a threshold outside [0, 1], a malformed tree).
    """
    given = {"draft_probs": draft_probs, "threshold_single": threshold_single, "threshold_acc": threshold_acc,
             "deterministic": deterministic, "cuda_stream": cuda_stream}
    if rest:
        old_order = rest[0] is None or hasattr(rest[0], "shape") or isinstance(rest[0], (list, tuple))
        names = ("draft_probs", "threshold_single", "threshold_acc", "deterministic", "cuda_stream")
        names = names if old_order else names[1:]
        if len(rest) > len(names):
            raise TypeError(f"tree_speculative_sampling_target_only: at most {10 + len(names)} positional arguments; got "
                            f"{10 + len(rest)}")
        defaults = {"draft_probs": None, "threshold_single": 1.0, "threshold_acc": 1.0, "deterministic": True, "cuda_stream": 0}
        for name, value in zip(names, rest):
            if given[name] is not None if name == "draft_probs" else given[name] != defaults[name]:
                raise TypeError(f"tree_speculative_sampling_target_only: {name} given twice (by position and by keyword)")
            given[name] = value
    _args.flag("deterministic", given["deterministic"])
    stream = _args.integer("cuda_stream", given["cuda_stream"], 0, _args.UINT64_END - 1) or _stream(candidates)
    _specdec.tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                                   retrive_next_token, retrive_next_sibling, uniform_samples,
                                                   uniform_samples_for_final_sampling, target_probs,
                                                   _args.real("threshold_single", given["threshold_single"]),
                                                   _args.real("threshold_acc", given["threshold_acc"]), stream)


def tree_speculative_sampling_target_only_rejmask(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                                  retrive_next_token, retrive_next_sibling, uniform_samples,
                                                  uniform_samples_for_final_sampling, target_probs, threshold_single=1.0,
                                                  threshold_acc=1.0, deterministic=True, cuda_stream=0):
    """sgl-kernel's ``tree_speculative_sampling_target_only_rejmask`` (sgl-kernel PR #15687, not in a
    release yet): the tree verifier without ``draft_probs``, the rejected tokens removed from the final
    draw by a mask. Its results equal ``tree_speculative_sampling_target_only``'s (the PR's tests assert
    it), which this is; SGLang's kernel takes trees of at most 4 children per node, specdec's any tree.
    Arguments, outputs and errors as ``tree_speculative_sampling_target_only`` (new order).
    Arguments: ``predicts``, ``accept_index``, ``accept_token_num`` (outputs), ``candidates``,
    ``retrive_index``, ``retrive_next_token``, ``retrive_next_sibling``, ``uniform_samples``,
    ``uniform_samples_for_final_sampling``, ``target_probs``, ``threshold_single``, ``threshold_acc``,
    ``deterministic``, ``cuda_stream``.
    """
    tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
                                          retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling,
                                          target_probs, threshold_single=threshold_single, threshold_acc=threshold_acc,
                                          deterministic=deterministic, cuda_stream=cuda_stream)


def chain_speculative_sampling_target_only(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                           retrive_next_token, retrive_next_sibling, uniform_samples,
                                           uniform_samples_for_final_sampling, target_probs, threshold_single=1.0,
                                           threshold_acc=1.0, deterministic=True, cuda_stream=0):
    """sgl-kernel's ``chain_speculative_sampling_target_only`` (sgl-kernel PR #15687, not in a release
    yet): the verifier of ``tree_speculative_sampling_target_only`` for chains (top-k 1): only
    ``retrive_next_token`` is followed (``retrive_next_sibling`` is not read), the walk stops at the first
    rejection, and the final token is drawn from the last accepted node's target row with the rejected
    token removed. Arguments, outputs and errors as ``tree_speculative_sampling_target_only`` (new order).
    (SGLang's kernel falls back to token V - 1 where that row has no mass left, which a distribution
    never reaches: its rejected token would have carried the whole mass and been accepted.)
    Arguments: ``predicts``, ``accept_index``, ``accept_token_num`` (outputs), ``candidates``,
    ``retrive_index``, ``retrive_next_token``, ``retrive_next_sibling``, ``uniform_samples``,
    ``uniform_samples_for_final_sampling``, ``target_probs``, ``threshold_single``, ``threshold_acc``,
    ``deterministic``, ``cuda_stream``.
    """
    if _is_torch(retrive_next_sibling):
        no_siblings = sys.modules["torch"].full_like(retrive_next_sibling, -1)
    else:
        no_siblings = np.full_like(_args.integers("retrive_next_sibling", retrive_next_sibling, "int64", ndim=_args.ndim(retrive_next_sibling)), -1)
    tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
                                          no_siblings, uniform_samples, uniform_samples_for_final_sampling, target_probs,
                                          threshold_single=threshold_single, threshold_acc=threshold_acc,
                                          deterministic=deterministic, cuda_stream=cuda_stream)


def segment_packbits(x, input_indptr, output_indptr, y, batch_size):
    """sgl-kernel's ``segment_packbits``, in place: segment b of bool (or uint8) ``x``,
    ``x[input_indptr[b]:input_indptr[b + 1]]``, packed little-endian (bit j of a byte is entry 8 i + j:
    SGLang's masks) into ``y[output_indptr[b]:]`` (uint8), zero-padded, for the first ``batch_size``
    segments. input_indptr / output_indptr: int32 ``[>= batch_size + 1]``, ``output_indptr`` the exclusive
    sum of ``ceil(length / 8)`` (the caller's, as SGLang's). Host arrays or CUDA tensors (one device), on
    the current stream. This is ``specdec.sglang.segment_packbits``; ``specdec.segment_packbits`` is
    FlashInfer's (which returns its outputs). Raises ValueError naming the argument (offsets out of
    range or not matching the segments, a ``y`` too short)."""
    batch_size = _args.integer("batch_size", batch_size, 0, _args.INT32_MAX - 1)
    for name, ip in (("input_indptr", input_indptr), ("output_indptr", output_indptr)):
        if _args.shape(name, ip, 1)[0] < batch_size + 1:
            raise ValueError(f"{name}: expected at least batch_size + 1 = {batch_size + 1} offsets; got {ip.shape[0]}")
    # The packed segments end at output_indptr[batch_size]: y's bytes past it are not the call's (the C++
    # call checks that the offsets end at its output's size). A CUDA offset is read back (one sync).
    end = int(output_indptr[batch_size])
    if _args.shape("y", y, 1)[0] < end:
        raise ValueError(f"y: expected at least output_indptr[batch_size] = {end} bytes; got {y.shape[0]}")
    _specdec.segment_packbits(x, input_indptr[:batch_size + 1], output_indptr[:batch_size + 1], True, y[:end], _stream(x))


def reconstruct_indices_from_tree_mask(tree_mask, verified_seq_len, positions, retrive_index, retrive_next_token,
                                       retrive_next_sibling, batch_size, draft_token_num):
    """SGLang's ``sgl_kernel.reconstruct_indices_from_tree_mask`` (its n-gram worker's tree buffers), written
    in place: for request b's node i, with ``tree_mask[b, i, j]`` (bool or uint8, ``batch_size * N * N``
    entries, N = ``draft_token_num``, C-contiguous; nonzero: j is an ancestor of i, only j < i read)
    giving its ancestors: ``positions[b N + i]`` = ``verified_seq_len[b]`` + the number of ancestors,
    ``retrive_index[b, i]`` = b N + i, ``retrive_next_token[b, i]`` the first later node descending from
    it (its first child where ancestors precede descendants) or -1, ``retrive_next_sibling[b, i]`` the
    first later node with the same parent (the last ancestor before it) or -1. verified_seq_len: int64
    ``[batch_size]``; positions int64 ``[batch_size * N]``; the three ``retrive_*`` int64 ``[batch_size,
    N]``. Host arrays, or (a CUDA build) CUDA tensors, all on one device: one kernel, one block per
    request, on the current stream. Raises TypeError / ValueError naming the argument (a shape or dtype,
    N outside [1, 2^16], a sequence length outside [0, 2^40], outputs overlapping)."""
    _specdec.reconstruct_indices_from_tree_mask(tree_mask, verified_seq_len, positions, retrive_index, retrive_next_token,
                                                retrive_next_sibling, _args.integer("batch_size", batch_size, 0, _args.INT32_MAX),
                                                _args.integer("draft_token_num", draft_token_num, 1, 1 << 16),
                                                _stream(verified_seq_len))


def build_tree_kernel_efficient(parent_list, selected_index, verified_seq_len, tree_mask, positions, retrive_index,
                                retrive_next_token, retrive_next_sibling, topk, depth, draft_token_num, tree_mask_mode):
    """SGLang's ``sgl_kernel.build_tree_kernel_efficient``: the tree buffers of a batch of EAGLE trees,
    written in place.

    parent_list: int64 ``[batch, 1 + topk * (depth - 1)]``; selected_index: int64 ``[batch, N - 1]``
    (``organize_draft_results``'s); verified_seq_len: int64 ``[batch]``; positions: int64 ``[batch * N]``;
    retrive_index / retrive_next_token / retrive_next_sibling: int64 ``[batch, N]``; tree_mask: for mode 0
    (FULL_MASK) bools of ``sum_b N (seq_len_b + N)``, mode 1 (QLEN_ONLY) ``batch * N * N`` bools, mode 2
    (QLEN_ONLY_BITPACKING) ``batch * N`` items of 1, 2 or 4 bytes (N <= 8, 16, 32). ``depth`` is SGLang's
    ``spec_steps``, ``draft_token_num`` its N (nodes per tree, root included), ``tree_mask_mode`` 0, 1 or
    2 as above. Every entry of the outputs is written, the whole mask included (SGLang's kernel
    relies on its caller filling the mask with True first; the result is the same). Host arrays, or CUDA
    tensors (one kernel on the current stream, one block per request).
    """
    _specdec.build_tree_kernel_efficient(parent_list, selected_index, verified_seq_len, tree_mask, positions, retrive_index,
                                         retrive_next_token, retrive_next_sibling, _args.integer("topk", topk),
                                         _args.integer("depth", depth), _args.integer("draft_token_num", draft_token_num),
                                         _args.integer("tree_mask_mode", tree_mask_mode, 0, 2), _stream(verified_seq_len))
