# SPDX-License-Identifier: Apache-2.0
# SGLang's speculative kernels against the goldens the C++ tests use (computed by SGLang's own tests).
import numpy as np
import pytest

import specdec


def test_verify_tree_greedy_equals_sglangs_test(golden):
    c = golden("trees/sglang_verify_tree_greedy_upstream_test.json")
    i, o = c["inputs"], c["outputs"]
    candidates = np.array(i["candidates"], dtype=np.int64)
    bs, n = candidates.shape
    steps = len(o["accept_index"][0])
    for init in (-1, -7):  # SGLang's test starts from -1; other entries are left as the caller set them
        predicts = np.full(bs * n, init, dtype=np.int32)
        accept_index = np.full((bs, steps), -7, dtype=np.int32)
        accept_token_num = np.full(bs, -7, dtype=np.int32)
        specdec.verify_tree_greedy(predicts, accept_index, accept_token_num, candidates,
                                   np.array(i["retrive_index"], dtype=np.int64),
                                   np.array(i["retrive_next_token"], dtype=np.int64),
                                   np.array(i["retrive_next_sibling"], dtype=np.int64),
                                   np.array(i["target_predict"], dtype=np.int64))
        want = np.array(o["predicts"])
        np.testing.assert_array_equal(predicts, np.where(want == -1, init, want))
        np.testing.assert_array_equal(accept_index, o["accept_index"])
        np.testing.assert_array_equal(accept_token_num, o["accept_token_num"])


def test_tree_speculative_sampling_target_only_equals_sglangs_test(golden):
    c = golden("samplers/sglang_tree_target_only_test.json")
    i = c["inputs"]
    candidates = np.array(i["candidates"], dtype=np.int64)
    bs, n = candidates.shape
    steps = i["num_spec_steps"]
    for case in c["cases"]:
        predicts = np.full(i["predicts_len"], i["predicts_init"], dtype=np.int32)
        accept_index = np.full((bs, steps), -7, dtype=np.int32)
        accept_token_num = np.full(bs, -7, dtype=np.int32)
        target = np.array(i["target_probs"], dtype=np.float32)
        specdec.tree_speculative_sampling_target_only(
            predicts, accept_index, accept_token_num, candidates, np.array(i["retrieve_index"], dtype=np.int64),
            np.array(i["retrieve_next_token"], dtype=np.int64), np.array(i["retrieve_next_sibling"], dtype=np.int64),
            np.array(i["uniform_samples"], dtype=np.float32),
            np.array(i["uniform_samples_for_final_sampling"], dtype=np.float32), target, np.zeros_like(target),
            threshold_single=case["threshold_single"], threshold_acc=case["threshold_acc"])
        np.testing.assert_array_equal(predicts, case["expected_predicts"])
        np.testing.assert_array_equal(accept_index, case["expected_accept_index"])
        np.testing.assert_array_equal(accept_token_num, case["expected_accept_token_num"])


def test_build_tree_kernel_efficient_equals_sglangs_test(golden):
    c = golden("trees/sglang_build_tree_upstream_test.json")
    p, i, o = c["params"], c["inputs"], c["outputs"]
    bs, n, k, steps = p["bs"], p["num_draft_tokens"], p["topk"], p["spec_steps"]
    org = o["organize_draft_results"]
    seq = np.array(i["seq_lens"], dtype=np.int64)
    sizes = {0: int(sum(n * (s + n) for s in i["seq_lens"])), 1: bs * n * n, 2: bs * n}
    for mode, name in [(0, "FULL_MASK"), (1, "QLEN_ONLY"), (2, "QLEN_ONLY_BITPACKING")]:
        mask = np.zeros(sizes[mode], dtype=np.bool_ if mode < 2 else np.uint8)
        positions = np.zeros(bs * n, dtype=np.int64)
        links = [np.zeros((bs, n), dtype=np.int64) for _ in range(3)]
        specdec.build_tree_kernel_efficient(np.array(org["parent_list"], dtype=np.int64),
                                            np.array(org["top_scores_index"], dtype=np.int64), seq, mask, positions,
                                            *links, k, steps, n, mode)
        np.testing.assert_array_equal(mask.astype(np.int64), o["tree_mask"][name])
        np.testing.assert_array_equal(positions, o["positions"])
        np.testing.assert_array_equal(links[0], o["retrive_index"])
        np.testing.assert_array_equal(links[1], o["retrive_next_token"])
        np.testing.assert_array_equal(links[2], o["retrive_next_sibling"])


