# SPDX-License-Identifier: Apache-2.0
"""The draft-length policy (C++: specdec/policy/draft_length.hpp)."""

from __future__ import annotations

from typing import Optional

from . import _args, _specdec

__all__ = ["DraftLengthPolicy"]


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
