# SPDX-License-Identifier: Apache-2.0
"""Arctic Inference's array methods of ``SuffixTree`` (``extend_ndarray``, ``speculate_ndarray``) and
``estimate_memory``: drafts worked out by hand from the algorithm, the array forms equal to the list
forms on random sequences, their errors, and, when Arctic Inference 0.3.0's own module is at hand, its
drafts for the same arrays.

The oracle: ``SPECDEC_SUFFIX_ORACLE`` names the PYTHONPATH that ``scripts/fetch_suffix_oracle.sh``
prints (its entries are appended to sys.path, after this environment's numpy), or
``arctic_inference.suffix_decoding`` is importable already; otherwise those tests are skipped. When the
variable is set, a failing import is an error, not a skip.

    SPECDEC_SUFFIX_ORACLE="$(scripts/fetch_suffix_oracle.sh)" scripts/test_python.sh
"""
import os
import random
import sys

import numpy as np
import pytest

import specdec

# Sequence 0 of the hand-worked cases: after token 2 come 3 (three times) and 4 (twice); after 2 3 each
# of 7, 8, 9 once; 9 2 occurs once, followed by 4 5 2 4 6.
SEQ = [2, 3, 7, 2, 3, 8, 2, 3, 9, 2, 4, 5, 2, 4, 6]


def _draft(d):
    return (d.token_ids, d.parents, [float(np.float32(p)) for p in d.probs], float(np.float32(d.score)), d.match_len)


def test_hand_worked_drafts_of_the_array_forms():
    tree = specdec.SuffixTree(8)
    tree.extend_ndarray(0, np.array(SEQ, dtype=np.int64))
    assert tree.num_seqs() == 1
    assert tree.check_integrity() == ""
    f32 = np.float32
    # Context 0 2: only m = 1 is tried (m < len(context)): "2" occurs 5 times, 3 follows 3 of them, 4 two;
    # at most int(1 x 1.0 + 1.0) = 2 tokens. A tree best-first: 3 (3/5), then 4 (2/5) beats 7 / 8 / 9
    # (1/5 each, below 3).
    d = tree.speculate_ndarray(np.array([0, 2], np.int32), 8, 1.0, 1.0, 0.0, True)
    assert _draft(d) == ([3, 4], [-1, -1], [float(f32(0.6)), float(f32(0.4))], float(f32(0.6) + f32(0.4)), 1)
    # A path: 3, then the best child of "2 3" has 1/3 x 3/5 = 0.2 < 0.25: the draft stops.
    d = tree.speculate_ndarray(np.array([0, 2], np.int64), 8, 1.0, 1.0, 0.25, False)
    assert _draft(d) == ([3], [-1], [float(f32(0.6))], float(f32(0.6)), 1)
    # Context 3 9 2: m = 1 as above (score 1.0); m = 2, "9 2", occurs once: 4 5 2 with probability 1
    # each, at most int(2 x 1.0 + 1.0) = 3 tokens; score 3 > 1 wins.
    d = tree.speculate_ndarray(np.array([3, 9, 2], np.uint8), 8, 1.0, 1.0, 0.0, True)
    assert _draft(d) == ([4, 5, 2], [-1, 0, 1], [1.0, 1.0, 1.0], 3.0, 2)
    # max_spec_tokens caps it; a strided view reads the same tokens.
    strided = np.array([3, -1, 9, -1, 2], np.int32)[::2]
    d = tree.speculate_ndarray(strided, 2, 1.0, 1.0, 0.0, False)
    assert _draft(d) == ([4, 5], [-1, 0], [1.0, 1.0], 2.0, 2)
    # Nothing matches, or a context of one token: the empty draft.
    assert _draft(tree.speculate_ndarray(np.array([5, 1], np.int32), 8)) == ([], [], [], 0.0, 0)
    assert _draft(tree.speculate_ndarray(np.array([2], np.int32), 8)) == ([], [], [], 0.0, 0)
    # An empty array stores nothing, as an empty list does.
    tree.extend_ndarray(1, np.zeros(0, np.int32))
    tree.extend_ndarray(2, np.array([]))
    assert tree.num_seqs() == 1
    tree.remove(0)
    assert tree.num_seqs() == 0 and tree.check_integrity() == ""
    assert _draft(tree.speculate_ndarray(np.array([0, 2], np.int32), 8)) == ([], [], [], 0.0, 0)


