# SPDX-License-Identifier: Apache-2.0
"""specdec from Python: speculative-decoding primitives over specdec's C++ headers.

Functions take numpy arrays or torch tensors without copying them (DLPack / the buffer protocol; in a
CUDA build, see ``cuda``, the engine-facing kernels also take CUDA tensors and run on their device) and
return arrays of the same kind. specdec's row primitives (``argmax``, ``topk``, ``softmax``,
``log_softmax``, ``logsumexp``) come with it. Where a peer's function of the same name exists, the name, the
argument order and the outputs are the peer's, so an engine swaps specdec in without reshaping:

- FlashInfer (``flashinfer.sampling``, ``flashinfer.quantization``): ``top_k_renorm_probs``,
  ``top_p_renorm_probs``, ``top_k_mask_logits``, ``sampling_from_probs``,
  ``top_k_top_p_sampling_from_logits``, ``chain_speculative_sampling``,
  ``segment_packbits``;
- vLLM v1: ``rejection_sample`` (its rejection sampler's layout), ``apply_sampling_constraints``,
  ``apply_top_k_top_p``;
- SGLang (``sgl_kernel``): ``verify_tree_greedy``, ``tree_speculative_sampling_target_only``,
  ``build_tree_kernel_efficient``;
- Arctic Inference (vLLM's ``suffix`` method): ``SuffixDecodingCache``, ``SuffixTree``.

specdec's own drafting side (``specdec.drafting``: the modules ``tree``, ``mask``, ``suffix``, ``policy``,
``sampling`` and ``blocks``, named after the C++ folders): ``DraftTree`` and its masks in every layout,
``batch_tree_mask`` / ``batch_tree_mask_flashinfer`` for padded batches, ``propose_ngram``,
``Eagle2TreeBuilder`` and its device-resident form ``Eagle2BatchBuilder``, ``DraftLengthPolicy``,
``verify_greedy`` / ``verify_speculative`` on specdec's trees, and the drafter blocks (``DecoderLayer``, ``eagle_fuse``,
``Eagle3Block``, ``MtpModule``, ``JakiroLayer``, ``AmphistaHeads``, ``MoaDrafter``, ``DFlashDrafter``).

Randomness: functions that sample take ``seed`` and ``offset`` (one Philox-4x32-10 stream per row,
``(seed, row)``, read from ``offset``), a ``torch.Generator`` (one integer drawn from it seeds the call),
or explicit ``uniforms``; with none of them a seed is drawn from numpy's global generator. Bad input
raises ``TypeError`` (a dtype, or a value of the wrong kind: a float where an integer is expected) or
``ValueError`` (a shape, stride, device, writability or value), naming the argument, before anything is
allocated; errors from the C++ side carry its message. Integers are range-checked, never wrapped, and
indices are never negative (docs/python.md, "Errors").
"""

from __future__ import annotations

import numpy as np  # noqa: F401 (the package needs numpy; fail early)

from . import _args, _specdec  # noqa: F401

__version__ = _specdec.__version__
#: Whether this build has the CUDA side (built where nvcc was found): the row primitives (``argmax``,
#: ``topk``, ``softmax``, ``log_softmax``, ``logsumexp``) and ``sampling_from_probs`` then take torch
#: tensors in CUDA memory and run on their device, on the current stream.
cuda = bool(_specdec.cuda)

__all__ = [
    "argmax",
    "topk",
    "softmax",
    "log_softmax",
    "logsumexp",
    "top_k_renorm_probs",
    "top_p_renorm_probs",
    "sampling_from_probs",
    "top_k_top_p_sampling_from_logits",
    "top_k_mask_logits",
    "segment_packbits",
    "chain_speculative_sampling",
    "rejection_sample",
    "apply_sampling_constraints",
    "apply_top_k_top_p",
    "verify_tree_greedy",
    "tree_speculative_sampling_target_only",
    "build_tree_kernel_efficient",
    "philox_uniforms",
    "philox_exponentials",
]


# The functions, by the layer or peer they serve (each module names its C++ counterpart).
from ._common import philox_exponentials, philox_uniforms  # noqa: E402,F401
from .flashinfer import *  # noqa: E402,F401,F403
from .flashinfer import _chain_as_batch  # noqa: E402,F401 (tests call it)
from .rows import *  # noqa: E402,F401,F403
from .sglang import *  # noqa: E402,F401,F403
from .vllm import *  # noqa: E402,F401,F403
from . import flashinfer as _flashinfer, rows as _rows, sglang as _sglang, vllm as _vllm  # noqa: E402

# Every name the peers' modules export (FlashInfer's whole sampling family, vLLM's constants, ...).
__all__ += [name for m in (_rows, _flashinfer, _sglang, _vllm) for name in m.__all__ if name not in __all__]

# specdec's own drafting side (trees, masks, n-gram and suffix drafts, EAGLE-2, the draft-length policy,
# verification of specdec's trees, the blocks): specdec/drafting.py.
from .drafting import *  # noqa: E402,F401,F403
from .drafting import __all__ as _drafting_all  # noqa: E402

__all__ += _drafting_all
