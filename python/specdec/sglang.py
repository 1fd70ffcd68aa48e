# SPDX-License-Identifier: Apache-2.0
"""SGLang's sgl-kernel speculative kernels under their names (C++: specdec/interop/sglang*.hpp)."""

from __future__ import annotations

from . import _args, _specdec
from ._common import _stream

__all__ = ["verify_tree_greedy", "tree_speculative_sampling_target_only", "build_tree_kernel_efficient"]


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
                                          uniform_samples_for_final_sampling, target_probs, draft_probs=None,
                                          threshold_single=1.0, threshold_acc=1.0, deterministic=True, cuda_stream=0):
    """SGLang's ``sgl_kernel.tree_speculative_sampling_target_only``: sampled verification of link-encoded
    trees against the target alone (SGLang's coin rule; ``threshold_single = threshold_acc = 1`` is
    lossless sampling), outputs written in place as ``verify_tree_greedy``'s.

    uniform_samples: float32 ``[batch, N]`` (the coin at node i is entry i);
    uniform_samples_for_final_sampling: float32 ``[batch]``; target_probs: float32 ``[batch, N, V]``.
    ``draft_probs`` is not read (target-only, as SGLang's kernel); ``threshold_acc`` is clamped to >= 1e-9
    as SGLang's launcher does. Parents must precede their children in node order (build_tree's order).
    Host arrays, or (a CUDA build) CUDA tensors, all on one device: then one kernel, one block per
    request, on ``cuda_stream`` (0: the current stream of ``candidates``).
    """
    del draft_probs, deterministic
    stream = _args.integer("cuda_stream", cuda_stream, 0, _args.UINT64_END - 1) or _stream(candidates)
    _specdec.tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                                   retrive_next_token, retrive_next_sibling, uniform_samples,
                                                   uniform_samples_for_final_sampling, target_probs,
                                                   _args.real("threshold_single", threshold_single),
                                                   _args.real("threshold_acc", threshold_acc), stream)


def build_tree_kernel_efficient(parent_list, selected_index, verified_seq_len, tree_mask, positions, retrive_index,
                                retrive_next_token, retrive_next_sibling, topk, depth, draft_token_num, tree_mask_mode):
    """SGLang's ``sgl_kernel.build_tree_kernel_efficient``: the tree buffers of a batch of EAGLE trees,
    written in place.

    parent_list: int64 ``[batch, 1 + topk * (depth - 1)]``; selected_index: int64 ``[batch, N - 1]``
    (``organize_draft_results``'s); verified_seq_len: int64 ``[batch]``; positions: int64 ``[batch * N]``;
    retrive_index / retrive_next_token / retrive_next_sibling: int64 ``[batch, N]``; tree_mask: for mode 0
    (FULL_MASK) bools of ``sum_b N (seq_len_b + N)``, mode 1 (QLEN_ONLY) ``batch * N * N`` bools, mode 2
    (QLEN_ONLY_BITPACKING) ``batch * N`` items of 1, 2 or 4 bytes (N <= 8, 16, 32). ``depth`` is SGLang's
    ``spec_steps``. Every entry of the outputs is written, the whole mask included (SGLang's kernel
    relies on its caller filling the mask with True first; the result is the same). Host arrays, or CUDA
    tensors (one kernel on the current stream, one block per request).
    """
    _specdec.build_tree_kernel_efficient(parent_list, selected_index, verified_seq_len, tree_mask, positions, retrive_index,
                                         retrive_next_token, retrive_next_sibling, _args.integer("topk", topk),
                                         _args.integer("depth", depth), _args.integer("draft_token_num", draft_token_num),
                                         _args.integer("tree_mask_mode", tree_mask_mode, 0, 2), _stream(verified_seq_len))