def _layouts(rng, tokens):
    """`tokens` as a random array form: int32, int64, uint16 or int16, contiguous, strided or reversed."""
    dtype = rng.choice([np.int32, np.int32, np.int64, np.uint16, np.int16])
    a = np.asarray(tokens, dtype=dtype)
    kind = rng.randrange(3)
    if kind == 1:  # every other entry of a twice-as-long array
        b = np.zeros(2 * len(a), dtype=dtype)
        b[::2] = a
        return b[::2]
    if kind == 2:  # a reversed view of the reversed tokens
        return a[::-1].copy()[::-1]
    return a


def _random_ops(rng):
    """A random scenario: extends of a few sequences (copies of earlier stretches, small vocabulary),
    removals and speculations with options from the engines' range and its edges."""
    vocab = rng.choice([2, 3, 5, 20, 1000])
    ops, history = [], {}
    for _ in range(rng.randint(5, 40)):
        r = rng.random()
        if r < 0.5:
            s = rng.randrange(5)
            n = rng.randint(0, 30)
            seq = history.setdefault(s, [])
            if seq and rng.random() < 0.5:
                a = rng.randrange(len(seq))
                tokens = (seq[a:] + [rng.randrange(vocab) for _ in range(n)])[:n]
            else:
                tokens = [rng.randrange(vocab) for _ in range(n)]
            seq += tokens
            ops.append(("extend", s, tokens))
        elif r < 0.6:
            s = rng.randrange(6)
            history.pop(s, None)
            ops.append(("remove", s))
        else:
            seqs = [q for q in history.values() if q]
            if seqs and rng.random() < 0.8:
                q = rng.choice(seqs)
                end = rng.randint(1, len(q))
                context = q[max(0, end - rng.randint(0, 20)):end]
            else:
                context = [rng.randrange(vocab) for _ in range(rng.randint(0, 6))]
            options = (rng.choice([0, 1, 4, 8, 64]), rng.choice([0.0, 0.5, 1.0, 2.25]), rng.choice([-1.0, 0.0, 0.5, 3.0]),
                       rng.choice([0.0, 0.1, 0.3, 1.0]), rng.random() < 0.5)
            ops.append(("speculate", context, options))
    return rng.choice([1, 2, 4, 8, 24, 64]), ops


def test_array_forms_equal_the_list_forms_on_random_sequences():
    rng = random.Random(57)
    compared = 0
    for _ in range(150):
        depth, ops = _random_ops(rng)
        lists, arrays = specdec.SuffixTree(depth), specdec.SuffixTree(depth)
        for op in ops:
            if op[0] == "extend":
                lists.extend(op[1], op[2])
                arrays.extend_ndarray(op[1], _layouts(rng, op[2]))
            elif op[0] == "remove":
                lists.remove(op[1])
                arrays.remove(op[1])
            else:
                want = _draft(lists.speculate(op[1], *op[2]))
                assert _draft(arrays.speculate_ndarray(_layouts(rng, op[1]), *op[2])) == want
                assert _draft(lists.speculate_ndarray(np.asarray(op[1], np.int32), *op[2])) == want
                assert _draft(arrays.speculate(op[1], *op[2])) == want
                compared += 1
            assert lists.num_seqs() == arrays.num_seqs()
            # The same calls on the C++ side: the same structure, the same bytes.
            assert lists.estimate_memory() == arrays.estimate_memory()
        assert arrays.check_integrity() == ""
    assert compared > 1000


