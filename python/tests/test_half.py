# SPDX-License-Identifier: Apache-2.0
"""bf16 and fp16 rows on the host: numpy float16 arrays and numpy arrays of ml_dtypes.bfloat16 (torch's bf16
and fp16 CPU tensors reach the same C++ through DLPack). Each function gives, bit for bit, what it gives
for the float32 array holding the same values, reads the 16-bit row where it is (no float32 copy: checked
with tracemalloc, which sees numpy's allocations), and refuses other dtypes naming the dtype received."""
import tracemalloc

import ml_dtypes
import numpy as np
import pytest

import specdec

BF16 = ml_dtypes.bfloat16
HALVES = [np.float16, BF16]


def half_rows(dtype, rows, v, seed):
    """Logits-like rows in `dtype`: normal values, ties, -inf masks, signed zeros, large values."""
    g = np.random.default_rng(seed)
    x = g.normal(0.0, 4.0, size=(rows, v)).astype(np.float32)
    kind = g.integers(0, 64, size=(rows, v))
    x[kind == 0] = -np.inf
    x[kind == 1] = 3.0
    x[kind == 2] = 6e4
    x[kind == 3] = -0.0
    return x.astype(dtype)


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("dtype", HALVES, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("v", [1, 7, 300, 2061, 32000, 128256])
def test_row_primitives_match_float32(dtype, v):
    rows = 2 if v >= 32000 else 5
    h = half_rows(dtype, rows, v, v)
    f = h.astype(np.float32)
    assert same_bits(specdec.argmax(h), specdec.argmax(f))
    hv, fv = np.empty(rows, np.float32), np.empty(rows, np.float32)
    specdec.argmax(h, values=hv)
    specdec.argmax(f, values=fv)
    assert same_bits(hv, fv)
    for k in (1, 8, 50):
        if k <= v:
            for a, b in zip(specdec.topk(h, k), specdec.topk(f, k)):
                assert same_bits(a, b)
    for t in (1.0, 0.6, 0.0):
        assert same_bits(specdec.softmax(h, t), specdec.softmax(f, t))
        assert same_bits(specdec.log_softmax(h, t), specdec.log_softmax(f, t))
    assert same_bits(specdec.logsumexp(h, 0.7), specdec.logsumexp(f, 0.7))
    assert specdec.softmax(h).dtype == np.float32


@pytest.mark.parametrize("dtype", HALVES, ids=["float16", "bfloat16"])
def test_half_rows_are_read_in_place(dtype):
    """With the outputs given, a call allocates nothing near the size of a float32 copy of the rows."""
    h = half_rows(dtype, 16, 128256, 3)
    out, lse = np.empty(16, np.int32), np.empty(16, np.float32)
    values, indices = np.empty((16, 8), np.float32), np.empty((16, 8), np.int32)
    soft = np.empty(h.shape, np.float32)
    specdec.argmax(h, out=out)  # the first call builds the thread's scratch
    tracemalloc.start()
    try:
        specdec.argmax(h, out=out)
        specdec.topk(h, 8, values=values, indices=indices)
        specdec.logsumexp(h, 1.0, out=lse)
        specdec.softmax(h, 1.0, out=soft)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < h.nbytes // 4, f"{peak} bytes allocated for a {h.nbytes}-byte {h.dtype} input"
    assert same_bits(out, specdec.argmax(h.astype(np.float32)))


def test_read_only_bfloat16_input_is_accepted_and_a_bfloat16_output_refused_by_name():
    h = half_rows(BF16, 3, 100, 5)
    h.setflags(write=False)
    assert same_bits(specdec.argmax(h), specdec.argmax(h.astype(np.float32)))
    with pytest.raises(TypeError, match=r"out: expected dtype float32; got bfloat16"):
        specdec.softmax(h, 1.0, out=np.empty((3, 100), BF16))


@pytest.mark.parametrize("fn", [specdec.argmax, specdec.softmax, specdec.log_softmax, specdec.logsumexp,
                                lambda x: specdec.topk(x, 2)])
def test_other_dtypes_are_refused_naming_the_dtype(fn):
    for dtype, name in [(np.float64, "float64"), (np.int32, "int32"), (np.uint16, "uint16")]:
        with pytest.raises(TypeError, match=rf"logits: expected dtype float32 or float16 or bfloat16; got {name}"):
            fn(np.zeros((2, 4), dtype))


@pytest.mark.parametrize("dtype", HALVES, ids=["float16", "bfloat16"])
def test_nan_in_a_half_row_names_row_and_column(dtype):
    h = np.full((3, 40), 0.5, dtype)
    h[2, 17] = np.nan
    with pytest.raises(ValueError, match=r"logits row 2 .*column 17"):
        specdec.argmax(h)


def half_probs(dtype, rows, v, seed):
    """Softmax rows rounded to `dtype` (spread enough that their rounding moves the sum by < 1e-3, so the
    float32 rows of the same values are accepted too)."""
    g = np.random.default_rng(seed)
    x = g.normal(0.0, 2.0, size=(rows, v)).astype(np.float32)
    p = np.exp(x - x.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)).astype(dtype)