def test_sampled_tree_verification_is_lossless():
    # A root with two children (tokens 1, 2) over V = 3; target p = (0.2, 0.5, 0.3) at the root. With
    # threshold 1 / 1 the first emitted token follows p whatever the drafts.
    p = np.array([0.2, 0.5, 0.3], dtype=np.float32)
    n_req = 20000
    rng = np.random.default_rng(5)
    candidates = np.tile(np.array([[0, 1, 2]], dtype=np.int64), (n_req, 1))
    ri = np.arange(n_req * 3, dtype=np.int64).reshape(n_req, 3)
    nt = np.tile(np.array([[1, -1, -1]], dtype=np.int64), (n_req, 1))
    ns = np.tile(np.array([[-1, 2, -1]], dtype=np.int64), (n_req, 1))
    target = np.tile(np.array([p, [1 / 3] * 3, [1 / 3] * 3], dtype=np.float32), (n_req, 1, 1))
    predicts = np.full(n_req * 3, -1, dtype=np.int32)
    accept_index = np.full((n_req, 2), -1, dtype=np.int32)
    accept_token_num = np.zeros(n_req, dtype=np.int32)
    specdec.tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, candidates, ri, nt, ns,
                                                  rng.random((n_req, 3), dtype=np.float32) * 0.999 + 0.0005,
                                                  rng.random(n_req, dtype=np.float32) * 0.999 + 0.0005, target, None)
    first = predicts.reshape(n_req, 3)[:, 0]
    freq = np.bincount(first, minlength=3) / n_req
    assert np.all(np.abs(freq - p) < 5 * np.sqrt(p * (1 - p) / n_req))


def test_sglang_verifiers_name_what_is_wrong():
    # 0 -> {1, 2}; node 2's sibling link points back at node 1: node 1 is linked twice.
    candidates = np.array([[5, 1, 2]], dtype=np.int64)
    ri = np.arange(3, dtype=np.int64).reshape(1, 3)
    nt = np.array([[1, -1, -1]], dtype=np.int64)
    ns = np.array([[-1, 2, 1]], dtype=np.int64)
    target = np.full((1, 3, 8), 0.125, dtype=np.float32)

    def sampled(**changed):
        a = dict(candidates=candidates, retrive_index=ri, retrive_next_token=nt, retrive_next_sibling=ns,
                 uniform_samples=np.full((1, 3), 0.5, dtype=np.float32),
                 uniform_samples_for_final_sampling=np.full(1, 0.5, dtype=np.float32), target_probs=target)
        a.update(changed)
        specdec.tree_speculative_sampling_target_only(np.full(3, -1, dtype=np.int32), np.full((1, 2), -1, dtype=np.int32),
                                                      np.zeros(1, dtype=np.int32), **a)

    with pytest.raises(ValueError, match="the links of request 0 reach node 1 twice"):
        sampled()
    ok = np.array([[-1, 2, -1]], dtype=np.int64)
    sampled(retrive_next_sibling=ok)
    with pytest.raises(ValueError, match="uniform_samples_for_final_sampling\\[0\\] = 1; expected a value in \\[0, 1\\)"):
        sampled(retrive_next_sibling=ok, uniform_samples_for_final_sampling=np.ones(1, dtype=np.float32))
    with pytest.raises(ValueError, match="target_probs: expected 3 dimensions; got shape \\(3, 8\\)"):
        sampled(retrive_next_sibling=ok, target_probs=target[0])
    with pytest.raises(TypeError, match="uniform_samples: expected dtype float32"):
        sampled(retrive_next_sibling=ok, uniform_samples=np.full((1, 3), 0.5))
    with pytest.raises(ValueError, match="predicts: expected shape \\(3,\\); got \\(2,\\)"):
        specdec.verify_tree_greedy(np.full(2, -1, dtype=np.int32), np.full((1, 2), -1, dtype=np.int32),
                                   np.zeros(1, dtype=np.int32), candidates, ri, nt, ok, np.zeros(3, dtype=np.int64))