def test_array_forms_refuse_by_name():
    tree = specdec.SuffixTree(4)
    tree.extend_ndarray(0, np.array([1, 2, 3], np.int32))
    before = tree.estimate_memory()
    cases = [
        (TypeError, "tokens: expected a 1-D integer array", lambda: tree.extend_ndarray(1, [1, 2])),
        (TypeError, "tokens: expected a 1-D integer array", lambda: tree.extend_ndarray(1, (1, 2))),
        (TypeError, "tokens: expected a 1-D integer array", lambda: tree.extend_ndarray(1, None)),
        (TypeError, "got dtype float64", lambda: tree.extend_ndarray(1, np.array([1.0, 2.7]))),
        (TypeError, "got dtype bool", lambda: tree.extend_ndarray(1, np.array([True]))),
        (TypeError, "got dtype <U1", lambda: tree.extend_ndarray(1, np.array(["a"]))),
        (ValueError, "tokens: expected a 1-D array; got shape (2, 2)", lambda: tree.extend_ndarray(1, np.zeros((2, 2), np.int32))),
        (ValueError, "tokens: expected a 1-D array; got shape ()", lambda: tree.extend_ndarray(1, np.array(5, np.int64))),
        (ValueError, "fit int32; got 2147483648", lambda: tree.extend_ndarray(1, np.array([1, 2**31], np.int64))),
        (ValueError, "fit int32; got 4294967295", lambda: tree.extend_ndarray(1, np.array([2**32 - 1], np.uint32))),
        (ValueError, "seq_id: expected 0 <= seq_id", lambda: tree.extend_ndarray(-1, np.array([1], np.int32))),
        (TypeError, "seq_id: expected an integer", lambda: tree.extend_ndarray(1.0, np.array([1], np.int32))),
        (TypeError, "context: expected a 1-D integer array", lambda: tree.speculate_ndarray([1, 2], 4)),
        (TypeError, "got dtype float32", lambda: tree.speculate_ndarray(np.array([1, 2], np.float32), 4)),
        (ValueError, "context: expected a 1-D array", lambda: tree.speculate_ndarray(np.array([[1, 2]], np.int32), 4)),
        (ValueError, "fit int32; got -2147483649", lambda: tree.speculate_ndarray(np.array([-(2**31) - 1], np.int64), 4)),
        (ValueError, "max_spec_tokens", lambda: tree.speculate_ndarray(np.array([1, 2], np.int32), -1)),
        (TypeError, "max_spec_tokens: expected an integer", lambda: tree.speculate_ndarray(np.array([1, 2], np.int32), 2.5)),
        (ValueError, "min_token_prob", lambda: tree.speculate_ndarray(np.array([1, 2], np.int32), 4, min_token_prob=float("nan"))),
        (TypeError, "use_tree_spec: expected True or False", lambda: tree.speculate_ndarray(np.array([1, 2], np.int32), 4,
                                                                                               use_tree_spec="yes")),
    ]
    for error, text, call in cases:
        with pytest.raises(error) as got:
            call()
        assert text in str(got.value), (text, str(got.value))
    # Nothing was stored by a refused call.
    assert tree.num_seqs() == 1 and tree.estimate_memory() == before and tree.check_integrity() == ""
    # A read-only array is an input like any other.
    ro = np.array([1, 2, 4], np.int32)
    ro.setflags(write=False)
    tree.extend_ndarray(1, ro)
    assert tree.num_seqs() == 2
    assert tree.speculate_ndarray(ro[:2], 4).token_ids in ([3], [4])


