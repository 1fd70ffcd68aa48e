# SPDX-License-Identifier: Apache-2.0
"""specdec's own drafting side from Python: the peers' recorded cases (Arctic Inference's suffix trees
and cache, EAGLE-2 / EAGLE-3 / Jakiro trees), and plain references written here (prompt lookup, masks
in every layout, greedy walks, the stochastic verifier's output distribution)."""

import json
import pathlib

import numpy as np
import pytest

import specdec

DATA = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data"


# ---- SuffixDecoding: Arctic Inference 0.3.0's recorded scenarios ------------------------------------------


def _suffix_scenarios():
    with open(DATA / "suffix" / "arctic_inference_0.3.0.jsonl") as f:
        return [json.loads(line) for line in f]


def _same_draft(got, want):
    assert got.token_ids == want["token"]
    assert got.parents == want["parent"]
    assert got.match_len == want["match_length"]
    # float32 values, exact: the oracle's are float32 written as doubles.
    assert np.float32(got.score) == np.float32(want["score"])
    assert np.array_equal(np.asarray(got.probs, dtype=np.float32), np.asarray(want["prob"], dtype=np.float32))


def test_suffix_tree_replays_arctic_inference():
    compared = 0
    for scenario in (s for s in _suffix_scenarios() if s["kind"] == "tree"):
        tree = specdec.SuffixTree(scenario["max_depth"])
        for op in scenario["ops"]:
            if op[0] == "extend":
                tree.extend(op[1], op[2])
            elif op[0] == "remove":
                tree.remove(op[1])
            else:
                _, context, max_spec, factor, offset, min_prob, use_tree, want = op
                _same_draft(tree.speculate(context, max_spec, factor, offset, min_prob, use_tree), want)
                compared += 1
            assert tree.check_integrity() == ""
    assert compared > 500


def test_suffix_cache_replays_arctic_inference_with_hashable_ids():
    compared = errors = 0
    for scenario in (s for s in _suffix_scenarios() if s["kind"] == "cache"):
        cache = specdec.SuffixDecodingCache(scenario["max_depth"], scenario["max_cached_requests"])
        for op in scenario["ops"]:
            request = f"request-{op[1]}"  # any hashable, as Arctic Inference takes
            error = op[-1] == "error"

            def call():
                if op[0] == "start":
                    cache.start_request(request, op[2])
                elif op[0] == "add":
                    cache.add_active_response(request, np.asarray(op[2], dtype=np.int32))
                elif op[0] == "stop":
                    cache.stop_request(request)
                elif op[0] == "evict":
                    cache.evict_cached_response(request)
                else:
                    return cache.speculate(request, op[2], *op[3:8])

            if error:
                with pytest.raises(ValueError):
                    call()
                errors += 1
            else:
                got = call()
                if op[0] == "speculate":
                    _same_draft(got, op[8])
                    compared += 1
            if scenario["max_cached_requests"] >= 0:
                assert len(cache.cached_requests) <= scenario["max_cached_requests"]
    assert compared > 500 and errors > 50


def test_suffix_cache_bookkeeping_and_tree_form():
    cache = specdec.SuffixDecodingCache(max_tree_depth=8, max_cached_requests=2)
    for r in ("a", "b", "c"):
        cache.start_request(r, [1, 2, 3, 4, 1, 2, 3, 5])
        cache.add_active_response(r, [6, 7])
    assert sorted(cache.active_requests) == ["a", "b", "c"]
    assert sorted(cache.cached_requests) == ["b", "c"]  # "a" evicted first
    cache.stop_request("b")
    assert sorted(cache.active_requests) == ["a", "c"]
    draft = cache.speculate("a", [9, 1, 2, 3], max_spec_tokens=4)
    assert draft.match_len == 3 and draft.parents == list(range(-1, len(draft.token_ids) - 1))  # a path
    tree = draft.tree(root=3)  # a path: the root, then the draft in order, scored by its probabilities
    assert tree.token.tolist() == [3] + draft.token_ids
    assert tree.parent.tolist() == list(range(-1, len(draft.token_ids)))
    assert np.array_equal(tree.score, np.asarray([0.0] + draft.probs, dtype=np.float32))
    branchy = cache.speculate("a", [1, 2, 3], use_tree_spec=True, min_token_prob=0.0)
    assert branchy.token_ids.count(4) == 1 and branchy.token_ids.count(5) == 1  # both continuations
    tree = branchy.tree(root=3)
    assert sorted(tree.token[tree.depth == 1].tolist()) == [4, 5]
    with pytest.raises(ValueError, match="already active"):
        cache.start_request("a", [1])
    with pytest.raises(ValueError, match="not active"):
        cache.speculate("b", [1, 2])
    with pytest.raises(ValueError, match="token ids that fit int32"):
        cache.add_active_response("a", [2**40])


