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


# ---- FlashInfer 0.7's sampling family: signatures, dtypes, per-row randomness --------------------------


def _frequencies_match(tokens, want, n):
    """Sampled frequencies within 5 standard errors of `want` (a distribution), and nothing outside it."""
    freq = np.bincount(tokens, minlength=want.size) / n
    assert not freq[want == 0].any(), np.nonzero(freq[want == 0])
    assert np.all(np.abs(freq - want) <= 5 * np.sqrt(want * (1 - want) / n) + 1e-12), (freq, want)


def _kept(p, mask):
    w = np.where(mask, p, 0).astype(np.float64)
    return w / w.sum()


def test_filtered_samplers_draw_from_the_filtered_distribution():
    # One row tiled n times with a fixed seed: each sampler's frequencies match the distribution its
    # filter defines (FlashInfer's definitions: strictly larger counts / masses, ties kept; min_p against
    # the row's maximum), within 5 standard errors.
    p = np.array([0.05, 0.2, 0.1, 0.2, 0.3, 0.05, 0.1], dtype=np.float32)
    n = 40000
    rows = np.tile(p, (n, 1))
    larger = np.array([(p > x).sum() for x in p])
    mass = np.array([p[p > x].sum() for x in p])
    cases = (
        (specdec.top_k_sampling_from_probs(rows, 2, seed=1), _kept(p, larger < 2)),  # 0.3 and both 0.2 ties
        (specdec.top_p_sampling_from_probs(rows, 0.6, seed=2), _kept(p, mass < 0.6)),
        (specdec.min_p_sampling_from_probs(rows, 0.5, seed=3), _kept(p, p >= 0.5 * p.max())),
        (specdec.top_k_top_p_sampling_from_probs(rows, 3, 0.45, seed=4), None),
        (specdec.top_k_top_p_sampling_from_probs(rows, 3, 0.45, filter_apply_order="joint", seed=5),
         _kept(p, (larger < 3) & (mass < 0.45))),
        (specdec.sampling_from_logits(np.log(rows), seed=6), p.astype(np.float64) / p.sum()),
    )
    # top_k_first: top-p judged on the top-k renormalised row.
    k_first = _kept(p, larger < 3)
    k_mass = np.array([k_first[k_first > x].sum() for x in k_first])
    for i, (tokens, want) in enumerate(cases):
        assert tokens.dtype == np.int32 and tokens.shape == (n,)
        _frequencies_match(tokens, _kept(k_first, (k_first > 0) & (k_mass < 0.45)) if want is None else want, n)


def test_samplers_are_the_filter_then_the_draw_on_the_same_streams():
    rng = np.random.default_rng(3)
    probs = rng.dirichlet(np.full(300, 0.2), 16).astype(np.float32)
    k = rng.integers(1, 40, 16)
    np.testing.assert_array_equal(specdec.top_k_sampling_from_probs(probs, k, seed=9, offset=2),
                                  specdec.sampling_from_probs(specdec.top_k_renorm_probs(probs, k), seed=9, offset=2))
    np.testing.assert_array_equal(specdec.top_p_sampling_from_probs(probs, 0.7, seed=9),
                                  specdec.sampling_from_probs(specdec.top_p_renorm_probs(probs, 0.7), seed=9))
    logits = np.log(probs)
    np.testing.assert_array_equal(specdec.sampling_from_logits(logits, seed=5), specdec.sampling_from_probs(specdec.softmax(logits), seed=5))
    # Per-row parameters belong to the rows of probs, read at indices[i] (FlashInfer's layout); the output
    # takes the dtype of indices.
    idx = np.array([5, 5, 0, 15], dtype=np.int64)
    got = specdec.top_k_sampling_from_probs(probs, k, indices=idx, seed=9)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, specdec.top_k_sampling_from_probs(probs[idx], k[idx], seed=9))
    assert specdec.sampling_from_probs(probs, indices=idx.astype(np.int32), seed=1).dtype == np.int32
    with pytest.raises(ValueError, match=r"top_k: expected one value, or one per row of probs \(16\); got 4"):
        specdec.top_k_sampling_from_probs(probs, k[:4], indices=idx, seed=9)