def test_estimate_memory_is_the_trees_own_footprint():
    tree = specdec.SuffixTree(16)
    empty = tree.estimate_memory()
    assert isinstance(empty, int) and empty > 0
    rng = np.random.default_rng(3)
    sizes = []
    for s in range(8):
        tree.extend_ndarray(s, rng.integers(0, 50, size=500, dtype=np.int64))
        sizes.append(tree.estimate_memory())
    assert sizes == sorted(sizes) and sizes[-1] > empty + 8 * 500 * 4  # at least the tokens themselves
    peak = sizes[-1]
    for s in range(8):
        tree.remove(s)
    # Freed storage is kept for reuse and counted (the free lists on top of it): the emptied tree holds
    # more than the empty one, within the bound tests/fuzz/fuzz_suffix.cpp sets; refilled and emptied
    # again, it holds the same, nothing leaked.
    emptied = tree.estimate_memory()
    assert empty < emptied <= peak + peak // 2
    rng = np.random.default_rng(3)
    for s in range(8):
        tree.extend_ndarray(s, rng.integers(0, 50, size=500, dtype=np.int64))
    assert peak <= tree.estimate_memory() <= peak + peak // 2
    for s in range(8):
        tree.remove(s)
    assert tree.estimate_memory() == emptied


# ---- Arctic Inference 0.3.0's own module ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def arctic():
    """Arctic Inference's `_C` module and its cache module, or a skip (an error when SPECDEC_SUFFIX_ORACLE
    is set and they do not import)."""
    path = os.environ.get("SPECDEC_SUFFIX_ORACLE")
    for entry in (path or "").split(os.pathsep):
        if entry and entry not in sys.path:
            sys.path.append(entry)  # after this environment's numpy, which is imported already
    try:
        from arctic_inference.suffix_decoding import _C, cache
    except ImportError as e:
        if path:
            raise AssertionError(f"SPECDEC_SUFFIX_ORACLE={path!r} does not import arctic_inference.suffix_decoding: {e}")
        pytest.skip("Arctic Inference's suffix module is not available (SPECDEC_SUFFIX_ORACLE=$(scripts/fetch_suffix_oracle.sh))")
    return _C, cache


def test_array_forms_equal_arctic_inferences(arctic):
    _C, _ = arctic
    rng = random.Random(570)
    compared = 0
    for _ in range(300):
        depth, ops = _random_ops(rng)
        theirs, ours = _C.SuffixTree(depth), specdec.SuffixTree(depth)
        for op in ops:
            if op[0] == "extend":
                theirs.extend_ndarray(op[1], np.asarray(op[2], np.int32))
                ours.extend_ndarray(op[1], _layouts(rng, op[2]))
            elif op[0] == "remove":
                theirs.remove(op[1])
                ours.remove(op[1])
            else:
                want = _draft(theirs.speculate_ndarray(np.asarray(op[1], np.int32), *op[2]))
                assert _draft(ours.speculate_ndarray(_layouts(rng, op[1]), *op[2])) == want
                compared += 1
            assert ours.num_seqs() == theirs.num_seqs()
        assert theirs.check_integrity() == "" and ours.check_integrity() == ""
    assert compared > 2000


def test_cache_with_arrays_equals_arctic_inferences(arctic):
    """Arctic Inference's SuffixDecodingCache on contiguous int32 arrays (its extend_ndarray /
    speculate_ndarray path) and specdec's on the same tokens in other dtypes and layouts."""
    _, cache = arctic
    rng = random.Random(5700)
    compared = 0
    for _ in range(60):
        depth = rng.choice([2, 4, 8, 24, 64])
        bound = rng.choice([-1, 0, 1, 3])
        theirs, ours = cache.SuffixDecodingCache(depth, bound), specdec.SuffixDecodingCache(depth, bound)
        vocab = rng.choice([3, 20])
        seqs = {}
        for _ in range(rng.randint(10, 60)):
            r = rng.random()
            active = list(theirs.active_requests)
            tokens = [rng.randrange(vocab) for _ in range(rng.randint(0, 25))]
            if r < 0.2 or not active:
                req = rng.randrange(8)
                if req in theirs.active_requests:
                    continue
                theirs.start_request(req, np.asarray(tokens, np.int32))
                ours.start_request(req, _layouts(rng, tokens))
                seqs[req] = list(tokens)
            elif r < 0.55:
                req = rng.choice(active)
                theirs.add_active_response(req, np.asarray(tokens, np.int32))
                ours.add_active_response(req, _layouts(rng, tokens))
                seqs[req] += tokens
            elif r < 0.65:
                req = rng.choice(active)
                theirs.stop_request(req)
                ours.stop_request(req)
            else:
                req = rng.choice(active)
                q = seqs[req]
                context = q[max(0, len(q) - rng.randint(0, 70)):] if q and rng.random() < 0.8 else tokens[:6]
                # max_spec_tokens always given: Arctic Inference 0.3.0's default (None) reads a missing attribute.
                options = (rng.choice([1, 4, 16]), rng.choice([1.0, 2.0]), rng.choice([0.0, 1.0]), rng.choice([0.0, 0.1]),
                           rng.random() < 0.5)
                want = _draft(theirs.speculate(req, np.asarray(context, np.int32), *options))
                assert _draft(ours.speculate(req, _layouts(rng, context), *options)) == want
                compared += 1
            assert sorted(ours.active_requests) == sorted(theirs.active_requests)
            assert sorted(ours.cached_requests) == sorted(theirs.cached_requests)
    assert compared > 300


