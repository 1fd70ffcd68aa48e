# SPDX-License-Identifier: Apache-2.0
# The host's vector paths against plain references written here, bit for bit: FlashInfer's row filters
# (top-k, top-p, joint, masking) against numpy and the canonical order of sums spelled out, and the Philox
# streams (uniforms, exponentials) against a pure-Python Philox-4x32-10.
import math

import numpy as np
import pytest

import specdec

# ---- the canonical order (docs/sampling.md) ---------------------------------------------------------


def canonical_sum(row, keep):
    """The double sum of row[keep] in specdec's canonical order: entry j of each 1024-entry chunk in lane
    j % 8, each lane summed in index order, lanes combined ((0+1)+(2+3))+((4+5)+(6+7)), chunks in order.
    np.cumsum adds in order (np.sum would add pairwise)."""
    x = np.where(keep, row.astype(np.float64), 0.0)
    chunks = -(-len(x) // 1024)
    x = np.concatenate([x, np.zeros(chunks * 1024 - len(x))]).reshape(chunks, 128, 8)
    lanes = np.cumsum(x, axis=1)[:, -1, :]
    per_chunk = ((lanes[:, 0] + lanes[:, 1]) + (lanes[:, 2] + lanes[:, 3])) + ((lanes[:, 4] + lanes[:, 5]) + (lanes[:, 6] + lanes[:, 7]))
    return float(np.cumsum(per_chunk)[-1])


def renormalised(row, keep):
    mass = canonical_sum(row, keep)
    return np.where(keep, (row.astype(np.float64) / mass).astype(np.float32), np.float32(0))


def top_p_keep(row, p):
    """A token is kept iff the canonical mass of the strictly larger entries is below p: the smallest such
    value by bisection over the sorted distinct values (the mass above is monotone in the value)."""
    p = float(np.float32(p))  # a Python float: numpy 2 would compare a double with a float32 in float32
    values = np.unique(row[row > 0])  # ascending; zeros are never needed (their mass above is the total)
    if canonical_sum(row, np.ones(len(row), bool)) < p:
        return np.ones(len(row), bool)
    lo, hi = 0, len(values) - 1  # values[hi] (the largest) has nothing above it
    while lo < hi:
        mid = (lo + hi) // 2
        if canonical_sum(row, row > values[mid]) < p:
            hi = mid
        else:
            lo = mid + 1
    return row >= values[lo]


def rows_of(kind, rows, v, seed):
    rng = np.random.default_rng(seed)
    if kind == "softmax":
        x = rng.standard_normal((rows, v)) * 3
        p = np.exp(x - x.max(axis=1, keepdims=True))
    elif kind == "ties":
        p = np.floor(rng.random((rows, v)) * 4)
    elif kind == "equal":
        p = np.ones((rows, v))
    else:  # "wide": a range of 2^45, so that the order of a sum shows in its last bit
        p = np.ldexp(0.5 + 0.5 * rng.random((rows, v)), -rng.integers(0, 45, (rows, v)))
        p[rng.random((rows, v)) < 0.2] = 0
    p[:, 0] += p.sum(axis=1) == 0
    return (p / p.sum(axis=1, keepdims=True)).astype(np.float32)


KINDS = ["softmax", "ties", "equal", "wide"]
SHAPES = [(1, 1), (3, 7), (2, 1000), (2, 5000), (1, 40000), (1, 140000)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("rows,v", SHAPES)
def test_top_k_filters_equal_the_reference(kind, rows, v):
    probs = rows_of(kind, rows, v, seed=v + len(kind))
    logits = np.log(probs + np.float32(1e-30)) * np.float32(3)
    logits[:, ::7] = -np.inf
    for k in sorted({min(k, v) for k in (1, 2, 50, max(1, v // 300), max(1, v // 40), (v + 1) // 2, max(1, v - 1), v)}):
        got_p = specdec.top_k_renorm_probs(probs, k)
        got_l = specdec.top_k_mask_logits(logits, k)
        for r in range(rows):
            kth = np.sort(probs[r])[::-1][k - 1]
            np.testing.assert_array_equal(got_p[r].view(np.int32), renormalised(probs[r], probs[r] >= kth).view(np.int32), err_msg=f"k={k}")
            kth = np.sort(logits[r])[::-1][k - 1]
            np.testing.assert_array_equal(got_l[r], np.where(logits[r] >= kth, logits[r], -np.inf), err_msg=f"k={k}")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("rows,v", SHAPES)
def test_top_p_filter_equals_the_reference(kind, rows, v):
    probs = rows_of(kind, rows, v, seed=2 * v + len(kind))
    # p near 0 and 1, 1 itself, and just either side of the sorted row's partial sums (the test's
    # closest calls).
    s = np.cumsum(np.sort(probs[0])[::-1][:8].astype(np.float64))
    ps = [1e-9, 0.3, 0.9, 0.999999, 1.0] + [float(np.nextafter(np.float32(x), np.float32(d))) for x in s for d in (0, 2)]
    ps = [min(1.0, max(p, 1e-12)) for p in ps]
    for p in ps:
        got = specdec.top_p_renorm_probs(probs, p)
        for r in range(rows):
            keep = top_p_keep(probs[r], np.float32(p))
            np.testing.assert_array_equal(got[r].view(np.int32), renormalised(probs[r], keep).view(np.int32), err_msg=f"p={p}")


@pytest.mark.parametrize("rows,v", [(2, 1000), (1, 40000)])
def test_joint_filter_equals_the_reference(rows, v):
    from specdec.flashinfer import _per_row

    probs = rows_of("softmax", rows, v, seed=5)
    for k in (1, 20, v):
        for p in (0.3, 0.9, 1.0):
            out = np.empty_like(probs)
            specdec._specdec.filter_rows(probs, out, _per_row("top_k", k, "int64", probs), _per_row("top_p", p, "float32", probs), True, 0)
            for r in range(rows):
                kth = np.sort(probs[r])[::-1][k - 1]
                keep = top_p_keep(probs[r], np.float32(p)) & (probs[r] >= kth)
                np.testing.assert_array_equal(out[r].view(np.int32), renormalised(probs[r], keep).view(np.int32))


def test_filters_in_place_and_per_row_parameters_give_the_same_bits():
    probs = rows_of("softmax", 4, 30000, seed=9)
    ks, ps = np.array([1, 7, 300, 30000]), np.array([0.2, 0.5, 0.95, 1.0], np.float32)
    want_k, want_p = specdec.top_k_renorm_probs(probs, ks), specdec.top_p_renorm_probs(probs, ps)
    for r in range(4):
        np.testing.assert_array_equal(want_k[r], specdec.top_k_renorm_probs(probs[r:r + 1], int(ks[r]))[0])
        np.testing.assert_array_equal(want_p[r], specdec.top_p_renorm_probs(probs[r:r + 1], float(ps[r]))[0])
    inplace = probs.copy()
    assert specdec.top_p_renorm_probs(inplace, ps, out=inplace) is inplace
    np.testing.assert_array_equal(inplace, want_p)


# ---- Philox --------------------------------------------------------------------------------------------

M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
MASK = 0xFFFFFFFF


def philox_word(seed, subsequence, i):
    """Word i of Philox stream (seed, subsequence), as specdec/core/rng.hpp defines it."""
    block = (i >> 2) & ((1 << 62) - 1)
    c = [block & MASK, (block >> 32) & MASK, subsequence & MASK, (subsequence >> 32) & MASK]
    k0, k1 = seed & MASK, (seed >> 32) & MASK
    for r in range(10):
        if r:
            k0, k1 = (k0 + W0) & MASK, (k1 + W1) & MASK
        p0, p1 = M0 * c[0], M1 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & MASK, (p0 >> 32) ^ c[3] ^ k1, p0 & MASK]
    return c[i & 3]


def uniform_float(seed, sub, i):
    return np.float32((philox_word(seed, sub, i % 2**64) >> 8) * 2.0**-24)


def uniform_double(seed, sub, i):
    i %= 2**64
    w0, w1 = philox_word(seed, sub, (2 * i) % 2**64), philox_word(seed, sub, (2 * i + 1) % 2**64)
    return ((w0 >> 5) * 2**26 + (w1 >> 6)) * 2.0**-53


@pytest.mark.parametrize("seed", [0, 1, 0x243F6A8885A308D3, 2**64 - 1])
@pytest.mark.parametrize("offset", [0, 1, 2, 3, 5, 2**32 - 3, 2**62 - 7, 2**63 - 1, 2**64 - 9])
def test_philox_values_equal_a_python_philox(seed, offset):
    rows, count = 3, 37  # offsets not multiple of 4 (or 2), rows past the first, the 64-bit wrap
    f32 = specdec.philox_uniforms(seed, offset, rows, count, "float32")
    f64 = specdec.philox_uniforms(seed, offset, rows, count)
    exp = specdec.philox_exponentials(seed, offset, rows, count)
    for r in range(rows):
        for i in range(0, count, 3):
            u = uniform_double(seed, r, offset + i)
            assert f32[r, i] == uniform_float(seed, r, offset + i)
            assert f64[r, i] == u
            assert exp[r, i].view(np.int32) == np.float32(-math.log1p(-u)).view(np.int32)


def test_philox_exponentials_are_the_c_librarys_log1p_rounded_to_float():
    u = specdec.philox_uniforms(12345, 678, 4, 50000)
    e = specdec.philox_exponentials(12345, 678, 4, 50000)
    want = np.array([-math.log1p(-x) for x in u.ravel()], dtype=np.float64).astype(np.float32).reshape(u.shape)
    np.testing.assert_array_equal(e.view(np.int32), want.view(np.int32))
    # The first uniform is never 1; at u = 0 the exponential is +0.
    assert specdec.philox_exponentials(0, 0, 1, 1).dtype == np.float32


def test_rejection_sample_from_a_seed_equals_the_same_draws_given():
    rng = np.random.default_rng(3)
    batch, k, v = 6, 4, 3000
    cu = np.cumsum(rng.integers(0, k + 1, batch))
    tokens = int(cu[-1])
    target = rng.dirichlet(np.ones(v) * 0.05, tokens).astype(np.float32)
    draft = rng.dirichlet(np.ones(v) * 0.05, tokens).astype(np.float32)
    ids = rng.integers(0, v, tokens).astype(np.int32)
    bonus = rng.integers(0, v, batch).astype(np.int32)
    seed, offset = 77, 5
    got = specdec.rejection_sample(ids, None, k, cu, draft, target, bonus, seed=seed, offset=offset)
    counts = np.diff(cu, prepend=0)
    u = specdec.philox_uniforms(seed, offset, batch, k)
    uniforms = np.concatenate([u[r, :counts[r]] for r in range(batch)])
    e = np.array([-math.log1p(-x) for x in specdec.philox_uniforms(seed + 1, offset, batch, v).ravel()]).astype(np.float32)
    want = specdec.rejection_sample(ids, None, k, cu, draft, target, bonus, uniform_probs=uniforms, exponentials=e.reshape(batch, v))
    np.testing.assert_array_equal(got, want)


def test_top_k_first_sampling_on_the_host_is_the_two_filters_then_the_draw():
    # top_k_top_p_sampling_from_probs ("top_k_first" and "joint") on host rows runs fused (the top k alone past one
    # check pass): the tokens of top_k_renorm_probs, top_p_renorm_probs and sampling_from_probs, per-row k
    # and p, given uniforms or a seed, float32 and bf16 rows, rows with ties and k >= V.
    import ml_dtypes

    rng = np.random.default_rng(12)
    for trial in range(30):
        rows, v = int(rng.integers(1, 9)), int(rng.choice([5, 700, 4096, 50000]))
        logits = (rng.standard_normal((rows, v)) * rng.choice([0.5, 3.0])).astype(np.float32)
        if trial % 5 == 0:
            logits = np.round(logits)  # ties
        probs = specdec.softmax(logits)
        if trial % 3 == 0:
            probs = probs.astype(ml_dtypes.bfloat16)
        k = rng.integers(1, v + 3, rows) if trial % 2 else int(rng.integers(1, 60))
        p = rng.uniform(0.05, 1.0, rows).astype(np.float32) if trial % 2 else float(rng.choice([0.3, 0.9, 1.0]))
        u = rng.random(rows, dtype=np.float32)
        want = specdec.sampling_from_probs(
            specdec.top_p_renorm_probs(specdec.top_k_renorm_probs(probs, np.minimum(k, v)), p), uniforms=u)
        got = specdec.top_k_top_p_sampling_from_probs(probs, k, p, uniforms=u)
        np.testing.assert_array_equal(got, want, err_msg=f"trial {trial}")
        joint_rows = np.empty_like(probs)
        specdec._specdec.filter_rows(probs, joint_rows, np.atleast_1d(np.minimum(k, v)).astype(np.int64),
                                     np.atleast_1d(np.float32(p)), True, 0)
        want_joint = specdec.sampling_from_probs(joint_rows, uniforms=u)
        got_joint = specdec.top_k_top_p_sampling_from_probs(probs, k, p, filter_apply_order="joint", uniforms=u)
        np.testing.assert_array_equal(got_joint, want_joint, err_msg=f"trial {trial} (joint)")
        seeded = specdec.top_k_top_p_sampling_from_probs(probs, k, p, seed=7, offset=3)
        drawn = specdec.philox_uniforms(7, 3, rows, 1, "float32").reshape(rows)
        np.testing.assert_array_equal(seeded, specdec.top_k_top_p_sampling_from_probs(probs, k, p, uniforms=drawn))
        # From logits (each row softened in cache, fused): softmax's float32 rows, then the same sampler.
        x = logits.astype(ml_dtypes.bfloat16) if trial % 3 == 1 else logits
        if trial % 4 == 2:
            x[:, ::7] = -np.inf  # masked tokens
        soft = specdec.softmax(x)
        for order in ("top_k_first", "joint"):
            np.testing.assert_array_equal(
                specdec.top_k_top_p_sampling_from_logits(x, k, p, filter_apply_order=order, uniforms=u),
                specdec.top_k_top_p_sampling_from_probs(soft, k, p, filter_apply_order=order, uniforms=u),
                err_msg=f"trial {trial} (from logits, {order})")
        np.testing.assert_array_equal(specdec.top_k_top_p_sampling_from_logits(x, k, p, seed=7, offset=3),
                                      specdec.top_k_top_p_sampling_from_probs(soft, k, p, uniforms=drawn))
