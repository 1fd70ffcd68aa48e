# SPDX-License-Identifier: Apache-2.0
# FlashInfer's sampling functions: the goldens the C++ tests use (computed by FlashInfer's code or
# copied from its docstrings), plain numpy references, and statistical checks of the draws.
import numpy as np
import pytest

import specdec


def reference_top_k(probs, k):
    out = probs.astype(np.float64).copy()
    for r in range(probs.shape[0]):
        kth = np.sort(probs[r])[::-1][k - 1]
        keep = probs[r] >= kth
        out[r] = np.where(keep, probs[r], 0) / probs[r][keep].astype(np.float64).sum()
    return out.astype(np.float32)


def reference_top_p(probs, p):
    out = np.zeros_like(probs)
    for r in range(probs.shape[0]):
        larger = np.array([probs[r][probs[r] > v].astype(np.float64).sum() for v in probs[r]])
        keep = larger < p
        out[r] = np.where(keep, probs[r], 0) / probs[r][keep].astype(np.float64).sum()
    return out


def random_probs(rows, v, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, v)) * 2
    p = np.exp(x - x.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)).astype(np.float32)


def test_renorm_equals_flashinfers_docstring(golden):
    c = golden("samplers/flashinfer_renorm_docstring.json")
    probs = np.array(c["probs"], dtype=np.float32)
    np.testing.assert_allclose(specdec.top_p_renorm_probs(probs, c["top_p"]), c["recomputed_top_p_renorm"], atol=1e-6)
    np.testing.assert_allclose(specdec.top_k_renorm_probs(probs, c["top_k"]), c["recomputed_top_k_renorm"], atol=1e-6)
    np.testing.assert_allclose(specdec.top_p_renorm_probs(probs, c["top_p"]), c["docstring_top_p_renorm"], atol=2e-4)
    np.testing.assert_allclose(specdec.top_k_renorm_probs(probs, c["top_k"]), c["docstring_top_k_renorm"], atol=2e-4)