def test_per_row_seed_and_offset_arrays():
    # FlashInfer's int64 / uint64 tensors of one seed and offset per output row (what CUDA graphs
    # capture): row i reads Philox stream (seed[i], i) at offset[i]; equal to the integer form where the
    # values are equal; a length-1 array is broadcast.
    rng = np.random.default_rng(4)
    probs = rng.dirichlet(np.ones(50), 8).astype(np.float32)
    same = specdec.sampling_from_probs(probs, seed=np.full(8, 7, np.int64), offset=np.full(8, 3, np.uint64))
    np.testing.assert_array_equal(same, specdec.sampling_from_probs(probs, seed=7, offset=3))
    np.testing.assert_array_equal(specdec.sampling_from_probs(probs, seed=np.array([7]), offset=np.array([3])), same)
    seeds, offsets = rng.integers(0, 2**40, 8), rng.integers(0, 100, 8)
    got = specdec.min_p_sampling_from_probs(probs, 0.0, seed=seeds, offset=offsets)
    for i in range(8):
        u = specdec.philox_uniforms(int(seeds[i]), int(offsets[i]), i + 1, 1, "float32")[i]
        np.testing.assert_array_equal(got[i], specdec.sampling_from_probs(probs[i:i + 1], uniforms=u))
    with pytest.raises(ValueError, match="seed and offset: expected both integers or both arrays"):
        specdec.sampling_from_probs(probs, seed=np.arange(8), offset=0)
    with pytest.raises(TypeError, match="seed: expected an integer, or int64 / uint64 values of one per row; got dtype int32"):
        specdec.sampling_from_probs(probs, seed=np.arange(8, dtype=np.int32), offset=np.zeros(8, np.int64))
    with pytest.raises(ValueError, match=r"offset: expected 1 or 8 values \(one per output row\); got shape \(3,\)"):
        specdec.sampling_from_probs(probs, seed=np.zeros(8, np.int64), offset=np.zeros(3, np.int64))


def test_return_valid_marks_rows_without_mass():
    rng = np.random.default_rng(6)
    probs = rng.dirichlet(np.ones(20), 5).astype(np.float32)
    probs[2] = 0
    tokens, valid = specdec.top_p_sampling_from_probs(probs, 0.9, seed=3, return_valid=True)
    assert valid.tolist() == [True, True, False, True, True] and tokens[2] == 0
    # The other rows keep their own streams (row i: stream (seed, i)).
    for i in (0, 1, 3, 4):
        u = specdec.philox_uniforms(3, 0, i + 1, 1, "float32")[i]
        assert tokens[i] == specdec.sampling_from_probs(specdec.top_p_renorm_probs(probs[i:i + 1], 0.9), uniforms=u)[0]
    tokens, valid = specdec.sampling_from_probs(probs[[0, 1]], seed=3, return_valid=True)
    assert valid.all() and tokens.tolist() == specdec.sampling_from_probs(probs[[0, 1]], seed=3).tolist()


def test_flashinfer_07_signatures():
    probs = np.random.default_rng(1).dirichlet(np.ones(30), 3).astype(np.float32)
    assert specdec.top_k_renorm_prob is specdec.top_k_renorm_probs and specdec.top_p_renorm_prob is specdec.top_p_renorm_probs
    # The third positional argument is FlashInfer's is_deterministic; out is keyword only.
    np.testing.assert_array_equal(specdec.top_k_renorm_probs(probs, 5, True), specdec.top_k_renorm_probs(probs, 5))
    out = np.empty_like(probs)
    assert specdec.top_p_renorm_probs(probs, 0.5, out=out) is out
    with pytest.raises(TypeError, match="is_deterministic"):
        specdec.top_k_renorm_probs(probs, 5, out)
    x = np.random.default_rng(2).integers(-2, 3, 21)
    for order in ("big", "little"):
        np.testing.assert_array_equal(specdec.packbits(x, order), np.packbits(x != 0, bitorder=order))
    assert specdec.packbits(np.zeros(0, np.float32)).shape == (0,)
