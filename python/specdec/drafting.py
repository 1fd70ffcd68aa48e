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

from ._dflash import *  # noqa: F401,F403
from ._dflash import __all__ as _dflash
from .blocks import *  # noqa: F401,F403
from .blocks import __all__ as _blocks
from .mask import *  # noqa: F401,F403
from .mask import __all__ as _mask
from .policy import *  # noqa: F401,F403
from .policy import __all__ as _policy
from .sampling import *  # noqa: F401,F403
from .sampling import __all__ as _sampling
from .suffix import *  # noqa: F401,F403
from .suffix import __all__ as _suffix
from .tree import *  # noqa: F401,F403
from .tree import __all__ as _tree

__all__ = _tree + _mask + _suffix + _policy + _sampling + _blocks + _dflash