def _build_inputs(seed, bs, n, k, steps):
    """EAGLE-style build_tree inputs: valid parents for half the requests, arbitrary (malformed) ones for the rest."""
    rng = np.random.default_rng(seed)
    cols = 1 + k * (steps - 1)
    candidates = k + k * k * (steps - 1)
    parent_list = rng.integers(-2, candidates, size=(bs, cols)).astype(np.int64)
    parent_list[:, 0] = -1
    selected = np.sort(rng.integers(0, candidates, size=(bs, n - 1)), axis=1).astype(np.int64)
    selected[bs // 2:] = rng.integers(-1, candidates, size=(bs - bs // 2, n - 1))
    seq = rng.integers(0, 12, size=bs).astype(np.int64)
    return parent_list, selected, seq


def _build(parent_list, selected, seq, k, steps, n, mode, mask_dtype, device=None):
    bs = len(seq)
    sizes = {0: int(sum(n * (s + n) for s in seq)), 1: bs * n * n, 2: bs * n}
    if device is None:
        mask = np.zeros(sizes[mode], dtype=mask_dtype)
        positions = np.zeros(bs * n, dtype=np.int64)
        links = [np.full((bs, n), -9, dtype=np.int64) for _ in range(3)]
        args = (parent_list, selected, seq)
    else:
        import torch

        mask = torch.zeros(sizes[mode], dtype=mask_dtype, device=device)
        positions = torch.zeros(bs * n, dtype=torch.int64, device=device)
        links = [torch.full((bs, n), -9, dtype=torch.int64, device=device) for _ in range(3)]
        args = tuple(torch.from_numpy(a).to(device) for a in (parent_list, selected, seq))
    specdec.build_tree_kernel_efficient(*args, mask, positions, *links, k, steps, n, mode)
    return mask, positions, links


def test_build_tree_kernel_efficient_packs_rows_into_1_2_and_4_byte_items():
    # The bit-packed rows in every item width equal QLEN_ONLY's bool rows; an item too narrow for N is refused.
    k, steps = 3, 4
    for n, dtypes in [(8, (np.uint8, np.int16, np.int32)), (16, (np.int16, np.int32)), (29, (np.int32,))]:
        parent_list, selected, seq = _build_inputs(n, 5, n, k, steps)
        rows, positions, links = _build(parent_list, selected, seq, k, steps, n, 1, np.bool_)
        rows = rows.reshape(-1, n).astype(np.int64)
        want = (rows << np.arange(n, dtype=np.int64)).sum(axis=1)
        for dtype in dtypes:
            items, p, l = _build(parent_list, selected, seq, k, steps, n, 2, dtype)
            np.testing.assert_array_equal(items.astype(np.int64) & ((1 << n) - 1), want)
            np.testing.assert_array_equal(p, positions)
            for a, b in zip(l, links):
                np.testing.assert_array_equal(a, b)
    parent_list, selected, seq = _build_inputs(1, 2, 9, k, steps)
    with pytest.raises(ValueError, match="QLEN_ONLY_BITPACKING with 1-byte items holds at most 8 nodes per row"):
        _build(parent_list, selected, seq, k, steps, 9, 2, np.uint8)
    mask = np.zeros(2 * 9 * 9 - 1, dtype=np.bool_)
    with pytest.raises(ValueError, match=r"tree_mask has 161 bytes; expected 162 \(bs \* N \* N\)"):
        specdec.build_tree_kernel_efficient(parent_list, selected, seq, mask, np.zeros(18, dtype=np.int64),
                                            *[np.zeros((2, 9), dtype=np.int64) for _ in range(3)], k, steps, 9, 1)
    mask = np.zeros(int(sum(9 * (s + 9) for s in seq)) + 1, dtype=np.bool_)
    with pytest.raises(ValueError, match=r"the masks of requests 0\.\.1 need .* \(the whole batch's\); expected exactly that"):
        specdec.build_tree_kernel_efficient(parent_list, selected, seq, mask, np.zeros(18, dtype=np.int64),
                                            *[np.zeros((2, 9), dtype=np.int64) for _ in range(3)], k, steps, 9, 0)


def _golden_tree_call(golden, fn, positional_order):
    """SGLang's tree test (the golden above) through `fn`: `positional_order` "old" passes draft_probs as
    the 11th argument and the thresholds after it, "new" the thresholds as the 11th and 12th."""
    c = golden("samplers/sglang_tree_target_only_test.json")
    i = c["inputs"]
    candidates = np.array(i["candidates"], dtype=np.int64)
    bs, n = candidates.shape
    for case in c["cases"]:
        predicts = np.full(i["predicts_len"], i["predicts_init"], dtype=np.int32)
        accept_index = np.full((bs, i["num_spec_steps"]), -7, dtype=np.int32)
        accept_token_num = np.full(bs, -7, dtype=np.int32)
        target = np.array(i["target_probs"], dtype=np.float32)
        args = [predicts, accept_index, accept_token_num, candidates, np.array(i["retrieve_index"], dtype=np.int64),
                np.array(i["retrieve_next_token"], dtype=np.int64), np.array(i["retrieve_next_sibling"], dtype=np.int64),
                np.array(i["uniform_samples"], dtype=np.float32), np.array(i["uniform_samples_for_final_sampling"], dtype=np.float32),
                target]
        args += [np.zeros_like(target)] if positional_order == "old" else []
        fn(*args, case["threshold_single"], case["threshold_acc"], True)
        np.testing.assert_array_equal(predicts, case["expected_predicts"])
        np.testing.assert_array_equal(accept_index, case["expected_accept_index"])
        np.testing.assert_array_equal(accept_token_num, case["expected_accept_token_num"])


def test_tree_verifier_takes_both_argument_orders_and_the_rejmask_form(golden):
    # sgl-kernel 0.3.21's order (draft_probs 11th) and the newer one without it give SGLang's results; a
    # new-order positional call once shifted the thresholds into draft_probs' place.
    _golden_tree_call(golden, specdec.tree_speculative_sampling_target_only, "old")
    _golden_tree_call(golden, specdec.tree_speculative_sampling_target_only, "new")
    _golden_tree_call(golden, specdec.tree_speculative_sampling_target_only_rejmask, "new")
    with pytest.raises(TypeError, match="threshold_single given twice"):
        _golden_tree_call(golden, lambda *a: specdec.tree_speculative_sampling_target_only(*a[:11], threshold_single=0.5), "new")


def _chain_reference(candidates, next_token, coins, final_coin, target, ts, ta):
    """The chain verifier of sgl-kernel PR #15687 for one request, transcribed: follow next_token, accept
    iff coin <= mass / threshold_acc or p >= threshold_single (mass: this step's p), stop at the first
    rejection; the final draw from the last accepted row without the rejected token (inverse CDF,
    first index whose running sum exceeds u * sum)."""
    accepted, cur, coin, row, rejected = [0], 0, coins[0], 0, -1
    while next_token[cur] != -1:
        child = next_token[cur]
        tok = candidates[child]
        p = target[row, tok]
        if coin <= p / max(ta, 1e-9) or p >= ts:
            accepted.append(child)
            cur, row, coin = child, child, coins[child]
        else:
            rejected = tok
            break
    q = target[row].astype(np.float32).copy()
    if rejected >= 0:
        q[rejected] = 0
    u = final_coin * q.sum(dtype=np.float32)
    running = np.cumsum(q, dtype=np.float32)
    final = int(np.argmax(running > u)) if (running > u).any() else q.size - 1
    return accepted, final


def test_chain_verifier_equals_the_reference_and_ignores_siblings():
    rng = np.random.default_rng(12)
    v, n, bs = 6, 5, 200
    candidates = rng.integers(0, v, (bs, n)).astype(np.int64)
    next_token = np.tile(np.array([1, 2, 3, 4, -1], dtype=np.int64), (bs, 1))
    siblings = rng.integers(-1, n, (bs, n)).astype(np.int64)  # not read by the chain form
    ri = np.arange(bs * n, dtype=np.int64).reshape(bs, n)
    target = rng.dirichlet(np.full(v, 0.5), (bs, n)).astype(np.float32)
    coins = rng.random((bs, n), dtype=np.float32)
    final = rng.random(bs, dtype=np.float32)
    for ts, ta in ((1.0, 1.0), (0.4, 0.7)):
        predicts = np.full(bs * n, -1, dtype=np.int32)
        accept_index = np.full((bs, n), -1, dtype=np.int32)
        accept_token_num = np.zeros(bs, dtype=np.int32)
        specdec.sglang.chain_speculative_sampling_target_only(predicts, accept_index, accept_token_num, candidates, ri, next_token,
                                                              siblings, coins, final, target, ts, ta)
        for b in range(bs):
            accepted, token = _chain_reference(candidates[b], next_token[b], coins[b], final[b], target[b], ts, ta)
            assert accept_token_num[b] == len(accepted) - 1
            assert accept_index[b, :len(accepted)].tolist() == [b * n + a for a in accepted]
            assert predicts[b * n + accepted[-1]] == token, b
            for j in range(len(accepted) - 1):
                assert predicts[b * n + accepted[j]] == candidates[b, accepted[j + 1]]


def test_sglang_segment_packbits_in_place():
    rng = np.random.default_rng(3)
    lengths = np.array([5, 0, 17, 8, 9])
    x = rng.random(lengths.sum()) < 0.5
    ip = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    op = np.concatenate([[0], np.cumsum((lengths + 7) // 8)]).astype(np.int32)
    y = np.full(op[-1], 0xAA, dtype=np.uint8)
    specdec.sglang.segment_packbits(x, ip, op, y, 3)  # the first 3 segments only
    for b in range(3):
        np.testing.assert_array_equal(y[op[b]:op[b + 1]], np.packbits(x[ip[b]:ip[b + 1]], bitorder="little"))
    assert (y[op[3]:] == 0xAA).all()
    with pytest.raises(ValueError, match="output_indptr: expected at least batch_size \\+ 1 = 6 offsets; got 5"):
        specdec.sglang.segment_packbits(x, ip, op[:5], y, 5)


def _reconstruct_reference(mask, seq_lens):
    """SGLang's reconstructIndicesFromTreeMask kernel transcribed: mask [bs, N, N], only j < i read."""
    bs, n, _ = mask.shape
    pos = np.zeros(bs * n, np.int64)
    ri, nt, ns = (np.full((bs, n), -1, np.int64) for _ in range(3))
    for b in range(bs):
        for i in range(n):
            anc = [j for j in range(i) if mask[b, i, j]]
            parent = anc[-1] if anc else -1
            pos[b * n + i] = seq_lens[b] + len(anc)
            ri[b, i] = b * n + i
            nt[b, i] = next((k for k in range(i + 1, n) if mask[b, k, i]), -1)
            if parent != -1:
                ns[b, i] = next((k for k in range(i + 1, n)
                                 if mask[b, k, parent] and not any(mask[b, k, j] for j in range(parent + 1, k))), -1)
    return pos, ri, nt, ns


def test_reconstruct_indices_from_tree_mask_equals_sglangs_kernel_and_build_tree():
    rng = np.random.default_rng(8)
    for trial in range(30):
        bs, n = int(rng.integers(1, 4)), int(rng.integers(1, 12))
        seq = rng.integers(0, 100, bs).astype(np.int64)
        if trial % 2:  # arbitrary masks: the kernel's definition holds for any bits
            mask = rng.random((bs, n, n)) < 0.4
        else:  # trees, parents first: the mask is the ancestor relation
            mask = np.zeros((bs, n, n), bool)
            for b in range(bs):
                parent = [-1] + [int(rng.integers(0, i)) for i in range(1, n)]
                for i in range(n):
                    j = parent[i]
                    while j != -1:
                        mask[b, i, j] = True
                        j = parent[j]
                    mask[b, i, i] = True
        out = (np.zeros(bs * n, np.int64), *(np.zeros((bs, n), np.int64) for _ in range(3)))
        specdec.sglang.reconstruct_indices_from_tree_mask(mask.reshape(-1), seq, *out, bs, n)
        for got, want in zip(out, _reconstruct_reference(mask, seq)):
            np.testing.assert_array_equal(got, want, err_msg=f"trial {trial}")
    # build_tree's own QLEN_ONLY masks give back build_tree's buffers: an EAGLE tree of top-k 2, 3 steps,
    # whose selected candidates (flat 0, 1, 2, 4, 6) hang under the root, the root, flat 0, flat 1, flat 2.
    k, steps, n = 2, 3, 6
    parent_list = np.array([[-1, 0, 1, 2, 4]] * 2, np.int64)
    selected = np.array([[0, 1, 2, 4, 6], [0, 1, 2, 3, 4]], np.int64)
    seq = np.array([7, 3], np.int64)
    mask, positions, (ri, nt, ns) = _build(parent_list, selected, seq, k, steps, n, 1, np.bool_)
    assert nt[0].tolist() == [1, 3, 4, 5, -1, -1] and ns[0].tolist() == [-1, 2, -1, -1, -1, -1]
    out = (np.zeros(2 * n, np.int64), *(np.zeros((2, n), np.int64) for _ in range(3)))
    specdec.sglang.reconstruct_indices_from_tree_mask(mask, seq, *out, 2, n)
    for got, want in zip(out, (positions, ri, nt, ns)):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="tree_mask has 10 entries; expected bs \\* N \\* N = 8"):
        specdec.sglang.reconstruct_indices_from_tree_mask(np.zeros(10, bool), np.zeros(2, np.int64), np.zeros(4, np.int64),
                                                          *(np.zeros((2, 2), np.int64) for _ in range(3)), 2, 2)