@pytest.mark.parametrize("dtype", HALVES, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("v", [1000, 32000])
def test_flashinfer_filters_return_the_rows_dtype_with_the_float32_results_rounded(dtype, v):
    """Each filter's output is the float32 rows' output rounded to the input's dtype by numpy / ml_dtypes
    (an independent rounding: round to nearest even), in a new array or in place."""
    h = half_probs(dtype, 4, v, v)
    f = h.astype(np.float32)
    assert abs(f.astype(np.float64).sum(axis=1) - 1).max() < 1e-3
    logits = half_rows(dtype, 4, v, v + 1)
    cases = [(specdec.top_k_renorm_probs, h, f, (50,)), (specdec.top_p_renorm_probs, h, f, (0.9,)),
             (specdec.top_k_mask_logits, logits, logits.astype(np.float32), (50,)),
             (specdec.top_k_renorm_probs, h, f, (np.array([1, 7, 50, v], np.int64),))]
    for fn, rows, rows32, args in cases:
        got = fn(rows, *args)
        assert got.dtype == rows.dtype
        assert same_bits(got, fn(rows32, *args).astype(dtype))
        again = rows.copy()
        fn(again, *args, out=again)
        assert same_bits(again, got)


def test_flashinfer_filters_refuse_an_out_of_another_dtype_and_a_bf16_row_beyond_its_rounding():
    h = half_probs(BF16, 2, 100, 9)
    with pytest.raises(TypeError, match=r"out: expected dtype bfloat16; got float32"):
        specdec.top_k_renorm_probs(h, 5, out=np.empty((2, 100), np.float32))
    # 1 + 2^-9 is inside bf16's tolerance (1e-3 + 2^-8), outside float32's.
    row = np.array([[0.5, 0.25, 0.25 + 2.0 ** -9]], np.float32)
    assert same_bits(specdec.top_k_renorm_probs(row.astype(BF16), 1), np.array([[1, 0, 0]], BF16))
    with pytest.raises(ValueError, match=r"sums to 1.00195; expected 1 within 0.001$"):
        specdec.top_k_renorm_probs(row, 1)
    with pytest.raises(ValueError, match=r"expected 1 within 0.001 plus the rounding of its bfloat16 entries \(2\^-8 of the sum\)"):
        specdec.top_k_renorm_probs(np.array([[0.5, 0.5078125]], BF16), 1)  # 1 + 2^-7


@pytest.mark.parametrize("dtype", HALVES, ids=["float16", "bfloat16"])
def test_sampling_from_half_rows_draws_the_float32_rows_tokens(dtype):
    h = half_probs(dtype, 64, 3000, 4)
    f = h.astype(np.float32)
    keep = np.abs(f.astype(np.float64).sum(axis=1) - 1) < 1e-4  # rows the float32 sampler accepts too
    h, f = h[keep], f[keep]
    assert len(h) >= 8
    for seed in range(5):
        assert same_bits(specdec.sampling_from_probs(h, seed=seed, offset=3), specdec.sampling_from_probs(f, seed=seed, offset=3))
    u = np.linspace(0, 1, len(h), endpoint=False, dtype=np.float32)
    assert same_bits(specdec.sampling_from_probs(h, uniforms=u), specdec.sampling_from_probs(f, uniforms=u))
    logits = half_rows(dtype, 6, 3000, 8)
    logits[logits == 6e4] = 5.0  # finite, and not one dominant token
    assert same_bits(specdec.sampling_from_logits(logits, seed=2), specdec.sampling_from_logits(logits.astype(np.float32), seed=2))
    # The filtered samplers filter in the rows' dtype, as FlashInfer's (its renormalised rows are of the
    # input's dtype), then draw from the rounded rows.
    first = specdec.top_k_top_p_sampling_from_probs(h, 50, 0.9, seed=7)  # FlashInfer's default order, top_k_first
    assert same_bits(first, specdec.sampling_from_probs(specdec.top_p_renorm_probs(specdec.top_k_renorm_probs(h, 50), 0.9), seed=7))
    joint = specdec.top_k_top_p_sampling_from_probs(h, 50, 0.9, seed=7, filter_apply_order="joint")
    assert same_bits(joint, specdec.sampling_from_probs(_joint(h, 50, 0.9), seed=7))


def _joint(rows, k, p):
    out = np.empty_like(rows)
    specdec._specdec.filter_rows(rows, out, np.array([k], np.int64), np.array([p], np.float32), True, 0)
    return out


def test_verifiers_refuse_other_dtypes_naming_the_argument_and_the_dtype():
    """The verifiers read float32, float16 and bfloat16 rows; float64 and mixed pairings are refused by
    name, with the dtype received."""
    draft, target = exact_probs(BF16, (1, 2, 100), 3), exact_probs(BF16, (1, 3, 100), 4)
    ids = np.zeros((1, 2), np.int32)
    with pytest.raises(TypeError, match=r"^target_probs: expected dtype float32 or float16 or bfloat16; got float64$"):
        specdec.chain_speculative_sampling(draft, ids, target.astype(np.float64), seed=1)
    with pytest.raises(TypeError, match=r"^draft_probs: expected dtype bfloat16 \(the dtype of target_probs\); got float32$"):
        specdec.chain_speculative_sampling(draft.astype(np.float32), ids, target, seed=1)
    with pytest.raises(TypeError, match=r"^draft_probs: expected dtype float16 \(the dtype of target_probs\); got bfloat16$"):
        specdec.chain_speculative_sampling(draft, ids, target.astype(np.float16), seed=1)


@pytest.mark.parametrize("dtype", HALVES, ids=["float16", "bfloat16"])
def test_verify_greedy_on_half_logits_matches_float32(dtype):
    logits = half_rows(dtype, 12, 700, 12)
    f = logits.astype(np.float32)
    best = specdec.argmax(f)
    # Two chains of 6 nodes: the first drafts the target's argmaxes for 3 steps, then a wrong token.
    trees = [specdec.DraftTree.chain(5, [int(best[0]), int(best[1]), int(best[2]), (int(best[3]) + 1) % 700, 4]),
             specdec.DraftTree.chain(9, [int(best[6]), 3, 2, 1, 0])]
    got, want = specdec.verify_greedy(logits, trees), specdec.verify_greedy(f, trees)
    for g, w in zip(got, want):
        assert list(g.tokens) == list(w.tokens) and list(g.accepted_nodes) == list(w.accepted_nodes)
    assert list(got[0].tokens) == [int(best[0]), int(best[1]), int(best[2]), int(best[3])]


@pytest.mark.parametrize("dtype", HALVES, ids=["float16", "bfloat16"])
def test_vllm_rejection_sample_takes_half_target_logits(dtype):
    """vLLM converts its target logits to float32 before rejection_sample; given 16-bit logits, specdec's
    softmax reads them as they are (float32 probabilities): the float32 logits' tokens."""
    from types import SimpleNamespace

    g = np.random.default_rng(3)
    batch, k, v = 4, 3, 300
    logits = (g.normal(size=(batch * k, v)) * 2).astype(dtype)
    draft = specdec.softmax(g.normal(size=(batch * k, v)).astype(np.float32))
    ids = g.integers(0, v, batch * k).astype(np.int32)
    meta = SimpleNamespace(all_greedy=False, all_random=True, temperature=np.ones(batch, np.float32), generators={})
    cu = np.arange(1, batch + 1, dtype=np.int64) * k
    bonus = np.zeros(batch, np.int32)
    run = lambda t: specdec.rejection_sample(ids, [k] * batch, k, cu, draft, t, bonus, meta, seed=11)
    assert same_bits(run(logits), run(logits.astype(np.float32)))


def test_fp16_softmax_rows_of_a_large_vocabulary_are_distributions():
    """fp16's subnormals (below 6.1e-5) hold most entries of a 262144-entry softmax row: rounded, it sums
    to 1 - 5.9e-4, which the tolerance admits (2^-11 of the sum and 2^-25 per entry)."""
    x = np.random.default_rng(0).standard_normal((1, 262144), dtype=np.float32) * 3
    h = specdec.softmax(x).astype(np.float16)
    assert h.astype(np.float64).sum() < 1 - 5e-4
    assert specdec.sampling_from_probs(h, seed=1).shape == (1,)
    assert specdec.top_k_renorm_probs(h, 10).dtype == np.float16


# ---- the stochastic verifiers over 16-bit probability rows ---------------------------------------------


def exact_probs(dtype, shape, seed, boost=None):
    """Distributions rounded to `dtype` (zeros, ties, a long tail) whose sums are then brought within 2e-5
    of 1 by moving the largest entries onto the rounding's residual, so that the float32 rows of the same
    values pass the float32 checks (1e-4) too. `boost`: (row, column) pairs given a large logit."""
    g = np.random.default_rng(seed)
    x = g.normal(0.0, 2.0, size=shape)
    x[g.random(shape) < 0.15] = -np.inf  # exact zeros
    x[g.random(shape) < 0.1] = 0.5  # ties
    for r, j in boost or ():
        x[r, j] = 9.0
    p = np.exp(x - x.max(axis=-1, keepdims=True))
    h = (p / p.sum(axis=-1, keepdims=True)).astype(dtype)
    for row in h.reshape(-1, shape[-1]):
        for j in np.argsort(-row.astype(np.float64), kind="stable")[:200]:
            r = 1.0 - row.astype(np.float64).sum()
            if abs(r) < 2e-5:
                break
            if float(row[j]) + r >= 0:
                row[j] = np.asarray(float(row[j]) + r).astype(dtype)
        assert abs(row.astype(np.float64).sum() - 1) < 2e-5
    return h


def drawn(probs, g, every_zero=5):
    """One token per row of `probs` (widened), drawn from it; every `every_zero`-th token 0 (often a zero
    entry)."""
    f = probs.reshape(-1, probs.shape[-1]).astype(np.float64)
    t = np.array([g.choice(f.shape[1], p=row / row.sum()) for row in f], dtype=np.int32)
    t[every_zero - 1::every_zero] = 0
    return t.reshape(probs.shape[:-1])


@pytest.mark.parametrize("dtype", HALVES, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("v", [100, 1003, 4099])
def test_chain_speculative_sampling_on_half_rows_gives_the_float32_rows_results(dtype, v):
    g = np.random.default_rng(v)
    batch, k = 5, 3
    draft, target = exact_probs(dtype, (batch, k, v), v), exact_probs(dtype, (batch, k + 1, v), v + 1)
    ids = drawn(draft, g)
    accepted = 0
    for seed in range(6):
        got = specdec.chain_speculative_sampling(draft, ids, target, seed=seed, offset=seed)
        want = specdec.chain_speculative_sampling(draft.astype(np.float32), ids, target.astype(np.float32), seed=seed, offset=seed)
        for a, b in zip(got, want):
            assert same_bits(a, b)
        accepted += int(got[2].sum())
    assert 0 < accepted < 6 * batch * k  # drafts accepted and rejected
    u = (g.random((batch, 2 * k + 1)) * 0.999 + 0.0005).astype(np.float64)
    got = specdec.chain_speculative_sampling(draft, ids, target, uniforms=u)
    want = specdec.chain_speculative_sampling(draft.astype(np.float32), ids, target.astype(np.float32), uniforms=u)
    for a, b in zip(got, want):
        assert same_bits(a, b)


def _sglang_trees(bs, n, candidates_from, g, chain=False):
    """bs copies of the 5-node tree 0 -> {1, 2}, 1 -> {3}, 2 -> {4} (or the chain 0 -> 1 -> ... -> 4) in
    SGLang's link layout, node i's token drawn from its parent's row; in request 1 node 2 repeats node 1's
    token."""
    first, sibling, parent = [1, 3, 4, -1, -1], [-1, 2, -1, -1, -1], [-1, 0, 0, 1, 2]
    if chain:
        first, sibling, parent = [1, 2, 3, 4, -1], [-1] * 5, [-1, 0, 1, 2, 3]
    tokens = drawn(candidates_from, g)
    candidates = np.zeros((bs, n), np.int64)
    for b in range(bs):
        for i in range(1, n):
            candidates[b, i] = tokens[b, parent[i]]
    candidates[1, 2] = candidates[1, 1]
    ri = np.arange(bs * n, dtype=np.int64).reshape(bs, n)
    return candidates, ri, np.tile(np.array(first, np.int64), (bs, 1)), np.tile(np.array(sibling, np.int64), (bs, 1))


@pytest.mark.parametrize("dtype", HALVES, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("v", [100, 1003, 4099])
def test_sglang_sampled_verifiers_on_half_rows_give_the_float32_rows_outputs(dtype, v):
    g = np.random.default_rng(v + 5)
    bs, n = 4, 5
    target = exact_probs(dtype, (bs, n, v), v + 2)
    fns = [specdec.tree_speculative_sampling_target_only, specdec.tree_speculative_sampling_target_only_rejmask,
           specdec.chain_speculative_sampling_target_only]
    for fn in fns:
        candidates, ri, nt, ns = _sglang_trees(bs, n, target, g, chain=fn is specdec.chain_speculative_sampling_target_only)
        for single, acc in ((1.0, 1.0), (0.3, 1.0), (1.0, 0.5)):
            for _ in range(3):
                coins = g.random((bs, n), dtype=np.float32)
                finals = g.random(bs, dtype=np.float32)
                outs = []
                for rows in (target, target.astype(np.float32)):
                    out = (np.full(bs * n, -1, np.int32), np.full((bs, n), -1, np.int32), np.zeros(bs, np.int32))
                    fn(*out, candidates, ri, nt, ns, coins, finals, rows, threshold_single=single, threshold_acc=acc)
                    outs.append(out)
                for a, b in zip(*outs):
                    assert same_bits(a, b)
    out = (np.full(bs * n, -1, np.int32), np.full((bs, n), -1, np.int32), np.zeros(bs, np.int32))
    with pytest.raises(TypeError, match=r"^target_probs: expected dtype float32 or float16 or bfloat16; got float64$"):
        specdec.tree_speculative_sampling_target_only(*out, candidates, ri, nt, ns, g.random((bs, n), dtype=np.float32),
                                                      g.random(bs, dtype=np.float32), target.astype(np.float64), 1.0)


@pytest.mark.parametrize("dtype", HALVES, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("v", [100, 1003, 4099])
def test_rejection_sample_on_half_rows_gives_the_float32_rows_tokens(dtype, v):
    """specdec's probabilities form: draft and target rows of one 16-bit dtype, float32 target rows with
    16-bit draft rows, 16-bit targets without draft rows; greedy and random requests mixed; and vLLM's form
    with 16-bit target logits and draft rows."""
    from types import SimpleNamespace

    g = np.random.default_rng(v + 9)
    cu = np.array([3, 3, 5, 8, 9], np.int64)
    tokens, batch = 9, 5
    target, draft = exact_probs(dtype, (tokens, v), v + 3), exact_probs(dtype, (tokens, v), v + 4)
    ids = drawn(draft, g)
    bonus = np.array([1, 2, 0, v - 1, 0], np.int32)
    greedy = np.array([False, False, True, False, False])
    f32 = lambda x: None if x is None else x.astype(np.float32)
    for t, d in ((target, draft), (f32(target), draft), (target, None)):
        for seed in range(4):
            got = specdec.rejection_sample(ids, None, 3, cu, d, t, bonus, greedy, seed=seed)
            assert same_bits(got, specdec.rejection_sample(ids, None, 3, cu, f32(d), f32(t), bonus, greedy, seed=seed))
    logits = (g.normal(size=(tokens, v)) * 2).astype(dtype)
    meta = SimpleNamespace(all_greedy=False, all_random=False, temperature=np.array([1, 1, 0, 1, 1], np.float32), generators={})
    counts = np.diff(cu, prepend=0).tolist()
    run = lambda x, d: specdec.rejection_sample(ids, counts, 3, cu, d, x, bonus, meta, seed=4)
    assert same_bits(run(logits, draft), run(logits.astype(np.float32), draft.astype(np.float32)))
    other = np.float16 if dtype == BF16 else BF16
    with pytest.raises(TypeError, match=rf"^draft_probs: expected dtype {np.dtype(dtype).name} \(the dtype of target_probs\); got {np.dtype(other).name}$"):
        specdec.rejection_sample(ids, None, 3, cu, draft.astype(other), target, bonus, greedy, seed=1)
    with pytest.raises(TypeError, match=r"^draft_probs: expected dtype float32 or float16 or bfloat16; got float64$"):
        specdec.rejection_sample(ids, None, 3, cu, draft.astype(np.float64), target.astype(np.float32), bonus, greedy, seed=1)


@pytest.mark.parametrize("dtype", HALVES, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("v", [5, 300, 4099])
def test_apply_sampling_constraints_on_half_logits_filters_in_their_dtype(dtype, v):
    """In place and in the logits' dtype (vLLM's in-place filter on a 16-bit tensor): the float32 path over
    the quotients rounded to the dtype, at temperature 1."""
    g = np.random.default_rng(v)
    x = g.normal(0.0, 3.0, size=(6, v)).astype(np.float32)
    x[g.random(x.shape) < 0.1] = 1.5  # ties
    h = x.astype(dtype)
    cu = np.array([2, 2, 5, 6], np.int64)
    temperature = np.array([0.7, 1.3, 0.0, 2.0], np.float32)
    top_k, top_p = np.array([3, 1, v, 7]), np.array([0.9, 1.0, 0.5, 0.95], np.float32)
    per_row = np.repeat(np.where(temperature == 0, 1, temperature), np.diff(cu, prepend=0))[:, None]
    ref = (h.astype(np.float32) / per_row).astype(dtype).astype(np.float32)
    specdec.apply_sampling_constraints(ref, cu, np.ones(4, np.float32), top_k, top_p)
    got = specdec.apply_sampling_constraints(h, cu, temperature, top_k, top_p)
    assert got is h and h.dtype == np.dtype(dtype)
    assert same_bits(h.astype(np.float32), ref)
    assert np.isneginf(h.astype(np.float32)).any()
    rows = x.astype(dtype)
    want = rows.astype(np.float32)
    specdec.apply_top_k_top_p(want, np.full(6, 4), np.full(6, 0.8, np.float32))
    specdec.apply_top_k_top_p(rows, np.full(6, 4), np.full(6, 0.8, np.float32))
    assert same_bits(rows.astype(np.float32), want)
    with pytest.raises(TypeError, match=r"^logits: expected dtype float32 or float16 or bfloat16; got float64$"):
        specdec.apply_sampling_constraints(x.astype(np.float64), cu, temperature)


@pytest.mark.parametrize("dtype", HALVES, ids=["float16", "bfloat16"])
def test_min_p_sampling_from_half_rows_draws_the_float32_rows_tokens(dtype):
    h = half_probs(dtype, 16, 3001, 6)
    f = h.astype(np.float32)
    for min_p in (0.0, 0.05, 0.5, np.linspace(0, 0.9, 16, dtype=np.float32)):
        for seed in range(3):
            assert same_bits(specdec.min_p_sampling_from_probs(h, min_p, seed=seed),
                             specdec.min_p_sampling_from_probs(f, min_p, seed=seed))
    with pytest.raises(TypeError, match=r"^probs: expected dtype float32 or float16 or bfloat16; got float64$"):
        specdec.min_p_sampling_from_probs(f.astype(np.float64), 0.1, seed=1)


@pytest.mark.parametrize("dtype", HALVES, ids=["float16", "bfloat16"])
def test_half_verifier_rows_are_read_in_place(dtype):
    """The verifiers' Python layers hand the 16-bit rows to C++ as they are: no float32 copy (tracemalloc
    sees numpy's allocations)."""
    g = np.random.default_rng(1)
    batch, k, v = 4, 3, 32768
    draft, target = exact_probs(dtype, (batch, k, v), 5), exact_probs(dtype, (batch, k + 1, v), 6)
    ids = drawn(draft, g)
    u = np.full((batch, 2 * k + 1), 0.5)
    flat_draft, flat_target = draft.reshape(batch * k, v), target[:, :k].reshape(batch * k, v).copy()
    cu = np.arange(1, batch + 1, dtype=np.int64) * k
    bonus, greedy = np.zeros(batch, np.int32), np.zeros(batch, bool)
    uniforms, noise = np.full(batch * k, 0.5), np.ones((batch, v), np.float32)
    calls = [lambda: specdec.chain_speculative_sampling(draft, ids, target, uniforms=u),
             lambda: specdec.rejection_sample(ids.reshape(-1), None, k, cu, flat_draft, flat_target, bonus, greedy, uniforms, noise)]
    for call in calls:
        call()  # the thread's scratch
        tracemalloc.start()
        try:
            call()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < flat_draft.nbytes // 4, f"{peak} bytes allocated for {flat_draft.nbytes}-byte {dtype.__name__} rows"


@pytest.mark.parametrize("dtype", HALVES, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("draft_dtype", ["same", np.float32], ids=["draft_same", "draft_float32"])
def test_verify_speculative_on_half_rows_gives_the_float32_rows_results(dtype, draft_dtype):
    """specdec's tree verifier over 16-bit target probabilities or logits (softened as softmax softens a
    16-bit row) and 16-bit or float32 draft rows: the results of the float32 rows of the same values."""
    v = 2100  # past one 2048-entry chunk
    g = np.random.default_rng(7)
    tokens, parents = [0, 5, 9, 5, 17, 3, 11], [-1, 0, 0, 1, 1, 2, 3]
    trees = [specdec.DraftTree.from_parents(tokens, parents, v) for _ in range(4)]
    n = len(tokens)
    probs = exact_probs(dtype, (4 * n, v), 70)
    logits = half_rows(dtype, 4 * n, v, 71)
    for r in range(4 * n):  # the drafted tokens likely under the target: walks descend
        for i in range(1, n):
            if parents[i] == r % n:
                logits[r, tokens[i]] = dtype(6.2e4)  # above half_rows' largest (6e4)
    draft = exact_probs(dtype if draft_dtype == "same" else draft_dtype, (4 * n, v), 72)
    rows = [np.array([-1] + [4 * t + i for i in range(1, n)], np.int64) for t in range(4)]
    accepted = 0
    for seed in range(5):
        for target, as_logits in ((probs, False), (logits, True)):
            for with_draft in (False, True):
                kw = dict(logits=as_logits, temperature=0.8, seed=seed, offset=seed)
                if with_draft:
                    kw.update(draft_probs=draft, draft_rows=rows)
                got = specdec.verify_speculative(target, trees, **kw)
                if with_draft:
                    kw.update(draft_probs=draft.astype(np.float32))
                want = specdec.verify_speculative(target.astype(np.float32), trees, **kw)
                for a, b in zip(got, want):
                    assert list(a.tokens) == list(b.tokens) and list(a.accepted_nodes) == list(b.accepted_nodes)
                    accepted += len(b.accepted_nodes)
    assert accepted > 20
    with pytest.raises(TypeError, match=r"^target: expected dtype float32 or float16 or bfloat16; got float64$"):
        specdec.verify_speculative(probs.astype(np.float64), trees, seed=1)
    with pytest.raises(TypeError, match=r"^draft_probs: expected dtype float32 or float16 or bfloat16; got int32$"):
        specdec.verify_speculative(probs, trees, draft_probs=draft.astype(np.int32), draft_rows=rows, seed=1)


@pytest.mark.parametrize("dtype", HALVES, ids=["float16", "bfloat16"])
def test_verify_tree_batch_on_half_rows_gives_the_float32_rows_outputs(dtype):
    """The padded batch form over 16-bit target probabilities (16-bit or float32 draft rows) and 16-bit
    greedy logits: the outputs of the float32 rows of the same values."""
    v = 3001
    tokens_list, parents_list = [0, 5, 9, 5, 17, 3, 11], [-1, 0, 0, 1, 1, 2, 3]
    trees = [specdec.DraftTree.from_parents(tokens_list, parents_list, v) for _ in range(5)]
    n = len(tokens_list)
    tokens, parents, _ = specdec.tree_batch(trees)
    # The drafted tokens likely under the target: walks descend.
    boost = [(r, tokens_list[i]) for r in range(5 * n) for i in range(1, n) if parents_list[i] == r % n]
    probs = exact_probs(dtype, (5 * n, v), 80, boost)
    draft = exact_probs(dtype, (5 * n, v), 81)
    rows = np.tile(np.array([-1] + list(range(1, n)), np.int64), (5, 1)) + np.arange(5)[:, None] * n
    rows[:, 0] = -1
    accepted = 0
    for seed in range(4):
        for d in (None, draft, draft.astype(np.float32)):
            kw = dict(seed=seed, offset=seed) if d is None else dict(draft_probs=d, draft_rows=rows, seed=seed, offset=seed)
            got = specdec.verify_tree_batch(probs, tokens, parents, **kw)
            if d is not None:
                kw["draft_probs"] = d.astype(np.float32)
            want = specdec.verify_tree_batch(probs.astype(np.float32), tokens, parents, **kw)
            for field in ("tokens", "accepted", "accepted_nodes", "uniforms_consumed"):
                assert same_bits(getattr(got, field), getattr(want, field)), field
            accepted += int(want.accepted.sum())
    assert accepted > 20
    logits = half_rows(dtype, 5 * n, v, 82)
    got = specdec.verify_tree_batch(logits, tokens, parents, greedy=True)
    want = specdec.verify_tree_batch(logits.astype(np.float32), tokens, parents, greedy=True)
    for field in ("tokens", "accepted", "accepted_nodes"):
        assert same_bits(getattr(got, field), getattr(want, field)), field
    with pytest.raises(TypeError, match=r"^target: expected dtype float32 or float16 or bfloat16; got float64$"):
        specdec.verify_tree_batch(probs.astype(np.float64), tokens, parents, seed=1)
