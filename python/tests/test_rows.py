# SPDX-License-Identifier: Apache-2.0
# specdec's row primitives against plain numpy references.
import numpy as np
import pytest

import specdec


def logits(rows, v, seed=0):
    x = (np.random.default_rng(seed).standard_normal((rows, v)) * 3).astype(np.float32)
    x[0, 5] = x[0, 9] = x[0].max() + 1  # a tie for the maximum: the lower index wins
    return x


def test_argmax_and_topk():
    x = logits(5, 1000)
    x[3] = -np.inf
    values = np.empty(5, dtype=np.float32)
    got = specdec.argmax(x, values=values)
    np.testing.assert_array_equal(got, np.argmax(x, axis=1))  # numpy also takes the first maximum
    np.testing.assert_array_equal(values, x.max(axis=1))
    v, i = specdec.topk(x[:3], 7)
    order = np.argsort(-x[:3], axis=1, kind="stable")[:, :7]  # descending, ties to the lower index
    np.testing.assert_array_equal(i, order)
    np.testing.assert_array_equal(v, np.take_along_axis(x[:3], order, axis=1))
    with pytest.raises(ValueError, match="NaN"):
        bad = x.copy()
        bad[1, 3] = np.nan
        specdec.argmax(bad)


def test_softmax_log_softmax_logsumexp():
    x = logits(4, 3000, 1)
    for t in (1.0, 0.7):
        z = x.astype(np.float64) / t
        lse = np.log(np.exp(z - z.max(axis=1, keepdims=True)).sum(axis=1)) + z.max(axis=1)
        np.testing.assert_allclose(specdec.logsumexp(x, t), lse, rtol=2e-6)
        np.testing.assert_allclose(specdec.log_softmax(x, t), z - lse[:, None], rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(specdec.softmax(x, t), np.exp(z - lse[:, None]), rtol=2e-5, atol=1e-9)
    one_hot = specdec.softmax(x, 0.0)
    np.testing.assert_array_equal(one_hot.argmax(axis=1), np.argmax(x, axis=1))
    assert np.all(one_hot.sum(axis=1) == 1)
    y = x.copy()
    assert specdec.softmax(y, 1.0, out=y) is y  # in place
    np.testing.assert_array_equal(y, specdec.softmax(x))