# ---- prompt lookup ------------------------------------------------------------------------------------------


def _ngram_reference(history, length, max_ngram, min_ngram, branches):
    """Continuations after the longest suffix (max_ngram down to min_ngram) that occurred earlier, most
    recent occurrence first, distinct ones only, at most `branches`."""
    n = len(history)
    for g in range(max_ngram, min_ngram - 1, -1):
        if g >= n:
            continue
        suffix = history[n - g:]
        found = []
        for s in range(n - g - 1, -1, -1):
            if history[s:s + g] == suffix:
                c = history[s + g:s + g + length]
                if c and c not in found:
                    found.append(c)
                if len(found) == branches:
                    break
        if found:
            return found
    return []


def _trie(root, continuations):
    """A trie of the continuations in breadth-first order, nodes of a level in introduction order."""
    nodes = [(root, -1, 0)]
    child = {}
    for c in continuations:
        at = 0
        for t in c:
            if (at, t) not in child:
                child[(at, t)] = len(nodes)
                nodes.append((t, at, nodes[at][2] + 1))
            at = child[(at, t)]
    order = sorted(range(len(nodes)), key=lambda i: (nodes[i][2], i))
    where = {old: new for new, old in enumerate(order)}
    return ([nodes[i][0] for i in order], [-1 if nodes[i][1] < 0 else where[nodes[i][1]] for i in order])


@pytest.mark.parametrize("branches", [1, 3])
def test_propose_ngram_matches_reference(branches):
    rng = np.random.default_rng(5)
    for trial in range(300):
        history = [int(t) for t in rng.integers(0, 4, size=int(rng.integers(1, 40)))]
        length = int(rng.integers(0, 6))
        max_ngram = int(rng.integers(1, 5))
        min_ngram = int(rng.integers(1, max_ngram + 1))
        tree = specdec.propose_ngram(np.asarray(history, dtype=np.int32), length, max_ngram=max_ngram,
                                     min_ngram=min_ngram, branches=branches)
        tokens, parents = _trie(history[-1], _ngram_reference(history, length, max_ngram, min_ngram, branches))
        assert list(tree.token) == tokens, (history, length, max_ngram, min_ngram)
        assert list(tree.parent) == parents
        matched = specdec.ngram_match_length(history, max_ngram=max_ngram, min_ngram=min_ngram)
        assert (matched > 0) == bool(_ngram_reference(history, 1, max_ngram, min_ngram, 1))
    with pytest.raises(ValueError, match="min_ngram = 3, max_ngram = 2"):
        specdec.propose_ngram([1, 2], 2, max_ngram=2, min_ngram=3)
    with pytest.raises(ValueError, match="history is empty"):
        specdec.propose_ngram([], 2)


# ---- trees and their buffers --------------------------------------------------------------------------------


def _dense_reference(tree, prefix):
    n = tree.size
    m = np.zeros((n, prefix + n), dtype=bool)
    m[:, :prefix] = True
    for i in range(n):
        j = i
        while j >= 0:
            m[i, prefix + j] = True
            j = tree.parent[j]
    return m


