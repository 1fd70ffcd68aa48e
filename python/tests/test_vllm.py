# SPDX-License-Identifier: Apache-2.0
# vLLM v1's rejection sampler layout against the goldens the C++ tests use (computed by vLLM's code).
import numpy as np
import pytest

import specdec


def flat(requests, key, dtype):
    return np.array([x for q in requests for x in q[key]], dtype=dtype)


def run(c, with_draft_probs):
    reqs = c["requests"]
    cu = np.cumsum([len(q["draft_token_ids"]) for q in reqs])
    out = specdec.rejection_sample(
        flat(reqs, "draft_token_ids", np.int32), [len(q["draft_token_ids"]) for q in reqs], c["max_spec_len"], cu,
        flat(reqs, "draft_probs", np.float32) if with_draft_probs else None, flat(reqs, "target_probs", np.float32),
        np.array([[q["bonus_token_id"]] for q in reqs]), uniform_probs=flat(reqs, "uniforms", np.float64),
        exponentials=np.array([q["exponentials"] for q in reqs], dtype=np.float32))
    np.testing.assert_array_equal(out, [q["expected_output_token_ids"] for q in reqs])


def test_random_and_ngram_requests_equal_vllms_goldens(golden):
    run(golden("samplers/vllm_random_chain.json"), True)
    run(golden("samplers/vllm_ngram_chain.json"), False)


def test_greedy_requests_equal_vllms_goldens(golden):
    c = golden("samplers/vllm_greedy_chain.json")
    for case in c["cases"]:
        drafts = case["draft_token_ids"]
        v = 1 + max([t for d in drafts for t in d] + [t for a in case["target_argmax"] for t in a] + case["bonus_token_ids"])
        target = np.full((sum(len(d) for d in drafts), v), 0.1 / v, dtype=np.float32)
        row = 0
        for a in case["target_argmax"]:
            for t in a:
                target[row, t] = 0.9
                row += 1
        out = specdec.rejection_sample(np.array([t for d in drafts for t in d], dtype=np.int32), None, case["max_spec_len"],
                                       np.cumsum([len(d) for d in drafts]), None, target, np.array(case["bonus_token_ids"]),
                                       is_greedy=np.ones(len(drafts), dtype=bool))
        np.testing.assert_array_equal(out, case["expected_output_token_ids"], err_msg=case["name"])


def test_random_requests_are_lossless():
    # One draft per request from q; the first emitted token follows p (seeded uniforms and exponentials).
    p = np.array([0.1, 0.6, 0.3], dtype=np.float32)
    q = np.array([0.5, 0.2, 0.3], dtype=np.float32)
    n = 20000
    ids = np.random.default_rng(1).choice(3, size=n, p=q).astype(np.int32)
    out = specdec.rejection_sample(ids, None, 1, np.arange(1, n + 1), np.tile(q, (n, 1)), np.tile(p, (n, 1)),
                                   np.full(n, 2), seed=4)
    freq = np.bincount(out[:, 0], minlength=3) / n
    assert np.all(np.abs(freq - p) < 5 * np.sqrt(p * (1 - p) / n))
    alpha = float(np.minimum(p, q).sum())
    accepted = float((out[:, 1] != -1).mean())  # the bonus follows only an accepted draft
    assert abs(accepted - alpha) < 5 * np.sqrt(alpha * (1 - alpha) / n)


def vllm_top_k_top_p(logits, k, p):
    """vLLM's apply_top_k_top_p (the PyTorch path) transcribed to numpy: ascending sort (ties by index),
    top-k by the k-th largest value, top-p by the float32 cumulative softmax (accumulated in float64)."""
    out = logits.copy()
    for r in range(out.shape[0]):
        order = np.argsort(out[r], kind="stable")
        s = out[r, order]
        if k is not None:
            s[s < s[max(s.size - int(k[r]), 0)]] = -np.inf
        if p is not None:
            e = np.exp(s - s[-1])
            probs = e / np.float32(e.astype(np.float64).sum())
            cum = np.cumsum(probs.astype(np.float64)).astype(np.float32)
            mask = cum <= np.float32(1) - np.float32(p[r])
            mask[-1] = False
            s[mask] = -np.inf
        out[r, order] = s
    return out


