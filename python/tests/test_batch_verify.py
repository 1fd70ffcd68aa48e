# SPDX-License-Identifier: Apache-2.0
"""verify_tree_batch: the padded-batch verifiers (specdec::sampling::tree_batch) against the request-based
verify_greedy / verify_speculative over the same trees (bit-identical decisions), against a plain walk
written here for the caps and bonus tokens, and their argument errors."""

import numpy as np
import pytest

import specdec


def _planted(rng, trees, n, vocab):
    """Logits [batch * n x vocab] (request r's node i at row r * n + i) with the argmax planted on a child
    of most nodes, so that long accepted walks happen."""
    logits = rng.standard_normal((len(trees) * n, vocab)).astype(np.float32)
    for r, tree in enumerate(trees):
        for i in range(tree.size):
            children = [c for c in range(tree.size) if tree.parent[c] == i]
            if children and rng.random() < 0.75:
                logits[r * n + i, tree.token[children[int(rng.integers(0, len(children)))]]] = 9.0
    return logits


def _greedy_walk(tree, rows, cap, bonus):
    """The greedy rule written out: first child (node order) whose token is its parent row's argmax, up to
    `cap` drafts (-1: none); the final token is `bonus` when the walk ended at a leaf or the cap and a
    bonus is given, else the last node's argmax."""
    node, accepted = 0, []
    while True:
        children = [c for c in range(tree.size) if tree.parent[c] == node]
        if not children or (cap >= 0 and len(accepted) == cap):
            final = bonus if bonus >= 0 else int(np.argmax(rows[node]))
            break
        best = int(np.argmax(rows[node]))
        child = next((c for c in children if tree.token[c] == best), None)
        if child is None:
            final = best
            break
        accepted.append(child)
        node = child
    return accepted, [int(tree.token[c]) for c in accepted] + [final]


def _row(result, r):
    """Request r of a BatchVerification as (accepted nodes, emitted tokens)."""
    a = int(result.accepted[r])
    tokens = [int(t) for t in np.asarray(result.tokens)[r]]
    nodes = [int(t) for t in np.asarray(result.accepted_nodes)[r]]
    assert all(t == -1 for t in tokens[a + 1:]) and all(x == -1 for x in nodes[a:])
    return nodes[:a], tokens[: a + 1]


def test_greedy_batch_equals_the_request_walk_with_caps_and_bonus_tokens(random_tree):
    rng = np.random.default_rng(11)
    vocab, n = 12, 14
    trees = [random_tree(rng, int(rng.integers(1, n + 1)), vocab) for _ in range(30)]
    logits = _planted(rng, trees, n, vocab)
    tokens, parents, counts = specdec.tree_batch(trees, n)
    got = specdec.verify_tree_batch(logits, tokens, parents, greedy=True, node_counts=counts)
    want = specdec.verify_greedy(logits, trees, target_rows=[r * n for r in range(len(trees))])
    assert sum(len(w.accepted_nodes) for w in want) > len(trees)  # long walks were exercised
    for r, w in enumerate(want):
        assert _row(got, r) == (w.accepted_nodes, w.tokens)
    assert np.all(np.asarray(got.uniforms_consumed) == 0)
    # Caps and caller bonus tokens, against the walk written out.
    caps = rng.integers(-1, 4, size=len(trees)).astype(np.int32)
    bonus = np.where(rng.random(len(trees)) < 0.5, rng.integers(0, vocab, size=len(trees)), -1).astype(np.int32)
    got = specdec.verify_tree_batch(logits, tokens, parents, greedy=True, node_counts=counts, max_accepted=caps,
                                    bonus_tokens=bonus)
    for r, tree in enumerate(trees):
        assert _row(got, r) == _greedy_walk(tree, logits[r * n:(r + 1) * n], int(caps[r]), int(bonus[r]))


