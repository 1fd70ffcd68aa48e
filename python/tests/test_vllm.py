# SPDX-License-Identifier: Apache-2.0
# vLLM v1's rejection sampler layout against the goldens the C++ tests use (computed by vLLM's code).
import numpy as np

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