def test_renorm_equals_a_numpy_reference_with_per_row_parameters():
    probs = random_probs(6, 300, 1)
    probs[2, 10:14] = probs[2, 9]  # ties at the pivot
    probs[2] /= probs[2].sum()
    ks = np.array([1, 5, 12, 300, 40, 7])
    ps = np.array([0.05, 0.5, 0.9, 1.0, 0.3, 0.7], dtype=np.float32)
    got_k = specdec.top_k_renorm_probs(probs, ks)
    got_p = specdec.top_p_renorm_probs(probs, ps)
    for r in range(6):
        np.testing.assert_allclose(got_k[r], reference_top_k(probs[r:r + 1], int(ks[r]))[0], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(got_p[r], reference_top_p(probs[r:r + 1], float(ps[r]))[0], rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(specdec.top_k_renorm_probs(probs, 12)[2], got_k[2])


def test_renorm_in_place():
    probs = random_probs(3, 50, 2)
    want = specdec.top_k_renorm_probs(probs, 4)
    out = specdec.top_k_renorm_probs(probs, 4, out=probs)
    assert out is probs
    np.testing.assert_array_equal(probs, want)


def test_chain_speculative_sampling_equals_flashinfers_goldens(flashinfer_chains):
    for b, draft, ids, target, uniforms in flashinfer_chains:
        accepted_before = np.array([5] * ids.shape[0], dtype=np.int32)
        out, accepted, emitted = specdec.chain_speculative_sampling(draft, ids, target, accepted_before.copy(),
                                                                    uniforms=uniforms)
        np.testing.assert_array_equal(out, b["expected_output_token_ids"])
        np.testing.assert_array_equal(accepted - 5, b["expected_accepted_token_num"])  # FlashInfer adds
        np.testing.assert_array_equal(emitted, b["expected_emitted_draft_token_num"])


def test_chain_speculative_sampling_is_lossless():
    # One position, V = 4: the emitted first token is distributed as the target whatever the draft.
    target = np.array([[[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]]], dtype=np.float32)
    draft = np.array([[[0.4, 0.3, 0.2, 0.1]]], dtype=np.float32)
    n = 20000
    draft_all = np.repeat(draft, n, axis=0)
    target_all = np.repeat(target, n, axis=0)
    # The draft token drawn from the draft distribution (fixed seed), as a drafter would.
    ids = np.random.default_rng(3).choice(4, size=(n, 1), p=draft[0, 0]).astype(np.int32)
    out, accepted, emitted = specdec.chain_speculative_sampling(draft_all, ids, target_all, seed=11)
    counts = np.bincount(out[:, 0], minlength=4) / n
    # 5 standard deviations of a proportion over n draws.
    assert np.all(np.abs(counts - target[0, 0]) < 5 * np.sqrt(target[0, 0] * (1 - target[0, 0]) / n))
    # Acceptance rate alpha = sum min(p, q) = 0.1 + 0.2 + 0.2 + 0.1.
    alpha = float(np.minimum(target[0, 0], draft[0, 0]).sum())
    assert abs(emitted.mean() - alpha) < 5 * np.sqrt(alpha * (1 - alpha) / n)


def test_sampling_from_probs_is_the_inverse_cdf_and_follows_the_distribution():
    probs = random_probs(5, 64, 4)
    u = np.array([0.0, 0.3, 0.5, 0.9, 0.999], dtype=np.float32)
    got = specdec.sampling_from_probs(probs, uniforms=u)
    for r in range(5):
        cdf = np.cumsum(probs[r].astype(np.float64))
        want = int(np.searchsorted(cdf, u[r] * cdf[-1], side="right"))
        assert got[r] == want
    assert got.dtype == np.int32
    # Seeded draws repeat; their frequencies follow the row.
    p = np.array([[0.5, 0.25, 0.125, 0.125]], dtype=np.float32)
    many = np.repeat(p, 40000, axis=0)
    a = specdec.sampling_from_probs(many, seed=7, offset=3)
    np.testing.assert_array_equal(a, specdec.sampling_from_probs(many, seed=7, offset=3))
    freq = np.bincount(a, minlength=4) / len(a)
    assert np.all(np.abs(freq - p[0]) < 5 * np.sqrt(p[0] * (1 - p[0]) / len(a)))
    # indices pick rows.
    picked = specdec.sampling_from_probs(probs, indices=np.array([4, 4, 0]), uniforms=u[:3])
    np.testing.assert_array_equal(picked, specdec.sampling_from_probs(probs[[4, 4, 0]], uniforms=u[:3]))


def test_philox_uniforms_are_the_streams_the_sampling_functions_read():
    u = specdec.philox_uniforms(5, 0, 3, 9)
    assert u.shape == (3, 9) and np.all((u >= 0) & (u < 1))
    assert len(set(u.ravel().tolist())) == 27
    np.testing.assert_array_equal(specdec.philox_uniforms(5, 4, 3, 5), u[:, 4:])
    probs = random_probs(7, 100, 9)
    seeded = specdec.sampling_from_probs(probs, seed=123, offset=17)
    explicit = specdec.sampling_from_probs(probs, uniforms=specdec.philox_uniforms(123, 17, 7, 1, "float32").ravel())
    np.testing.assert_array_equal(seeded, explicit)


def test_top_k_mask_logits_equals_a_numpy_reference():
    x = (np.random.default_rng(6).standard_normal((5, 400)) * 3).astype(np.float32)
    x[0, 3] = x[0, 7] = x[0].max() + 1  # a tie at the top
    x[2, 10] = -np.inf
    ks = np.array([1, 2, 30, 400, 7])
    got = specdec.top_k_mask_logits(x, ks)
    for r in range(5):
        kth = np.sort(x[r])[::-1][ks[r] - 1]
        np.testing.assert_array_equal(got[r], np.where(x[r] >= kth, x[r], -np.inf))
    y = x.copy()
    assert specdec.top_k_mask_logits(y, 30, out=y) is y
    np.testing.assert_array_equal(y[2], got[2])


def test_segment_packbits_equals_numpy_packbits_per_segment():
    x = np.random.default_rng(8).random(61) < 0.4
    indptr = np.array([0, 0, 13, 21, 50, 61], dtype=np.int32)
    for order in ("big", "little"):
        y, new_indptr = specdec.segment_packbits(x, indptr, bitorder=order)
        want = [np.packbits(x[indptr[i]:indptr[i + 1]], bitorder=order) for i in range(len(indptr) - 1)]
        np.testing.assert_array_equal(new_indptr, np.concatenate([[0], np.cumsum([len(w) for w in want])]))
        np.testing.assert_array_equal(y, np.concatenate(want))
    with pytest.raises(ValueError, match="bitorder"):
        specdec.segment_packbits(x, indptr, bitorder="middle")
    with pytest.raises(ValueError, match=r"indptr gives segment 0 elements \[0, 62\); expected a non-decreasing range within \[0, 61\]"):
        specdec.segment_packbits(x, np.array([0, 62], dtype=np.int32))


def test_top_k_top_p_sampling_from_logits_draws_from_the_filtered_distribution():
    x = (np.random.default_rng(12).standard_normal((6, 500)) * 2).astype(np.float32)
    u = np.array([0.0, 0.2, 0.45, 0.7, 0.9, 0.999], dtype=np.float32)
    got = specdec.top_k_top_p_sampling_from_logits(x, 40, 0.8, uniforms=u)
    for r in range(6):
        z = np.exp(x[r].astype(np.float64) - x[r].max())
        p = (z / z.sum()).astype(np.float32)
        kth = np.sort(p)[::-1][39]
        p = np.where(p >= kth, p, 0)
        p = (p / p.astype(np.float64).sum()).astype(np.float32)
        larger = np.array([p[p > v].astype(np.float64).sum() for v in p])
        p = np.where(larger < 0.8, p, 0)
        cdf = np.cumsum(p.astype(np.float64))
        want = int(np.searchsorted(cdf, u[r] * cdf[-1], side="right"))
        assert got[r] == want
        assert p[got[r]] > 0
    with pytest.raises(ValueError, match="filter_apply_order"):
        specdec.top_k_top_p_sampling_from_logits(x, 40, 0.8, filter_apply_order="both", seed=1)


def test_joint_filter_order_keeps_what_both_filters_keep_on_the_softmax():
    # FlashInfer's own test of the joint order (tests/test_sampling.py) masks with the top-p filter on the
    # normalised row and the top-k pivot on the same row, and takes their minimum; so does this reference.
    rng = np.random.default_rng(13)
    x = (rng.standard_normal((8, 300)) * 3).astype(np.float32)
    k = np.array([1, 3, 10, 40, 100, 300, 5, 20])
    p = np.array([0.9, 0.5, 0.3, 0.95, 0.7, 0.2, 0.99, 0.6], dtype=np.float32)
    for r in range(8):
        probs = specdec.softmax(x[r:r + 1])[0]
        larger = np.array([probs[probs > v].astype(np.float64).sum() for v in probs])
        count = np.array([(probs > v).sum() for v in probs])
        keep = (larger < p[r]) & (count < k[r])
        support = set()
        for seed in range(200):
            support.add(int(specdec.top_k_top_p_sampling_from_logits(x[r:r + 1], k[r:r + 1], p[r:r + 1],
                                                                     filter_apply_order="joint", seed=seed)[0]))
        assert support <= set(np.flatnonzero(keep).tolist())
        # Every draw at uniform u lands where the renormalised kept mass puts it.
        kept = np.where(keep, probs, 0).astype(np.float64)
        kept = (kept / kept.sum()).astype(np.float32)
        for u in (0.0, 0.3, 0.77, 0.999):
            want = int(np.searchsorted(np.cumsum(kept.astype(np.float64)), u * kept.astype(np.float64).sum(), side="right"))
            got = specdec.top_k_top_p_sampling_from_logits(x[r:r + 1], k[r:r + 1], p[r:r + 1], filter_apply_order="joint",
                                                           uniforms=np.array([u], dtype=np.float32))
            assert got[0] == want
    # The joint order never keeps fewer tokens than top-k first (which renormalises before the top-p cut).
    row = np.array([[0.4, 0.3, 0.2, 0.1]], dtype=np.float32)
    logits = np.log(row)
    joint = {int(specdec.top_k_top_p_sampling_from_logits(logits, 2, 0.5, filter_apply_order="joint", seed=s)[0])
             for s in range(100)}
    first = {int(specdec.top_k_top_p_sampling_from_logits(logits, 2, 0.5, seed=s)[0]) for s in range(100)}
    assert joint == {0, 1} and first == {0}