def test_greedy_batch_reads_rows_at_target_rows(random_tree):
    rng = np.random.default_rng(12)
    vocab, n = 9, 6
    trees = [random_tree(rng, n, vocab) for _ in range(4)]
    logits = _planted(rng, trees, n, vocab)
    # The same rows stored in reverse request order, 3 rows of padding first: target_rows says where.
    stored = np.concatenate([np.zeros((3, vocab), np.float32)] + [logits[r * n:(r + 1) * n] for r in reversed(range(4))])
    starts = np.asarray([3 + (3 - r) * n for r in range(4)], dtype=np.int64)
    tokens, parents, _ = specdec.tree_batch(trees)
    a = specdec.verify_tree_batch(logits, tokens, parents, greedy=True)
    b = specdec.verify_tree_batch(stored, tokens, parents, greedy=True, target_rows=starts)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(a.accepted_nodes, b.accepted_nodes)


def _distributions(rng, rows, vocab, peaked):
    p = rng.random((rows, vocab)) ** 3
    p[np.arange(rows), peaked % vocab] += 2.0  # a drafted token is often likely: acceptances happen
    return (p / p.sum(axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("stochastic_drafts", [False, True])
def test_speculative_batch_equals_the_request_verifier(stochastic_drafts, random_tree):
    rng = np.random.default_rng(13 + stochastic_drafts)
    vocab, n = 16, 10
    trees = [random_tree(rng, int(rng.integers(1, n + 1)), vocab) for _ in range(24)]
    tokens, parents, counts = specdec.tree_batch(trees, n)
    # Row r * n + i is the target after request r's node i; its first child's token is made likely.
    first_child = np.asarray([[next((int(t.token[c]) for c in range(t.size) if t.parent[c] == i), 0) for i in range(n)]
                              for t in trees]).ravel()
    target = _distributions(rng, len(trees) * n, vocab, first_child)
    kwargs, draft_rows = {}, None
    if stochastic_drafts:
        # Node i of request r drawn from draft row r * n + i (a fresh distribution), node 0 deterministic.
        draft = _distributions(rng, len(trees) * n, vocab, first_child)
        draft_rows = np.asarray([[-1 if i == 0 or i >= t.size else r * n + i for i in range(n)] for r, t in enumerate(trees)],
                                dtype=np.int64)
        kwargs = dict(draft_probs=draft, draft_rows=draft_rows)
    accepted_total = 0
    for seed, offset in [(5, 0), (6, 17), (2**63 + 9, 3)]:
        got = specdec.verify_tree_batch(target, tokens, parents, node_counts=counts, seed=seed, offset=offset, **kwargs)
        want = specdec.verify_speculative(target, trees, target_rows=[r * n for r in range(len(trees))], seed=seed, offset=offset,
                                          draft_probs=kwargs.get("draft_probs"),
                                          draft_rows=None if draft_rows is None else [draft_rows[r, : t.size] for r, t in enumerate(trees)])
        for r, w in enumerate(want):
            assert _row(got, r) == (w.accepted_nodes, w.tokens)
            accepted_total += len(w.accepted_nodes)
        consumed = np.asarray(got.uniforms_consumed)
        assert np.all(consumed >= 1)  # the final draw reads at least one uniform
        # The same uniforms handed over explicitly (Philox stream (seed, r), uniform_double from offset).
        explicit = specdec.philox_uniforms(seed % 2**64, offset, len(trees), int(consumed.max()))
        again = specdec.verify_tree_batch(target, tokens, parents, node_counts=counts, uniforms=explicit, **kwargs)
        np.testing.assert_array_equal(again.tokens, got.tokens)
        np.testing.assert_array_equal(again.uniforms_consumed, consumed)
    assert accepted_total > len(trees)
    # Per-request offsets: request r reads its stream from offsets[r].
    offsets = rng.integers(0, 50, size=len(trees)).astype(np.int64)
    per = specdec.verify_tree_batch(target, tokens, parents, node_counts=counts, seed=8, offset=offsets, **kwargs)
    for o in set(offsets.tolist()):
        whole = specdec.verify_tree_batch(target, tokens, parents, node_counts=counts, seed=8, offset=o, **kwargs)
        for r in np.flatnonzero(offsets == o):
            assert _row(per, r) == _row(whole, r)


def test_batch_arguments_are_checked_by_name(random_tree):
    rng = np.random.default_rng(14)
    trees = [random_tree(rng, 4, 8) for _ in range(3)]
    tokens, parents, _ = specdec.tree_batch(trees)
    logits = rng.standard_normal((12, 8)).astype(np.float32)
    with pytest.raises(TypeError, match="tokens"):
        specdec.verify_tree_batch(logits, tokens.astype(np.int64), parents, greedy=True)
    with pytest.raises(ValueError, match="parents"):
        specdec.verify_tree_batch(logits, tokens, parents[:, :3].copy(), greedy=True)
    with pytest.raises(ValueError, match="node_counts"):
        specdec.verify_tree_batch(logits, tokens, parents, greedy=True, node_counts=np.ones(2, np.int32))
    probs = _distributions(rng, 12, 8, np.zeros(12, np.int64))
    with pytest.raises(ValueError, match="draft_probs, draft_rows"):
        specdec.verify_tree_batch(probs, tokens, parents, draft_probs=probs, seed=1)
    with pytest.raises(ValueError, match="rows"):  # the target has too few rows for the trees
        specdec.verify_tree_batch(probs[:5], tokens, parents, seed=1)
    bad = parents.copy()
    bad[1, 2] = 3  # a parent after its child
    with pytest.raises(ValueError, match="parent"):
        specdec.verify_tree_batch(logits, tokens, bad, greedy=True)
    with pytest.raises(ValueError, match="nodes"):
        specdec.tree_batch(trees, 3)


def test_torch_tensors_give_the_numpy_results(random_tree):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(15)
    trees = [random_tree(rng, int(rng.integers(1, 9)), 10) for _ in range(8)]
    tokens, parents, counts = specdec.tree_batch(trees, 8)
    logits = _planted(rng, trees, 8, 10)
    a = specdec.verify_tree_batch(logits, tokens, parents, greedy=True, node_counts=counts)
    t = specdec.verify_tree_batch(torch.from_numpy(logits), torch.from_numpy(tokens), torch.from_numpy(parents), greedy=True,
                                  node_counts=torch.from_numpy(counts))
    assert isinstance(t.tokens, torch.Tensor) and t.tokens.dtype == torch.int32
    np.testing.assert_array_equal(a.tokens, t.tokens.numpy())
    probs = _distributions(rng, 64, 10, np.zeros(64, np.int64))
    a = specdec.verify_tree_batch(probs, tokens, parents, node_counts=counts, seed=4, offset=2)
    t = specdec.verify_tree_batch(torch.from_numpy(probs), torch.from_numpy(tokens), torch.from_numpy(parents),
                                  node_counts=torch.from_numpy(counts), seed=4, offset=2)
    np.testing.assert_array_equal(a.tokens, t.tokens.numpy())
    np.testing.assert_array_equal(a.uniforms_consumed, t.uniforms_consumed.numpy())


def test_flashinfer_chain_through_the_batch_equals_the_request_verifier(flashinfer_chains):
    # chain_speculative_sampling on CUDA tensors goes through the padded batch (specdec._chain_as_batch):
    # on the host it must give the request-based verifier's outputs, FlashInfer's goldens included.
    for b, draft, ids, target, uniforms in flashinfer_chains:
        out, accepted, emitted = specdec._chain_as_batch(draft, ids, target, uniforms, 0, 0)
        np.testing.assert_array_equal(out, b["expected_output_token_ids"])
        np.testing.assert_array_equal(accepted, b["expected_accepted_token_num"])
        np.testing.assert_array_equal(emitted, b["expected_emitted_draft_token_num"])
    rng = np.random.default_rng(16)
    for batch, k, vocab in [(7, 4, 50), (3, 1, 9), (5, 6, 300)]:
        ids = rng.integers(0, vocab, size=(batch, k)).astype(np.int32)
        draft = _distributions(rng, batch * k, vocab, ids.ravel()).reshape(batch, k, vocab)
        peaked = np.concatenate([ids, np.zeros((batch, 1), np.int64)], axis=1).ravel()
        target = _distributions(rng, batch * (k + 1), vocab, peaked).reshape(batch, k + 1, vocab)
        for seed, offset in [(1, 0), (2**64 - 5, 40)]:
            want = specdec.chain_speculative_sampling(draft, ids, target, seed=seed, offset=offset)
            got = specdec._chain_as_batch(draft, ids, target, None, seed, offset)
            for w, g in zip(want, got):
                np.testing.assert_array_equal(w, g)
    with pytest.raises(ValueError, match="target_probs: expected shape"):
        specdec._chain_as_batch(draft, ids, target[:, :-1], None, 1, 0)