def test_arctic_inferences_array_checks_and_ours(arctic):
    """What differs, on purpose: Arctic Inference's nanobind cast takes a float or bool array (2.7 read as
    2) and wraps int64 (2^32 + 5 read as 5); specdec refuses both by name. Its cache refuses any array
    that is not contiguous int32; specdec's takes any integer array."""
    _C, cache = arctic
    theirs = _C.SuffixTree(4)
    theirs.extend_ndarray(0, np.array([1.0, 2.7]))
    theirs.extend_ndarray(1, np.array([2**32 + 5], np.int64))
    assert theirs.num_seqs() == 2
    ours = specdec.SuffixTree(4)
    with pytest.raises(TypeError, match="tokens"):
        ours.extend_ndarray(0, np.array([1.0, 2.7]))
    with pytest.raises(ValueError, match="tokens"):
        ours.extend_ndarray(1, np.array([2**32 + 5], np.int64))
    assert ours.num_seqs() == 0
    # Both refuse a list and a 2-D array in the _ndarray methods (TypeError: nanobind's signature).
    for bad in ([1, 2], np.zeros((2, 2), np.int32)):
        with pytest.raises(TypeError):
            theirs.extend_ndarray(2, bad)
    with pytest.raises(TypeError):
        theirs.speculate_ndarray([1, 2], 4, 1.0, 0.0, 0.1, False)
    c = cache.SuffixDecodingCache(4)
    with pytest.raises(ValueError, match="dtype=int32"):
        c.start_request("a", np.array([1, 2], np.int64))
    with pytest.raises(ValueError, match="contiguous"):
        c.start_request("a", np.arange(6, dtype=np.int32)[::2])
    ours = specdec.SuffixDecodingCache(4)
    ours.start_request("a", np.array([5, 6, 7], np.int64))
    ours.add_active_response("a", np.array([5, 0, 6, 0, 7], np.int32)[::2])
    assert ours.speculate("a", np.array([7, 5], np.int64), 4).token_ids == [6]  # "5" is always followed by 6
    # Arctic Inference 0.3.0's speculate with max_spec_tokens=None reads self.max_depth, which it lacks.
    c.start_request("b", [1, 2, 1])
    with pytest.raises(AttributeError):
        c.speculate("b", [1, 2])


def test_estimate_memory_beside_arctic_inferences(arctic):
    """Not the same number (see SuffixTree.estimate_memory): both grow with the stored tokens, and
    specdec's flat arrays hold less than Arctic Inference's heap nodes and hash maps on the same
    sequences."""
    _C, _ = arctic
    rng = np.random.default_rng(57)
    for depth, vocab in ((8, 4), (24, 50), (64, 1000)):
        theirs, ours = _C.SuffixTree(depth), specdec.SuffixTree(depth)
        for s in range(6):
            tokens = rng.integers(0, vocab, size=400, dtype=np.int32)
            theirs.extend_ndarray(s, tokens)
            ours.extend_ndarray(s, tokens)
            assert 0 < ours.estimate_memory() < theirs.estimate_memory()
