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
    # 1 + 2^-9 is inside bf16's tolerance (1e-3 + 2^-9), outside float32's.
    row = np.array([[0.5, 0.25, 0.25 + 2.0 ** -9]], np.float32)
    assert same_bits(specdec.top_k_renorm_probs(row.astype(BF16), 1), np.array([[1, 0, 0]], BF16))
    with pytest.raises(ValueError, match=r"sums to 1.00195; expected 1 within 0.001$"):
        specdec.top_k_renorm_probs(row, 1)
    with pytest.raises(ValueError, match=r"expected 1 within 0.001 plus the rounding of its bfloat16 entries \(2\^-9 of the sum\)"):
        specdec.top_k_renorm_probs(np.array([[0.5, 0.50390625]], BF16), 1)


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


def test_verifiers_refuse_half_rows_naming_the_dtype():
    """The verifiers read float32 rows only (16-bit rows there are not built yet)."""
    draft = half_probs(BF16, 2, 100, 3)
    with pytest.raises(TypeError, match=r"expected dtype float32; got bfloat16"):
        specdec.chain_speculative_sampling(draft[None], np.zeros((1, 2), np.int32), half_probs(BF16, 3, 100, 4)[None], seed=1)


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
