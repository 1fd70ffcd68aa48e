# SPDX-License-Identifier: Apache-2.0
import json
import pathlib

import pytest

DATA = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data"


@pytest.fixture
def golden():
    """Loads a golden case of the C++ tests (tests/data/...), computed by running the peers' code."""

    def load(relative: str):
        return json.loads((DATA / relative).read_text())

    return load


@pytest.fixture
def random_tree():
    """Makes a random specdec tree: `make(rng, n, vocab=50)`, n nodes whose parents are drawn among the
    earlier nodes, renumbered breadth-first (as specdec's trees are), tokens in [0, vocab)."""
    import specdec

    def make(rng, n, vocab=50):
        parents = [-1] + [int(rng.integers(0, i)) for i in range(1, n)]
        depth = [0] * n
        for i in range(1, n):
            depth[i] = depth[parents[i]] + 1
        order = sorted(range(n), key=lambda i: (depth[i], i))
        where = {old: new for new, old in enumerate(order)}
        tokens = [int(t) for t in rng.integers(0, vocab, size=n)]
        return specdec.DraftTree.from_parents([tokens[i] for i in order],
                                              [-1 if parents[i] < 0 else where[parents[i]] for i in order])

    return make


@pytest.fixture
def flashinfer_chains(golden):
    """FlashInfer's recorded chain verifications (samplers/flashinfer_chain.json) as (batch case, draft
    probs, draft ids, target probs, uniforms): each request's recorded uniforms padded with ones to
    [batch x max(their count, 2k + 1)], the array specdec's chain verifier takes."""
    import numpy as np

    cases = []
    for b in golden("samplers/flashinfer_chain.json")["batches"]:
        k = b["num_speculative_tokens"]
        streams = b["uniform_streams"]
        uniforms = np.ones((len(streams), max(max(len(s) for s in streams), 2 * k + 1)), dtype=np.float64)
        for r, s in enumerate(streams):
            uniforms[r, :len(s)] = s
        cases.append((b, np.array(b["draft_probs"], dtype=np.float32), np.array(b["draft_token_ids"], dtype=np.int32),
                      np.array(b["target_probs"], dtype=np.float32), uniforms))
    return cases
