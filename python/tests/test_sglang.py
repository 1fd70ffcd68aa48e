# SPDX-License-Identifier: Apache-2.0
# SGLang's speculative kernels against the goldens the C++ tests use (computed by SGLang's own tests).
import numpy as np

import specdec


def test_verify_tree_greedy_equals_sglangs_test(golden):
    c = golden("trees/sglang_verify_tree_greedy_upstream_test.json")
    i, o = c["inputs"], c["outputs"]
    candidates = np.array(i["candidates"], dtype=np.int64)
    bs, n = candidates.shape
    steps = len(o["accept_index"][0])
    predicts = np.full(bs * n, -7, dtype=np.int32)
    accept_index = np.full((bs, steps), -7, dtype=np.int32)
    accept_token_num = np.full(bs, -7, dtype=np.int32)
    specdec.verify_tree_greedy(predicts, accept_index, accept_token_num, candidates,
                               np.array(i["retrive_index"], dtype=np.int64),
                               np.array(i["retrive_next_token"], dtype=np.int64),
                               np.array(i["retrive_next_sibling"], dtype=np.int64),
                               np.array(i["target_predict"], dtype=np.int64))
    np.testing.assert_array_equal(predicts, o["predicts"])
    np.testing.assert_array_equal(accept_index, o["accept_index"])
    np.testing.assert_array_equal(accept_token_num, o["accept_token_num"])