def test_apply_sampling_constraints_is_vllms():
    rng = np.random.default_rng(8)
    v = 1000
    cu = np.array([3, 3, 7, 8])
    temperature = np.array([0.7, 1.3, -1.0, 2.0], dtype=np.float32)  # -1: a greedy request, left at 1
    top_k = np.array([50, v, 5, 1])
    top_p = np.array([0.9, 0.5, 1.0, 0.3], dtype=np.float32)
    logits = (rng.standard_normal((8, v)) * 3).astype(np.float32)
    logits[2, :10] = logits[2, 10]  # ties at a threshold
    expanded = np.repeat(np.arange(4), np.diff(np.concatenate([[0], cu])))
    scaled = logits / np.where(temperature == -1, 1, temperature)[expanded][:, None]
    for k, p in ((top_k, None), (None, top_p), (top_k, top_p)):
        got = specdec.apply_sampling_constraints(logits.copy(), cu, temperature, k, p)
        want = vllm_top_k_top_p(scaled.astype(np.float32), None if k is None else k[expanded],
                                None if p is None else p[expanded])
        np.testing.assert_array_equal(got, want)
    assert specdec.apply_sampling_constraints(logits.copy(), cu, temperature, top_k, all_greedy=True).tolist() == logits.tolist()
    rows = logits[:2].copy()
    np.testing.assert_array_equal(specdec.apply_top_k_top_p(rows, [3, 3], [0.8, 0.8]),
                                  vllm_top_k_top_p(logits[:2], [3, 3], [0.8, 0.8]))
    # vLLM's sampler end to end: constraints, softmax, rejection sampling; a greedy request reads the
    # argmax of its (unscaled) row.
    probs = specdec.softmax(specdec.apply_sampling_constraints(logits.copy(), cu, temperature, top_k, top_p))
    drafts = np.argmax(logits, axis=1).astype(np.int32)
    out = specdec.rejection_sample(drafts, None, 4, cu, None, probs, np.arange(4, dtype=np.int32),
                                   is_greedy=temperature == -1, seed=3)
    assert out[2].tolist() == drafts[3:7].tolist() + [2]  # greedy: every argmax accepted, then the bonus
    assert set(out[3, :1].tolist()) == {int(np.argmax(logits[7]))}  # top-k 1: the target is that token
    with pytest.raises(ValueError, match=r"temperature\[1\] = -0.5; expected a finite value > 0, or 0 \(older vLLM: -1\)"):
        specdec.apply_sampling_constraints(logits.copy(), cu, np.array([0.5, -0.5, 1, 1], dtype=np.float32))