def test_masks_in_every_layout_match_the_ancestor_relation(random_tree):
    rng = np.random.default_rng(11)
    trees, prefixes = [], []
    for n in (1, 2, 7, 8, 9, 16, 17, 32, 33, 60):
        tree = random_tree(rng, n)
        prefix = int(rng.integers(0, 5))
        dense = _dense_reference(tree, prefix)
        assert np.array_equal(tree.mask(prefix), dense)
        assert np.array_equal(tree.mask(prefix, dtype=np.float32), dense.astype(np.float32))
        additive = tree.mask(prefix, additive=True)
        assert additive.dtype == np.float32 and np.array_equal(additive == 0, dense) and np.all(np.isneginf(additive[~dense]))
        tree_part = dense[:, prefix:]
        words = tree.mask_packed_int32()
        for i in range(n):
            for j in range(n):
                assert bool((int(words[i, j // 32]) >> (j % 32)) & 1) == tree_part[i, j]
        if n <= 32:
            rows = tree.mask_bitpacked_rows()
            assert rows.dtype == (np.uint8 if n <= 8 else np.uint16 if n <= 16 else np.uint32)
            assert all(int(rows[i]) == sum(1 << j for j in range(n) if tree_part[i, j]) for i in range(n))
        assert np.array_equal(tree.positions(prefix), prefix + tree.depth.astype(np.int64))
        first, nxt = tree.child_links()
        for i in range(n):
            children = [c for c in range(n) if tree.parent[c] == i]
            assert first[i] == (children[0] if children else -1)
            for a, b in zip(children, children[1:] + [-1]):
                assert nxt[a] == b
        paths = tree.retrieve_paths()
        leaves = [i for i in range(n) if i not in set(tree.parent.tolist())]
        assert [row[row >= 0][-1] for row in paths] == leaves
        trees.append(tree)
        prefixes.append(prefix)
    packed, indptr = specdec.tree_mask_flashinfer(trees, prefixes)
    for r, (tree, prefix) in enumerate(zip(trees, prefixes)):
        want = np.packbits(_dense_reference(tree, prefix).ravel(), bitorder="little")
        assert np.array_equal(packed[indptr[r]:indptr[r + 1]], want)
    with pytest.raises(ValueError, match="node 2 has parent 5"):
        specdec.DraftTree.from_parents([1, 2, 3], [-1, 0, 5])
    with pytest.raises(ValueError, match="out is 3 x 3"):
        trees[3].mask(0, out=np.empty((3, 3), dtype=np.uint8))  # a 8-node tree
    with pytest.raises(TypeError, match="out: expected dtype"):
        trees[3].mask(0, out=np.empty((trees[3].size, trees[3].size), dtype=np.int16))


def test_batch_tree_mask_equals_each_trees_masks(random_tree):
    rng = np.random.default_rng(21)
    n, prefix = 13, 4
    trees = [random_tree(rng, int(rng.integers(1, n + 1))) for _ in range(6)]
    trees[0] = random_tree(rng, n)
    _, parents, counts = specdec.tree_batch(trees, nodes=n)
    dense = specdec.batch_tree_mask(parents, counts, prefix_length=prefix)
    additive = specdec.batch_tree_mask(parents, counts, layout="additive", prefix_length=prefix)
    packed = specdec.batch_tree_mask(parents, counts, layout="packed_int32")
    bits = specdec.batch_tree_mask(parents, counts, layout="bitpacked_rows")
    assert dense.dtype == np.bool_ and dense.shape == (6, n, prefix + n) and bits.dtype == np.uint16
    for b, tree in enumerate(trees):
        c = tree.size
        want = tree.mask(prefix)
        np.testing.assert_array_equal(dense[b, :c, :prefix + c], want)
        assert not dense[b, :c, prefix + c:].any()
        np.testing.assert_array_equal(additive[b, :c, :prefix + c], tree.mask(prefix, additive=True))
        np.testing.assert_array_equal(packed[b, :c], tree.mask_packed_int32())
        np.testing.assert_array_equal(bits[b, :c], tree.mask_bitpacked_rows())
        for i in range(c, n):  # padding attends the prefix and itself
            row = np.zeros(prefix + n, dtype=bool)
            row[:prefix] = True
            row[prefix + i] = True
            np.testing.assert_array_equal(dense[b, i], row)
    floats = specdec.batch_tree_mask(parents, counts, dtype="float32")
    np.testing.assert_array_equal(floats, specdec.batch_tree_mask(parents, counts).astype(np.float32))
    bad = parents.copy()
    bad[2, 1] = 5
    with pytest.raises(ValueError, match=r"parents\[2, 1\] = 5; expected a parent in \[0, 1\)"):
        specdec.batch_tree_mask(bad)
    with pytest.raises(ValueError, match=r"node_counts\[0\] = 14; expected a node count in \[1, 13\]"):
        specdec.batch_tree_mask(parents, np.full(6, 14, dtype=np.int32))
    with pytest.raises(ValueError, match="layout"):
        specdec.batch_tree_mask(parents, layout="sparse")


def test_batch_tree_mask_flashinfer_equals_the_per_tree_packing(random_tree):
    rng = np.random.default_rng(23)
    n = 11
    trees = [random_tree(rng, int(rng.integers(1, n + 1))) for _ in range(5)]
    _, parents, counts = specdec.tree_batch(trees, nodes=n)
    prefixes = rng.integers(0, 20, size=5)
    packed, indptr = specdec.batch_tree_mask_flashinfer(parents, counts, prefixes)
    want_packed, want_indptr = specdec.tree_mask_flashinfer(trees, prefixes)
    np.testing.assert_array_equal(indptr, want_indptr)
    np.testing.assert_array_equal(packed, want_packed)
    same, _ = specdec.batch_tree_mask_flashinfer(parents, counts, 7)
    np.testing.assert_array_equal(same, specdec.tree_mask_flashinfer(trees, [7] * 5)[0])
    with pytest.raises(ValueError, match=r"prefix_lengths\[2\] = -1; expected a length"):
        specdec.batch_tree_mask_flashinfer(parents, counts, [0, 0, -1, 0, 0])


# ---- EAGLE-2 / EAGLE-3 / Jakiro: the peers' recorded trees ---------------------------------------------------


@pytest.mark.parametrize("name", sorted(p.name for p in (DATA / "trees").glob("*.json")
                                        if json.loads(p.read_text()).get("kind") in ("eagle2_dynamic_tree", "jakiro_dynamic_tree")))
def test_eagle2_builder_matches_the_peers(golden, name):
    case = golden("trees/" + name)
    p, inputs, it = case["params"], case["inputs"], case["intermediates"]
    builder = specdec.Eagle2TreeBuilder(p["top_k"], p["depth"], p["total_token"], d2t=inputs.get("d2t"))
    root = np.asarray(inputs["root_logits"], dtype=np.float32)[None, :]
    steps = [builder.begin(root, p["sample_token"], p.get("vocab_size", 0))]
    for logits in inputs["step_logits"]:
        steps.append(builder.expand(np.asarray(logits, dtype=np.float32).reshape(-1, root.shape[1])))
    if case["kind"] == "jakiro_dynamic_tree":
        builder.expand_dual(np.asarray(inputs["penult_left_logits"], dtype=np.float32).reshape(-1, root.shape[1]),
                            np.asarray(inputs["penult_right_logits"], dtype=np.float32).reshape(-1, root.shape[1]))
    (result,) = builder.finish()
    out = case["outputs"]
    assert result.selected.tolist() == it["top_scores_index_sorted"]
    assert result.tree.parent.tolist() == it["parent_node_index"]
    assert result.tree.token.tolist() == out["draft_tokens"]
    assert np.array_equal(result.tree.mask(0).astype(int).ravel(), np.asarray(out["tree_mask"]).ravel())
    assert result.tree.positions(0).tolist() == out["tree_position_ids"]
    assert result.tree.retrieve_paths().tolist() == out["retrieve_indices"]
    assert result.tree.retrieve_paths("lexicographic").tolist() == case["outputs_sampling"]["retrieve_indices"]
    for i, want in enumerate(it.get("draft_steps", [])):
        assert steps[i].input_ids.ravel().tolist() == want["frontier_input_ids"]
        assert np.array_equal(steps[i].draft_mask.ravel(), np.asarray(want["draft_tree_mask"]).ravel())


def _run_eagle2(builder, root, roots, steps_logits, dual=None):
    steps = [builder.begin(root, roots)]
    for logits in steps_logits:
        steps.append(builder.expand(logits))
    if dual is not None:
        steps.append(builder.expand_dual(*dual))
    return steps, builder.finish()


@pytest.mark.parametrize("name", sorted(p.name for p in (DATA / "trees").glob("*.json")
                                        if json.loads(p.read_text()).get("kind") in ("eagle2_dynamic_tree", "jakiro_dynamic_tree")))
def test_eagle2_batch_builder_matches_the_peers(golden, name):
    # The device-resident builder's form, here on host arrays: the peers' trees and frontiers.
    case = golden("trees/" + name)
    p, inputs, it = case["params"], case["inputs"], case["intermediates"]
    builder = specdec.Eagle2BatchBuilder(p["top_k"], p["depth"], p["total_token"], d2t=inputs.get("d2t"))
    root = np.asarray(inputs["root_logits"], dtype=np.float32)[None, :]
    logits = [np.asarray(x, dtype=np.float32).reshape(-1, root.shape[1]) for x in inputs["step_logits"]]
    dual = None
    if case["kind"] == "jakiro_dynamic_tree":
        dual = tuple(np.asarray(inputs[k], dtype=np.float32).reshape(-1, root.shape[1])
                     for k in ("penult_left_logits", "penult_right_logits"))
    steps, trees = _run_eagle2(builder, root, [p["sample_token"]], logits, dual)
    assert trees.selected[0].tolist() == it["top_scores_index_sorted"]
    assert trees.parents[0].tolist() == it["parent_node_index"]
    assert trees.tokens[0].tolist() == case["outputs"]["draft_tokens"]
    for i, want in enumerate(it.get("draft_steps", [])):
        assert steps[i].input_ids.ravel().tolist() == want["frontier_input_ids"]
        assert np.array_equal(steps[i].draft_mask.ravel(), np.asarray(want["draft_tree_mask"]).ravel())


def test_eagle2_batch_builder_equals_the_tree_builder_for_a_batch():
    rng = np.random.default_rng(12)
    batch, k, depth, total, v = 3, 4, 3, 14, 300
    root = rng.standard_normal((batch, v)).astype(np.float32) * 3
    logits = [rng.standard_normal((batch * k, v)).astype(np.float32) * 3 for _ in range(depth)]
    roots = [5, 6, 7]
    want_steps, want = _run_eagle2(specdec.Eagle2TreeBuilder(k, depth, total, batch=batch), root, roots, logits)
    got_steps, got = _run_eagle2(specdec.Eagle2BatchBuilder(k, depth, total, batch=batch), root, roots, logits)
    for w, g in zip(want_steps, got_steps):
        assert np.array_equal(g.input_ids, w.input_ids) and np.array_equal(g.frontier, w.frontier)
        assert np.array_equal(g.parent_slot, w.parent_slot)
        assert np.array_equal(g.draft_mask.ravel(), np.asarray(w.draft_mask).ravel())
    for b, tree in enumerate(want):
        assert got.tokens[b].tolist() == tree.tree.token.tolist()
        assert got.parents[b].tolist() == tree.tree.parent.tolist()
        assert got.depths[b].tolist() == tree.tree.depth.tolist()
        assert np.array_equal(got.scores[b], tree.tree.score)
        assert got.selected[b].tolist() == tree.selected.tolist()
    # The trees feed verify_tree_batch as they are.
    target = rng.standard_normal((batch * total, v)).astype(np.float32)
    batch_result = specdec.verify_tree_batch(target, got.tokens, got.parents, greedy=True)
    per_tree = specdec.verify_greedy(target, [t.tree for t in want])
    for b, r in enumerate(per_tree):
        assert int(batch_result.accepted[b]) == len(r.accepted_nodes)
    builder = specdec.Eagle2BatchBuilder(k, depth, total, batch=batch)
    with pytest.raises(ValueError, match="root_logits: expected shape"):
        builder.begin(root[:2], roots[:2])
    builder.begin(root, roots)
    with pytest.raises(ValueError, match="frontier_logits: expected shape"):
        builder.expand(logits[0][:5])
    with pytest.raises(ValueError, match="expansions done"):
        builder.finish()


# ---- verification of specdec's trees ------------------------------------------------------------------------


def _greedy_reference(tree, logits):
    node, accepted = 0, []
    while True:
        best = int(np.argmax(logits[node]))
        child = next((c for c in range(tree.size) if tree.parent[c] == node and tree.token[c] == best), None)
        if child is None:
            return accepted, [int(tree.token[c]) for c in accepted] + [best]
        accepted.append(child)
        node = child


def test_verify_greedy_walks_the_argmax_path(random_tree):
    rng = np.random.default_rng(3)
    trees, rows = [], []
    for _ in range(40):
        tree = random_tree(rng, int(rng.integers(1, 12)))
        # Tokens in a small vocabulary and argmaxes planted along a path: long accepted walks happen.
        logits = rng.standard_normal((tree.size, 8)).astype(np.float32)
        tree = specdec.DraftTree.from_parents(tree.token % 8, tree.parent)
        for i in range(tree.size):
            children = [c for c in range(tree.size) if tree.parent[c] == i]
            if children and rng.random() < 0.7:
                logits[i, tree.token[children[-1]]] = 9.0
        trees.append(tree)
        rows.append(logits)
    got = specdec.verify_greedy(np.concatenate(rows), trees)
    for tree, logits, result in zip(trees, rows, got):
        accepted, tokens = _greedy_reference(tree, logits)
        assert result.accepted_nodes == accepted and result.tokens == tokens
    with pytest.raises(ValueError):
        specdec.verify_greedy(np.concatenate(rows)[:-1], trees)


def test_verify_speculative_is_lossless_for_deterministic_drafts():
    # One draft token x with q = 1 and target p: accepted with probability p(x) (alpha = sum min(p, q)),
    # and the emitted first token is distributed as p.
    p = np.asarray([[0.5, 0.2, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25]], dtype=np.float32)
    tree = specdec.DraftTree.chain(3, [1])
    trials = 20000
    first = np.zeros(4)
    accepted = 0
    for seed in range(trials):
        (r,) = specdec.verify_speculative(p, tree, seed=seed)
        first[r.tokens[0]] += 1
        accepted += len(r.accepted_nodes)
    bound = 4.5 * np.sqrt(0.25 / trials)  # 4.5 standard deviations of a frequency
    assert abs(accepted / trials - 0.2) < bound
    assert np.all(np.abs(first / trials - p[0]) < bound)
    # Logits at a temperature: the same as probabilities softmax(logits / T).
    logits = np.log(p) * 2.0
    a = specdec.verify_speculative(logits, [tree] * 3, logits=True, temperature=2.0, target_rows=[0, 0, 0], seed=9)
    b = specdec.verify_speculative(np.repeat(p[:1], 2, axis=0), [tree] * 3, target_rows=[0, 0, 0], seed=9)
    assert [x.tokens for x in a] == [x.tokens for x in b]


# ---- the draft-length policy --------------------------------------------------------------------------------


def test_draft_length_policy_follows_acceptance_and_cost():
    policy = specdec.DraftLengthPolicy(8)
    assert policy.choose() == 1  # the first draft prices a draft token and a two-row forward
    assert policy.choose(available=0) == 0
    assert policy.expected_tokens(0) == 1.0
    for _ in range(200):
        policy.verified(8, 8)
    for rows in range(1, 10):
        policy.target_forward_timed(rows, 0.010 + 0.0001 * rows)
    assert policy.choose() == 8 and policy.expected_tokens(8) > 8.5
    rejecting = specdec.DraftLengthPolicy(8)
    for _ in range(200):
        rejecting.verified(0, 4)
    for rows in range(1, 10):
        rejecting.target_forward_timed(rows, 0.010 * rows)
    assert rejecting.choose() == 0 and rejecting.expected_tokens(4) < 1.05
    with pytest.raises(ValueError, match="accepted"):
        policy.verified(3, 2)


def test_tree_mask_dtype_errors_name_dtype():
    # A mask dtype the call cannot write is the `dtype` argument's fault (there is no `out` to blame),
    # named as received; an additive mask needs -inf, so only float dtypes.
    tree = specdec.DraftTree.from_parents(np.array([5, 6, 7], np.int32), np.array([-1, 0, 0], np.int32))
    for dtype, additive, received in ((np.int32, False, "int32"), (np.float16, False, "float16"), ("foo", False, "'foo'"),
                                      (np.uint8, True, "uint8")):
        with pytest.raises(TypeError, match=rf"^dtype: expected .*; got {received}$"):
            tree.mask(dtype=dtype, additive=additive)
    assert tree.mask(dtype=np.float64, additive=True)[1, 2] == -np.inf
    assert tree.mask(additive=True).dtype == np.float32
