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
    try:
        specdec.apply_sampling_constraints(logits.copy(), cu, np.array([0.5, 0.0, 1, 1], dtype=np.float32))
    except ValueError as e:
        assert "temperature[1] = 0" in str(e)
    else:
        raise AssertionError("a zero temperature was accepted")


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
