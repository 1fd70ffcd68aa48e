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
    policy are serialised.

    ``longest``: the most tokens a draft may have, an int in [0, 2^16]. ``contexts``: how many draft
    contexts the drafter distinguishes (e.g. prompt lookup's match length), an int in [1, 4096];
    acceptance is measured per context, costs are shared."""

    def __init__(self, longest: int, contexts: int = 1):
        self._policy = _specdec.DraftLengthPolicy(_args.integer("longest", longest), _args.integer("contexts", contexts))

    @property
    def longest(self) -> int:
        """The most tokens a draft may have (the constructor's ``longest``)."""
        return self._policy.longest

    @property
    def contexts(self) -> int:
        """How many contexts the policy distinguishes (the constructor's ``contexts``)."""
        return self._policy.contexts

    def choose(self, context: int = 0, available: Optional[int] = None) -> int:
        """The draft length for the step that starts now (0: verify the root alone): the length that
        maximises the expected committed tokens per second, as measured so far.

        ``context``: an int in [0, contexts). ``available``: None, or the most tokens the drafter can offer
        this step (an int >= 0; the best length in [0, min(available, longest)], which may be shorter than
        ``choose``'s cut to it). Returns an int. Raises ``TypeError`` (not integers) or ``ValueError``
        (out of range)."""
        return self._policy.choose(_args.integer("context", context),
                                   None if available is None else _args.integer("available", available))

    def verified(self, accepted: int, drafted: int, context: int = 0) -> None:
        """Records a verification in ``context``: a draft of ``drafted`` tokens (a tree's depth) of which
        ``accepted`` were accepted (ints, 0 <= accepted <= drafted <= longest; a draft of no tokens is
        checked and ignored). Raises ``TypeError`` (not integers) or ``ValueError`` (out of range, a
        context outside [0, contexts))."""
        self._policy.verified(_args.integer("accepted", accepted), _args.integer("drafted", drafted),
                              _args.integer("context", context))

    def target_forward_timed(self, rows: int, seconds: float) -> None:
        """Records the wall time of one target forward: ``rows`` (an int >= 1, the rows the forward
        verified) took ``seconds`` (a finite real >= 0). Raises ``TypeError`` (``rows`` not an integer,
        ``seconds`` not a number) or ``ValueError`` (out of range, NaN)."""
        self._policy.target_forward_timed(_args.integer("rows", rows), _args.real("seconds", seconds))

    def draft_token_timed(self, seconds: float) -> None:
        """Records the wall time of drafting one token, ``seconds`` (a finite real >= 0), for drafters that
        run a model. Raises ``TypeError`` (not a number) or ``ValueError`` (negative, NaN or infinite)."""
        self._policy.draft_token_timed(_args.real("seconds", seconds))

    def expected_tokens(self, length: int, context: int = 0) -> float:
        """The tokens a verification is expected to commit for a chain of ``length`` draft tokens in
        ``context``, ``1 + sum_i prod_{j <= i} a_j`` over the measured acceptance rates (a float >= 1).
        ``length``: an int in [0, 2^16]; ``context`` in [0, contexts). Raises ``TypeError`` (not integers)
        or ``ValueError`` (out of range)."""
        return self._policy.expected_tokens(_args.integer("length", length), _args.integer("context", context))

    def acceptance_rate(self, depth: int, context: int = 0) -> float:
        """The measured probability that the draft token at ``depth`` (1-based; any int: depths never
        tried lean on the pooled rate, 0.5 before any verification) is accepted given the ones before it
        were, in ``context`` (an int in [0, contexts)). Returns a float in [0, 1]. Raises ``TypeError``
        (not integers) or ``ValueError`` (a context out of range)."""
        return self._policy.acceptance_rate(_args.integer("depth", depth), _args.integer("context", context))