def test_rejection_sample_names_what_is_wrong():
    ids = np.array([1, 2, 3], dtype=np.int32)
    target = np.full((3, 4), 0.25, dtype=np.float32)
    bonus = np.zeros(2, dtype=np.int32)
    u = np.full(3, 0.5)
    noise = np.ones((2, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="cu_num_draft_tokens gives request 1 entries \\[2, 1\\); expected a non-decreasing"):
        specdec.rejection_sample(ids, None, 2, np.array([2, 1]), None, target, bonus, None, u, noise)
    with pytest.raises(ValueError, match="cu_num_draft_tokens gives request 0 3 drafts; expected at most 2 \\(max_spec_len\\)"):
        specdec.rejection_sample(ids, None, 2, np.array([3, 3]), None, target, bonus, None, u, noise)
    with pytest.raises(ValueError, match="draft_token_ids\\[2\\] = 4; expected a token id in \\[0, 4\\)"):
        specdec.rejection_sample(np.array([1, 2, 4], dtype=np.int32), None, 2, np.array([1, 3]), None, target, bonus, None, u,
                                 noise)
    with pytest.raises(ValueError, match="exponentials: expected shape \\(2, 4\\); got \\(1, 4\\)"):
        specdec.rejection_sample(ids, None, 2, np.array([1, 3]), None, target, bonus, None, u, noise[:1])


class Metadata:
    """vLLM's SamplingMetadata, the attributes its rejection sampler reads (duck-typed as specdec reads it)."""

    def __init__(self, temperature, top_k=None, top_p=None, generators=None):
        self.temperature = None if temperature is None else np.asarray(temperature, dtype=np.float32)
        greedy = np.ones(1, bool) if temperature is None else self.temperature == 0
        self.all_greedy = bool(greedy.all())
        self.all_random = not bool(greedy.any())
        self.top_k, self.top_p = top_k, top_p
        self.generators = generators or {}


def vllm_rejection_sample(drafts, counts, max_spec_len, draft_probs, target_logits, bonus, md, global_u, global_q):
    """vLLM 0.33's rejection_sample (rejection_sampler.py) transcribed to numpy: the global draws given
    (``global_u`` [num_tokens] float64, ``global_q`` [batch, V] float32), then each seeded request's own
    from its generator in vLLM's order (uniforms, then exponentials); softmax in float32; greedy: the
    argmax of the logits."""
    batch, v = len(counts), target_logits.shape[1]
    out = np.full((batch, max_spec_len + 1), -1, dtype=np.int32)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    is_greedy = np.ones(batch, bool) if md.all_greedy else md.temperature == 0
    u = None
    if not md.all_greedy:
        u = global_u.copy()
        for r, g in md.generators.items():
            if counts[r]:
                u[starts[r]:starts[r] + counts[r]] = g.random(counts[r])
    argmax = np.argmax(target_logits, axis=1)
    for r in np.nonzero(is_greedy)[0]:
        for i in range(counts[r]):
            t = starts[r] + i
            out[r, i] = argmax[t]
            if drafts[t] != argmax[t]:
                break
        else:
            out[r, counts[r]] = bonus[r]
    if md.all_greedy:
        return out
    probs = specdec.softmax(target_logits)  # vLLM: target_logits.softmax(-1, dtype=float32)
    q = global_q.copy()
    for r, g in md.generators.items():
        if counts[r]:
            q[r] = g.standard_exponential(v, dtype=np.float32)
    for r in np.nonzero(~is_greedy)[0]:
        for i in range(counts[r]):
            t, d = starts[r] + i, drafts[starts[r] + i]
            qd = np.float32(1) if draft_probs is None else draft_probs[t, d]
            if qd > 0 and np.float32(probs[t, d] / qd) >= u[t]:
                out[r, i] = d
                continue
            if draft_probs is None:
                residual = probs[t].copy()
                residual[d] = 0
            else:
                residual = np.maximum(probs[t] - draft_probs[t], 0)
            out[r, i] = int(np.argmax(residual * (np.float32(1) / q[r])))
            break
        else:
            out[r, counts[r]] = bonus[r]
    return out


@pytest.mark.parametrize("with_draft_probs", [True, False])
def test_vllm_form_with_sampling_metadata_equals_vllms_flow(with_draft_probs):
    # vLLM 0.33's call: target logits, SamplingMetadata with greedy requests at temperature 0, per-request
    # generators (numpy's here; torch's with torch tensors). The global draws are specdec's Philox streams
    # of `seed` (vLLM's are torch's global generator, which specdec uses for torch tensors).
    rng = np.random.default_rng(21)
    v, max_spec_len, seed = 64, 4, 9
    for trial in range(60):
        batch = int(rng.integers(1, 7))
        counts = rng.integers(0, max_spec_len + 1, batch)
        tokens = int(counts.sum())
        logits = (rng.standard_normal((tokens, v)) * 2).astype(np.float32)
        drafts = np.where(rng.random(tokens) < 0.6, np.argmax(logits, axis=1), rng.integers(0, v, tokens)).astype(np.int32)
        draft_probs = rng.dirichlet(np.full(v, 0.3), tokens).astype(np.float32) if with_draft_probs else None
        bonus = rng.integers(0, v, (batch, 1))
        temperature = np.where(rng.random(batch) < 0.4, 0.0, 1.0).astype(np.float32)
        seeded = [r for r in range(batch) if rng.random() < 0.5]

        def metadata():
            return Metadata(None if (temperature == 0).all() and trial % 2 else temperature,
                            generators={r: np.random.default_rng(1000 * trial + r) for r in seeded})
        per_request = specdec.philox_uniforms(seed, 0, batch, max(int(counts.max()), 1))
        global_u = np.concatenate([per_request[r, :counts[r]] for r in range(batch)])
        global_q = (-np.log1p(-specdec.philox_uniforms(seed + 1, 0, batch, v))).astype(np.float32)
        want = vllm_rejection_sample(drafts, counts, max_spec_len, draft_probs, logits, bonus[:, 0], metadata(), global_u, global_q)
        got = specdec.rejection_sample(drafts, counts.tolist(), max_spec_len, np.cumsum(counts), draft_probs, logits.copy(), bonus,
                                       metadata(), seed=seed)
        np.testing.assert_array_equal(got, want, err_msg=f"trial {trial}")


def test_vllm_form_greedy_reads_the_logits_argmax_and_temperature_zero():
    # Two logits that round to one probability: vLLM's greedy request compares with the argmax of the
    # logits (index 1), not of the softmax (index 0 first).
    logits = np.zeros((1, 4), dtype=np.float32)
    logits[0, 0], logits[0, 1] = np.float32(0.0), np.float32(1e-8)
    assert specdec.softmax(logits)[0, 0] == specdec.softmax(logits)[0, 1]
    md = Metadata([0.0])
    out = specdec.rejection_sample(np.array([1], np.int32), [1], 2, np.array([1]), None, logits, np.array([[3]]), md)
    assert out.tolist() == [[1, 3, -1]]
    # temperature 0 is greedy in apply_sampling_constraints too: its rows left at temperature 1.
    md = Metadata([0.0, 2.0], top_k=np.array([4, 1]), top_p=None)
    x = np.array([[1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0]], np.float32)
    got = specdec.apply_sampling_constraints(x.copy(), np.array([1, 2]), md)
    assert got.tolist() == [[1.0, 2.0, 3.0, 4.0], [2.0, -np.inf, -np.inf, -np.inf]]
    assert specdec.apply_sampling_constraints(x.copy(), np.array([1, 2]), Metadata(None)).tolist() == x.tolist()
    assert specdec.GREEDY_TEMPERATURE == 0 and specdec.MAX_SPEC_LEN == 128


def test_vllm_form_draws_from_each_requests_generator():
    # A request with its own generator gets the same tokens whatever the global draws are; one without
    # follows the seed.
    rng = np.random.default_rng(5)
    v, counts = 50, np.array([3, 3])
    logits = rng.standard_normal((6, v)).astype(np.float32)
    drafts = rng.integers(0, v, 6).astype(np.int32)
    draft_probs = rng.dirichlet(np.ones(v), 6).astype(np.float32)
    outs = []
    for seed in (1, 2, 3):
        md = Metadata([1.0, 1.0], generators={1: np.random.default_rng(77)})
        outs.append(specdec.rejection_sample(drafts, [3, 3], 3, np.cumsum(counts), draft_probs, logits, np.array([[0], [0]]), md,
                                             seed=seed))
    assert all(o[1].tolist() == outs[0][1].tolist() for o in outs)


def test_vllm_form_names_what_is_wrong():
    logits = np.zeros((2, 4), np.float32)
    ids, bonus = np.array([1, 2], np.int32), np.array([[0]])
    with pytest.raises(ValueError, match=r"num_draft_tokens: expected the draft counts of cu_num_draft_tokens, \[2\]; got \[1\]"):
        specdec.rejection_sample(ids, [1], 2, np.array([2]), None, logits, bonus, Metadata([1.0]))
    with pytest.raises(ValueError, match="synthetic_mode: vLLM's option is not supported by specdec; expected False; got True"):
        specdec.rejection_sample(ids, [2], 2, np.array([2]), None, logits, bonus, Metadata([1.0]), True)
    with pytest.raises(ValueError, match=r"sampling_metadata.temperature: expected shape \(1,\)"):
        specdec.rejection_sample(ids, [2], 2, np.array([2]), None, logits, bonus, Metadata([1.0, 1.0]))
    with pytest.raises(TypeError, match=r"sampling_metadata.generators\[0\]: expected a torch.Generator or numpy.random.Generator"):
        specdec.rejection_sample(ids, [2], 2, np.array([2]), None, logits, bonus, Metadata([1.0], generators={0: 5}))


def test_wrong_target_row_counts_blame_the_rows():
    ids, cu, bonus = np.array([1, 2, 3, 0], np.int32), np.array([4]), np.array([[0]])
    rows = np.full((3, 4), 0.25, np.float32)
    with pytest.raises(ValueError, match=r"^target_probs: expected 4 rows \(one per draft token: draft_token_ids has 4\); got 3$"):
        specdec.rejection_sample(ids, None, 4, cu, None, None, bonus, target_probs=rows, seed=1)
    with pytest.raises(ValueError, match=r"^target_logits: expected 4 rows \(one per draft token: draft_token_ids has 4\); got 3$"):
        specdec.rejection_sample(ids, [4], 4, cu, None, rows, bonus, Metadata([1.0]), seed=1)


def test_seeded_noise_drawn_inside_the_call_equals_the_drawn_matrix():
    # With `seed` and host arrays the noise rows are raced without being written (Philox uniforms drawn
    # per entry, the logarithm only where an entry could win): the tokens of passing the matrix
    # philox_exponentials(seed + 1, offset) draws, row for row.
    rng = np.random.default_rng(8)
    raced = 0
    for trial in range(40):
        batch, k, v = int(rng.integers(1, 9)), int(rng.integers(1, 5)), int(rng.choice([7, 1000, 3001, 40000]))
        counts = rng.integers(0, k + 1, batch)
        tokens = int(counts.sum())
        cu = np.cumsum(counts)
        target = specdec.softmax((rng.standard_normal((tokens, v)) * 2).astype(np.float32))
        draft = specdec.softmax((rng.standard_normal((tokens, v)) * 2).astype(np.float32)) if trial % 3 else None
        ids = rng.integers(0, v, tokens).astype(np.int32)
        bonus = rng.integers(0, v, batch).astype(np.int32)
        greedy = rng.random(batch) < 0.3
        seed, offset = int(rng.integers(0, 2**63)), int(rng.integers(0, 1000))
        got = specdec.rejection_sample(ids, None, k, cu, draft, target, bonus, greedy, seed=seed, offset=offset)
        u = specdec.philox_uniforms(seed, offset, batch, max(k, 1))
        uniforms = np.concatenate([u[r, :counts[r]] for r in range(batch)]) if tokens else np.zeros(0)
        e = specdec.philox_exponentials(seed + 1, offset, batch, v)
        want = specdec.rejection_sample(ids, None, k, cu, draft, target, bonus, greedy, uniform_probs=uniforms, exponentials=e)
        np.testing.assert_array_equal(got, want, err_msg=f"trial {trial}")
        raced += int(sum(1 for r in range(batch) if not greedy[r] and (got[r] >= 0).sum() <= counts[r]))
    assert raced > 20
