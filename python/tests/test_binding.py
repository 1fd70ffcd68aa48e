# SPDX-License-Identifier: Apache-2.0
# What the binding itself promises: no copy of a contiguous input, a TypeError / ValueError naming the
# argument for a wrong dtype, shape or stride, the C++ message for a bad value, and the GIL released
# while C++ works.
import threading

import numpy as np
import pytest

import specdec
from specdec import _specdec


def probs(rows, v):
    p = np.random.default_rng(0).random((rows, v)).astype(np.float32) + 0.01
    return (p / p.sum(axis=1, keepdims=True)).astype(np.float32)


def test_the_binding_views_the_callers_memory():
    a = probs(4, 33)
    assert _specdec._address(a) == a.ctypes.data
    row = a[2]
    assert _specdec._address(row) == row.ctypes.data  # a contiguous slice: no copy either
    out = np.empty_like(a)
    assert specdec.top_k_renorm_probs(a, 3, out=out) is out


def test_wrong_dtype_shape_and_stride_name_the_argument():
    a = probs(4, 33)
    with pytest.raises(TypeError, match="probs: expected dtype float32"):
        specdec.top_k_renorm_probs(a.astype(np.float64), 3)
    with pytest.raises(ValueError, match="probs: expected 2 dimensions; got shape \\(4, 33, 1\\)"):
        specdec.top_k_renorm_probs(a.reshape(4, 33, 1), 3)
    with pytest.raises(ValueError, match="probs: expected a C-contiguous array"):
        specdec.top_k_renorm_probs(a[:, ::2], 3)
    with pytest.raises(ValueError, match="out: expected shape \\(4, 33\\); got \\(4, 32\\)"):
        specdec.top_k_renorm_probs(a, 3, out=np.empty((4, 32), dtype=np.float32))
    with pytest.raises(ValueError, match="top_k: expected one value or one per row \\(4\\); got 2"):
        specdec.top_k_renorm_probs(a, [1, 2])
    ids = np.zeros((2, 3), dtype=np.int64)
    with pytest.raises(TypeError, match="draft_token_ids: expected dtype int32"):
        specdec.chain_speculative_sampling(np.zeros((2, 3, 5), np.float32), ids, np.zeros((2, 4, 5), np.float32), seed=1)
    with pytest.raises(ValueError, match="target_probs: expected shape \\(2, 4, 5\\); got \\(2, 3, 5\\)"):
        specdec.chain_speculative_sampling(np.zeros((2, 3, 5), np.float32), ids.astype(np.int32),
                                           np.zeros((2, 3, 5), np.float32), seed=1)


def test_cpp_errors_are_value_errors_with_the_cpp_message():
    a = probs(2, 10)
    with pytest.raises(ValueError, match="specdec::sampling::top_k_renorm: top_k\\[0\\] = 11; expected 1 <= k <= V = 10"):
        specdec.top_k_renorm_probs(a, 11)
    a[1, 3] = np.nan
    with pytest.raises(ValueError, match="specdec::sampling::top_p_renorm"):
        specdec.top_p_renorm_probs(a, 0.5)


def test_the_gil_is_released_during_cpp_work():
    # While one thread is in a C++ call, Python runs in another only if the call let go of the GIL: with
    # the GIL held the main loop below would get one or two turns whatever the call's length. The rows
    # are doubled until one call takes 30 ms (the filters are fast), so that a released GIL gives many.
    import time

    big = probs(16, 100000)
    while True:
        start = time.perf_counter()
        specdec.top_p_renorm_probs(big, 0.9)
        if time.perf_counter() - start > 0.03 or big.shape[0] >= 4096:
            break
        big = np.concatenate([big, big])
    ticks = []
    done = threading.Event()

    def work():
        specdec.top_p_renorm_probs(big, 0.9)
        done.set()

    t = threading.Thread(target=work)
    t.start()
    while not done.is_set():
        ticks.append(1)  # Python code runs in this thread only while the other one has let go of the GIL
        done.wait(0.001)
    t.join()
    assert len(ticks) > 8
