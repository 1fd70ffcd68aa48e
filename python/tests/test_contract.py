# SPDX-License-Identifier: Apache-2.0
"""The package's promise about bad input, checked by a seeded fuzzer over its public functions: a call
either succeeds or raises TypeError / ValueError whose message names one of the function's parameters,
never IndexError, MemoryError, OverflowError, SystemError or a crash; an integer that does not fit its
parameter, a negative index, a float where an integer is expected and a read-only output are refused;
and where a call succeeds, the tokens it returns are in range. Then one regression test for each defect
issue 55 found (wrapped integers, negative indices, read-only arrays, allocations before validation,
0-d arrays, ignored arguments, errors that blamed another argument, threads sharing an object).

numpy only (no torch, no hypothesis): the fuzzer is a seeded loop, so a failure repeats."""
import inspect
import json
import os
import pathlib
import re
import threading

import numpy as np
import pytest

import specdec

DATA = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data"
V = 6  # the vocabulary of the synthetic calls
#: Integers past int32 (and int64, uint64) and a negative one: what a caller's bug hands over.
HUGE = [2**31, 2**32 + 5, 2**40, 2**63, 2**64 + 1, -(2**31) - 1]
#: Hostile calls per target (SPECDEC_CONTRACT_ROUNDS to change): 1000 take ~15 s on a 2-core machine.
ROUNDS = int(os.environ.get("SPECDEC_CONTRACT_ROUNDS", 1000))
FORBIDDEN = (IndexError, MemoryError, OverflowError, SystemError, KeyError, AttributeError, ZeroDivisionError,
             RuntimeError, AssertionError)


def probs(rng, *shape):
    p = rng.random(shape).astype(np.float32) + 0.05
    return (p / p.sum(axis=-1, keepdims=True)).astype(np.float32)


def logits(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def ints(rng, shape, high=V, dtype=np.int32):
    return rng.integers(0, high, size=shape).astype(dtype)


# ---- hostile values ----------------------------------------------------------------------------------------

class Bad:
    """A hostile value and whether the call must refuse it (`must`: what the contract says of it)."""

    def __init__(self, value, what, must=False):
        self.value, self.what, self.must = value, what, must


def _readonly(a):
    a = np.array(a, copy=True)
    a.setflags(write=False)
    return a


def array_mutations(v, kind, rng):
    """Hostile versions of valid array `v` for a parameter of `kind`."""
    out = []
    with np.errstate(all="ignore"):  # casting NaN or 1e30 to an integer: the hostile value it is
        for other in (np.float64, np.int64, np.bool_, np.float32, np.int32, np.uint8, np.float16):
            if np.dtype(other) != v.dtype:
                out.append(Bad(v.astype(other), f"dtype {np.dtype(other)}"))
    out.append(Bad(np.asarray(v.ravel()[0]) if v.size else np.zeros((), v.dtype), "0-d"))
    out.append(Bad(v[..., None], "one more dimension"))
    out.append(Bad(v.ravel() if v.ndim != 1 else v[None, :], "other dimensions"))
    out.append(Bad(np.empty((0,) * max(v.ndim, 1), v.dtype), "empty"))
    if v.ndim and v.shape[0] > 1:
        out.append(Bad(v[:-1].copy(), "one row short"))
    out.append(Bad(_readonly(v), "read-only", must=kind.endswith("out")))
    if v.ndim and v.shape[-1] > 0:
        out.append(Bad(np.repeat(v, 2, axis=-1)[..., ::2], "strided"))
    out.append(Bad(v.tolist(), "a list"))
    for junk in (None, "abc", 3.5, np.array(["a", "b"]), object()):
        out.append(Bad(junk, f"junk {type(junk).__name__}"))
    if v.dtype.kind == "f" and v.size:
        for special in (np.nan, np.inf, -np.inf, -0.5, 1e30):
            w = v.copy()
            w.flat[int(rng.integers(v.size))] = special
            out.append(Bad(w, f"contains {special}"))
    if v.dtype.kind in "iu" and v.size:
        for huge in HUGE:
            w = v.astype(object)
            w.flat[int(rng.integers(v.size))] = huge
            too_big = kind in ("i32", "index", "lengths")
            out.append(Bad(w.tolist(), f"list with {huge}", must=too_big))
            if -(2**63) <= huge < 2**63:
                out.append(Bad(w.astype(np.int64), f"int64 with {huge}", must=too_big))
        # 2^31 - 1 is a valid length whose mask takes gigabytes: not for lengths.
        for small in (-1, V + 3) + ((2**31 - 1,) if kind != "lengths" else ()):
            w = v.copy() if v.dtype.itemsize >= 4 else v.astype(np.int64)
            w.flat[int(rng.integers(v.size))] = small
            out.append(Bad(w, f"contains {small}", must=kind == "index" and small < 0))
        w = v.astype(np.float64)
        w.flat[0] += 0.7
        out.append(Bad(w, "fractional floats", must=kind in ("i32", "index")))
    if kind == "flags":  # bools or 0 / 1: 256 is not read as 0 (False), nor 2 as True
        out += [Bad(np.array([256] * v.size), "flags 256", must=True), Bad([2] * v.size, "flags 2", must=True),
                Bad(np.array([-1] * v.size), "flags -1", must=True)]
    return out


def scalar_mutations(kind):
    out = []
    if kind in ("int", "int32", "size", "u64", "perrow_int"):
        for huge in HUGE + [-1]:
            out.append(Bad(huge, f"int {huge}", must=(kind == "int32" and not -(2**31) <= huge < 2**31)
                           or (kind == "u64" and not 0 <= huge < 2**64) or (kind == "size" and not 0 <= huge < 2**31)
                           or kind == "perrow_int" and not -(2**63) <= huge < 2**63))
        for junk, must in ((2.7, True), (2.0, True), (True, False), (np.float64(3.0), True), (np.int64(3), False),
                           (np.array(3), False), (np.array([3, 4]), False), ("3", True), ([3.5], True), (float("nan"), True)):
            out.append(Bad(junk, f"{type(junk).__name__} {junk!r}", must=must and kind != "perrow_int" or
                           (kind == "perrow_int" and isinstance(junk, (float, np.floating, list, str)))))
        out.append(Bad(None, "None"))  # absent, for an optional one
    elif kind in ("float", "perrow_float"):
        for junk in (float("nan"), float("inf"), -float("inf"), -1.0, 0.0, 1e30, 2**70, None, "x", [1.0], True,
                     np.array([1.0, 2.0]), object()):
            out.append(Bad(junk, f"{type(junk).__name__} {junk!r}"))
    elif kind == "prefix":  # any str is a prefix
        for junk in (3, None, ["big"], b"big"):
            out.append(Bad(junk, f"{type(junk).__name__} {junk!r}", must=True))
    elif kind == "str":
        for junk in ("nope", "", 3, None, ["big"], np.array([1, 2]), b"big"):
            out.append(Bad(junk, f"{type(junk).__name__} {junk!r}", must=True))
    elif kind == "flag":
        for junk in (2, "yes", None, np.array([True, False]), 0.5):
            out.append(Bad(junk, f"{type(junk).__name__} {junk!r}"))
    elif kind == "trees":
        bad_tree = specdec.DraftTree(np.array([2**32 + 5], dtype=np.int64), np.array([-1]), np.array([0]),
                                     np.zeros(1, np.float32))
        for junk, must in ((None, True), (3, True), ([object()], True), ([bad_tree], True), ("tree", True), ([], False)):
            out.append(Bad(junk, f"trees {junk!r}", must=must))
    elif kind == "seq":
        for junk in (None, 3, "abc", [None], [np.zeros((2, 2), np.complex64)]):
            out.append(Bad(junk, f"{type(junk).__name__}"))
    return out


def mutations(kind, valid, rng):
    if isinstance(valid, list) and kind not in ("trees", "seq"):
        valid = np.asarray(valid)
    if isinstance(valid, np.ndarray) and kind not in ("perrow_int", "perrow_float"):
        return array_mutations(valid, kind, rng)
    out = scalar_mutations(kind)
    assert out, f"no hostile values of kind {kind} for {valid!r}"
    if kind in ("perrow_int", "perrow_float", "u64") and isinstance(valid, np.ndarray):
        out += array_mutations(valid, "i64" if kind == "perrow_int" else kind, rng)
    return out


# ---- the targets --------------------------------------------------------------------------------------------

class Target:
    """A public function or method: `call(kwargs)` calls it (making any object it belongs to), `valid(rng)`
    gives arguments it accepts, `kinds` the kind of each fuzzed parameter, `check(result, kwargs)` what a
    success must return. `names` are the words a message may name: the parameters of `signature_of`."""

    def __init__(self, name, signature_of, call, valid, kinds, check=None, extra_names=()):
        self.name, self.call, self.valid, self.kinds, self.check = name, call, valid, kinds, check
        params = [p for p in inspect.signature(signature_of).parameters if p != "self"]
        self.names = set(params) | set(extra_names)
        missing = set(kinds) - set(params)
        assert not missing, f"{name}: {missing} are not parameters"


def tokens_in(out, low, high):
    out = np.asarray(out)
    assert out.size == 0 or (out.min() >= low and out.max() < high), f"tokens outside [{low}, {high}): {out}"


def load(relative):
    return json.loads((DATA / relative).read_text())


def decoder_weights(rng, e=8, heads=2, kv=1, hd=4, ffn=16):
    def w(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    return {"input_layernorm.weight": np.ones(e, np.float32), "post_attention_layernorm.weight": np.ones(e, np.float32),
            "self_attn.q_proj.weight": w(heads * hd, e), "self_attn.k_proj.weight": w(kv * hd, e),
            "self_attn.v_proj.weight": w(kv * hd, e), "self_attn.o_proj.weight": w(e, heads * hd),
            "mlp.gate_proj.weight": w(ffn, e), "mlp.up_proj.weight": w(ffn, e), "mlp.down_proj.weight": w(e, ffn)}


def golden_weights(relative):
    case = load(relative)
    return case, {name: np.asarray(p["data"]).reshape(p["shape"]) for name, p in case["params"].items()}


def targets():
    t = []

    def add(*args, **kwargs):
        t.append(Target(*args, **kwargs))

    # specdec's row primitives
    add("argmax", specdec.argmax, lambda kw: specdec.argmax(**kw),
        lambda r: dict(logits=logits(r, 3, V), out=np.empty(3, np.int32), values=np.empty(3, np.float32)),
        dict(logits="f32", out="i32out", values="f32out"), lambda res, kw: tokens_in(res, 0, V))
    add("topk", specdec.topk, lambda kw: specdec.topk(**kw),
        lambda r: dict(logits=logits(r, 3, V), k=2, values=np.empty((3, 2), np.float32), indices=np.empty((3, 2), np.int32)),
        dict(logits="f32", k="size", values="f32out", indices="i32out"), lambda res, kw: tokens_in(res[1], 0, V))
    for fn in (specdec.softmax, specdec.log_softmax):
        add(fn.__name__, fn, lambda kw, fn=fn: fn(**kw),
            lambda r: dict(logits=logits(r, 3, V), temperature=0.7, out=np.empty((3, V), np.float32)),
            dict(logits="f32", temperature="float", out="f32out"))
    add("logsumexp", specdec.logsumexp, lambda kw: specdec.logsumexp(**kw),
        lambda r: dict(logits=logits(r, 3, V), temperature=0.7, out=np.empty(3, np.float32)),
        dict(logits="f32", temperature="float", out="f32out"))
    # FlashInfer
    add("top_k_renorm_probs", specdec.top_k_renorm_probs, lambda kw: specdec.top_k_renorm_probs(**kw),
        lambda r: dict(probs=probs(r, 3, V), top_k=np.array([2, 3, 1]), out=np.empty((3, V), np.float32)),
        dict(probs="f32", top_k="perrow_int", out="f32out"))
    add("top_p_renorm_probs", specdec.top_p_renorm_probs, lambda kw: specdec.top_p_renorm_probs(**kw),
        lambda r: dict(probs=probs(r, 3, V), top_p=0.8, out=np.empty((3, V), np.float32)),
        dict(probs="f32", top_p="perrow_float", out="f32out"))
    add("top_k_mask_logits", specdec.top_k_mask_logits, lambda kw: specdec.top_k_mask_logits(**kw),
        lambda r: dict(logits=logits(r, 3, V), top_k=2, out=np.empty((3, V), np.float32)),
        dict(logits="f32", top_k="perrow_int", out="f32out"))
    add("sampling_from_probs", specdec.sampling_from_probs, lambda kw: specdec.sampling_from_probs(**kw),
        lambda r: dict(probs=probs(r, 3, V), indices=np.array([0, 2]), seed=5, offset=1),
        dict(probs="f32", indices="index", seed="u64", offset="u64"), lambda res, kw: tokens_in(res, 0, V))
    add("sampling_from_probs(uniforms)", specdec.sampling_from_probs, lambda kw: specdec.sampling_from_probs(**kw),
        lambda r: dict(probs=probs(r, 3, V), uniforms=r.random(3).astype(np.float32)),
        dict(probs="f32", uniforms="f32"), lambda res, kw: tokens_in(res, 0, V))
    add("top_k_top_p_sampling_from_logits", specdec.top_k_top_p_sampling_from_logits,
        lambda kw: specdec.top_k_top_p_sampling_from_logits(**kw),
        lambda r: dict(logits=logits(r, 3, V), top_k=3, top_p=np.array([0.9, 0.5, 0.7]), indices=[2, 1],
                       filter_apply_order="joint", seed=2, offset=0),
        dict(logits="f32", top_k="perrow_int", top_p="perrow_float", indices="index", filter_apply_order="str",
             seed="u64", offset="u64"), lambda res, kw: tokens_in(res, 0, V))
    add("segment_packbits", specdec.segment_packbits, lambda kw: specdec.segment_packbits(**kw),
        lambda r: dict(x=r.random(10) < 0.5, indptr=np.array([0, 3, 10], np.int32), bitorder="little"),
        dict(x="bool", indptr="i32", bitorder="str"))
    add("chain_speculative_sampling", specdec.chain_speculative_sampling,
        lambda kw: specdec.chain_speculative_sampling(**kw),
        lambda r: dict(draft_probs=probs(r, 2, 3, V), draft_token_ids=ints(r, (2, 3)), target_probs=probs(r, 2, 4, V),
                       maybe_output_accepted_token_num=np.zeros(2, np.int32),
                       maybe_output_emitted_draft_token_num=np.zeros(2, np.int32), seed=7, offset=3),
        dict(draft_probs="f32", draft_token_ids="i32", target_probs="f32", maybe_output_accepted_token_num="i32out",
             maybe_output_emitted_draft_token_num="i32out", seed="u64", offset="u64"),
        lambda res, kw: tokens_in(res[0], -1, V))
    add("chain_speculative_sampling(uniforms)", specdec.chain_speculative_sampling,
        lambda kw: specdec.chain_speculative_sampling(**kw),
        lambda r: dict(draft_probs=probs(r, 2, 3, V), draft_token_ids=ints(r, (2, 3)), target_probs=probs(r, 2, 4, V),
                       uniforms=r.random((2, 7)) * 0.9 + 0.05),
        dict(uniforms="f64"), lambda res, kw: tokens_in(res[0], -1, V))
    # vLLM
    add("rejection_sample", specdec.rejection_sample, lambda kw: specdec.rejection_sample(**kw),
        lambda r: dict(draft_token_ids=ints(r, 5), num_draft_tokens=[2, 3], max_spec_len=3,
                       cu_num_draft_tokens=np.array([2, 5]), draft_probs=probs(r, 5, V), target_probs=probs(r, 5, V),
                       bonus_token_ids=ints(r, 2), is_greedy=np.array([True, False]), seed=4, offset=0, cuda_stream=0),
        dict(draft_token_ids="i32", max_spec_len="size", cu_num_draft_tokens="i32", draft_probs="f32", target_probs="f32",
             bonus_token_ids="i32", is_greedy="flags", seed="u64", offset="u64", cuda_stream="u64"),
        lambda res, kw: tokens_in(res, -1, V))
    add("rejection_sample(uniforms)", specdec.rejection_sample, lambda kw: specdec.rejection_sample(**kw),
        lambda r: dict(draft_token_ids=ints(r, 5), num_draft_tokens=None, max_spec_len=3,
                       cu_num_draft_tokens=np.array([2, 5]), draft_probs=None, target_probs=probs(r, 5, V),
                       bonus_token_ids=ints(r, (2, 1)), uniform_probs=r.random(5), exponentials=np.ones((2, V), np.float32)),
        dict(cu_num_draft_tokens="i32", bonus_token_ids="i32", uniform_probs="f64", exponentials="f32"),
        lambda res, kw: tokens_in(res, -1, V))
    add("apply_sampling_constraints", specdec.apply_sampling_constraints, lambda kw: specdec.apply_sampling_constraints(**kw),
        lambda r: dict(logits=logits(r, 5, V), cu_num_draft_tokens=np.array([2, 5]), temperature=np.array([0.7, -1.0]),
                       top_k=np.array([3, V]), top_p=np.array([0.9, 1.0]), all_greedy=False),
        dict(logits="f32", cu_num_draft_tokens="i32", temperature="perrow_float", top_k="perrow_int", top_p="perrow_float",
             all_greedy="flag"))
    add("apply_top_k_top_p", specdec.apply_top_k_top_p, lambda kw: specdec.apply_top_k_top_p(**kw),
        lambda r: dict(logits=logits(r, 3, V), k=np.array([1, 3, V]), p=np.array([0.5, 0.9, 1.0])),
        dict(logits="f32", k="perrow_int", p="perrow_float"))
    # SGLang
    greedy_case = load("trees/sglang_verify_tree_greedy_upstream_test.json")["inputs"]

    def sglang_links(r, case=greedy_case, names=("retrive_index", "retrive_next_token", "retrive_next_sibling")):
        cand = np.array(case["candidates"], np.int64)
        bs, n = cand.shape
        return dict(predicts=np.full(bs * n, -1, np.int32), accept_index=np.full((bs, 4), -1, np.int32),
                    accept_token_num=np.zeros(bs, np.int32), candidates=cand, cuda_stream=0,
                    **{k: np.array(case[src], np.int64) for k, src in zip(
                        ("retrive_index", "retrive_next_token", "retrive_next_sibling"), names)})

    sglang_kinds = dict(predicts="i32out", accept_index="i32out", accept_token_num="i32out", candidates="i64",
                        retrive_index="i64", retrive_next_token="i64", retrive_next_sibling="i64", cuda_stream="u64")
    add("verify_tree_greedy", specdec.verify_tree_greedy, lambda kw: specdec.verify_tree_greedy(**kw),
        lambda r: dict(sglang_links(r), target_predict=np.array(greedy_case["target_predict"], np.int64)),
        dict(sglang_kinds, target_predict="i64"))
    sampled = load("samplers/sglang_tree_target_only_test.json")["inputs"]

    def sampled_args(r):
        cand = np.array(sampled["candidates"], np.int64)
        bs, n = cand.shape
        return dict(predicts=np.full(sampled["predicts_len"], -1, np.int32),
                    accept_index=np.full((bs, sampled["num_spec_steps"]), -1, np.int32), accept_token_num=np.zeros(bs, np.int32),
                    candidates=cand, retrive_index=np.array(sampled["retrieve_index"], np.int64),
                    retrive_next_token=np.array(sampled["retrieve_next_token"], np.int64),
                    retrive_next_sibling=np.array(sampled["retrieve_next_sibling"], np.int64),
                    uniform_samples=np.array(sampled["uniform_samples"], np.float32),
                    uniform_samples_for_final_sampling=np.array(sampled["uniform_samples_for_final_sampling"], np.float32),
                    target_probs=np.array(sampled["target_probs"], np.float32), threshold_single=0.9, threshold_acc=0.5,
                    cuda_stream=0)

    add("tree_speculative_sampling_target_only", specdec.tree_speculative_sampling_target_only,
        lambda kw: specdec.tree_speculative_sampling_target_only(**kw), sampled_args,
        dict(sglang_kinds, uniform_samples="f32", uniform_samples_for_final_sampling="f32", target_probs="f32",
             threshold_single="float", threshold_acc="float"))
    build = load("trees/sglang_build_tree_upstream_test.json")

    def build_args(r):
        p, org = build["params"], build["outputs"]["organize_draft_results"]
        bs, n = p["bs"], p["num_draft_tokens"]
        return dict(parent_list=np.array(org["parent_list"], np.int64),
                    selected_index=np.array(org["top_scores_index"], np.int64),
                    verified_seq_len=np.array(build["inputs"]["seq_lens"], np.int64), tree_mask=np.zeros(bs * n * n, np.bool_),
                    positions=np.zeros(bs * n, np.int64), retrive_index=np.zeros((bs, n), np.int64),
                    retrive_next_token=np.zeros((bs, n), np.int64), retrive_next_sibling=np.zeros((bs, n), np.int64),
                    topk=p["topk"], depth=p["spec_steps"], draft_token_num=n, tree_mask_mode=1)

    add("build_tree_kernel_efficient", specdec.build_tree_kernel_efficient, lambda kw: specdec.build_tree_kernel_efficient(**kw),
        build_args, dict(parent_list="i64", selected_index="i64", verified_seq_len="i64", tree_mask="boolout", positions="i64out",
                         retrive_index="i64out", retrive_next_token="i64out", retrive_next_sibling="i64out", topk="int",
                         depth="int", draft_token_num="int", tree_mask_mode="int"))
    add("philox_uniforms", specdec.philox_uniforms, lambda kw: specdec.philox_uniforms(**kw),
        lambda r: dict(seed=3, offset=2, rows=2, count=3, dtype="float32"),
        dict(seed="u64", offset="u64", rows="size", count="size", dtype="str"))
    add("philox_exponentials", specdec.philox_exponentials, lambda kw: specdec.philox_exponentials(**kw),
        lambda r: dict(seed=3, offset=2, rows=2, count=3), dict(seed="u64", offset="u64", rows="size", count="size"))

    # specdec's trees
    def tree(r):
        return specdec.DraftTree.from_parents([3, 1, 4, 1, 5], [-1, 0, 0, 1, 1])

    add("DraftTree.from_parents", specdec.DraftTree.from_parents, lambda kw: specdec.DraftTree.from_parents(**kw),
        lambda r: dict(tokens=np.array([3, 1, 4], np.int32), parents=np.array([-1, 0, 0], np.int32), vocab_size=V),
        dict(tokens="i32", parents="i32", vocab_size="int"))
    add("DraftTree.chain", specdec.DraftTree.chain, lambda kw: specdec.DraftTree.chain(**kw),
        lambda r: dict(root=2, tokens=[1, 2, 3]), dict(root="int32", tokens="i32"))
    add("DraftTree.mask", specdec.DraftTree.mask, lambda kw: tree(None).mask(**kw),
        lambda r: dict(prefix_length=2, dtype=np.uint8, additive=False, out=np.empty((5, 7), np.uint8)),
        dict(prefix_length="size", out="u8out"), extra_names=("token", "parent", "depth"))
    add("DraftTree.positions", specdec.DraftTree.positions, lambda kw: tree(None).positions(**kw),
        lambda r: dict(prefix_length=4), dict(prefix_length="int"), extra_names=("token", "parent", "depth"))
    add("DraftTree.retrieve_paths", specdec.DraftTree.retrieve_paths, lambda kw: tree(None).retrieve_paths(**kw),
        lambda r: dict(order="lexicographic"), dict(order="str"), extra_names=("token", "parent", "depth"))
    add("DraftTree.validate", specdec.DraftTree.validate, lambda kw: tree(None).validate(**kw),
        lambda r: dict(vocab_size=V), dict(vocab_size="int"), extra_names=("token", "parent", "depth"))

    def hostile_tree_call(kw):
        t = specdec.DraftTree(kw["token"], kw["parent"], kw["depth"], np.zeros(3, np.float32))
        return t.mask(1), t.mask_packed_int32(), t.mask_bitpacked_rows(), t.positions(1), t.retrieve_paths(), t.child_links(), \
            specdec.tree_batch([t])

    add("DraftTree fields", specdec.DraftTree, hostile_tree_call,
        lambda r: dict(token=np.array([3, 1, 4], np.int32), parent=np.array([-1, 0, 0], np.int32),
                       depth=np.array([0, 1, 1], np.int32)),
        dict(token="i32", parent="i32", depth="i32"), extra_names=("tree", "trees", "nodes"))
    add("tree_mask_flashinfer", specdec.tree_mask_flashinfer, lambda kw: specdec.tree_mask_flashinfer(**kw),
        lambda r: dict(trees=[tree(r), tree(r)], prefix_lengths=np.array([2, 0])),
        dict(trees="trees", prefix_lengths="lengths"))
    add("batch_tree_mask", specdec.batch_tree_mask, lambda kw: specdec.batch_tree_mask(**kw),
        lambda r: dict(parents=np.array([[-1, 0, 0, 1], [-1, 0, 1, 2]], np.int32), node_counts=np.array([4, 3], np.int32),
                       layout="dense", prefix_length=2, dtype="uint8", out=np.empty((2, 4, 6), np.uint8)),
        dict(parents="i32", node_counts="i32", layout="str", prefix_length="size", dtype="str", out="u8out"))
    add("batch_tree_mask(bitpacked_rows)", specdec.batch_tree_mask,
        lambda kw: specdec.batch_tree_mask(layout="bitpacked_rows", **kw),
        lambda r: dict(parents=np.array([[-1, 0, 0, 1], [-1, 0, 1, 2]], np.int32), out=np.empty((2, 4), np.uint8)),
        dict(parents="i32", out="u8out"))
    add("batch_tree_mask_flashinfer", specdec.batch_tree_mask_flashinfer, lambda kw: specdec.batch_tree_mask_flashinfer(**kw),
        lambda r: dict(parents=np.array([[-1, 0, 0, 1], [-1, 0, 1, 2]], np.int32), node_counts=[4, 2], prefix_lengths=[3, 1]),
        dict(parents="i32", node_counts="i32", prefix_lengths="lengths"))
    add("propose_ngram", specdec.propose_ngram, lambda kw: specdec.propose_ngram(**kw),
        lambda r: dict(history=[1, 2, 3, 1, 2, 3, 1, 2], length=3, max_ngram=3, min_ngram=1, branches=2, max_history=0),
        dict(history="i32", length="int", max_ngram="int", min_ngram="int", branches="int", max_history="int"))
    add("ngram_match_length", specdec.ngram_match_length, lambda kw: specdec.ngram_match_length(**kw),
        lambda r: dict(history=np.array([1, 2, 3, 1, 2], np.int32), max_ngram=3, min_ngram=1, max_history=0),
        dict(history="i32", max_ngram="int", min_ngram="int", max_history="int"))

    def suffix_tree():
        s = specdec.SuffixTree(8)
        s.extend(0, [1, 2, 3, 1, 2, 4])
        return s

    add("SuffixTree", specdec.SuffixTree, lambda kw: specdec.SuffixTree(**kw), lambda r: dict(max_depth=8),
        dict(max_depth="int"))
    add("SuffixTree.extend", specdec.SuffixTree.extend, lambda kw: suffix_tree().extend(**kw),
        lambda r: dict(seq_id=1, tokens=np.array([1, 2], np.int32)), dict(seq_id="int32", tokens="i32"))
    add("SuffixTree.extend_ndarray", specdec.SuffixTree.extend_ndarray, lambda kw: suffix_tree().extend_ndarray(**kw),
        lambda r: dict(seq_id=1, tokens=np.array([1, 2], np.int64)), dict(seq_id="int32", tokens="i32"))
    add("SuffixTree.append", specdec.SuffixTree.append, lambda kw: suffix_tree().append(**kw),
        lambda r: dict(seq_id=0, token=5), dict(seq_id="int32", token="int32"))
    add("SuffixTree.speculate", specdec.SuffixTree.speculate, lambda kw: suffix_tree().speculate(**kw),
        lambda r: dict(context=[1, 2], max_spec_tokens=4, max_spec_factor=1.0, max_spec_offset=0.0, min_token_prob=0.1,
                       use_tree_spec=True),
        dict(context="i32", max_spec_tokens="int", max_spec_factor="float", max_spec_offset="float", min_token_prob="float",
             use_tree_spec="flag"))

    add("SuffixTree.speculate_ndarray", specdec.SuffixTree.speculate_ndarray,
        lambda kw: suffix_tree().speculate_ndarray(**kw),
        lambda r: dict(context=np.array([1, 2], np.int32), max_spec_tokens=4, max_spec_factor=1.0, max_spec_offset=0.0,
                       min_token_prob=0.1, use_tree_spec=False),
        dict(context="i32", max_spec_tokens="int", max_spec_factor="float", max_spec_offset="float", min_token_prob="float",
             use_tree_spec="flag"))

    def suffix_cache():
        c = specdec.SuffixDecodingCache(8)
        c.start_request("a", [1, 2, 3, 1, 2])
        return c

    add("SuffixDecodingCache", specdec.SuffixDecodingCache, lambda kw: specdec.SuffixDecodingCache(**kw),
        lambda r: dict(max_tree_depth=8, max_cached_requests=2, max_cached_tokens=-1),
        dict(max_tree_depth="int", max_cached_requests="int", max_cached_tokens="int"))
    add("SuffixDecodingCache.start_request", specdec.SuffixDecodingCache.start_request,
        lambda kw: suffix_cache().start_request(**kw), lambda r: dict(req_id="b", prompt_token_ids=[4, 5]),
        dict(req_id="seq", prompt_token_ids="i32"))
    add("SuffixDecodingCache.add_active_response", specdec.SuffixDecodingCache.add_active_response,
        lambda kw: suffix_cache().add_active_response(**kw), lambda r: dict(req_id="a", token_ids=np.array([3], np.int32)),
        dict(req_id="seq", token_ids="i32"))
    add("SuffixDecodingCache.speculate", specdec.SuffixDecodingCache.speculate, lambda kw: suffix_cache().speculate(**kw),
        lambda r: dict(req_id="a", context=[1, 2], max_spec_tokens=3, max_spec_factor=1.0, min_token_prob=0.1),
        dict(req_id="seq", context="i32", max_spec_tokens="int", max_spec_factor="float", min_token_prob="float"))
    add("SuffixDecodingDraft.tree", specdec.SuffixDecodingDraft.tree,
        lambda kw: specdec.SuffixDecodingDraft(kw.pop("token_ids"), kw.pop("parents"), kw.pop("probs")).tree(**kw),
        lambda r: dict(root=1, token_ids=[2, 3], parents=[-1, 0], probs=[0.5, 0.25]),
        dict(root="int32"), extra_names=("token_ids", "parents", "probs"))

    # EAGLE-2
    def eagle2_call(cls, **more):
        def call(kw):
            b = cls(2, 2, 4, batch=2, **more)
            step = b.begin(kw["root_logits"], kw["root_tokens"], kw.get("target_vocab", 0))
            b.expand(kw.get("frontier_logits", np.zeros((4, V), np.float32)))
            b.expand(np.zeros((4, V), np.float32))
            return step, b.finish()
        return call

    for cls in (specdec.Eagle2TreeBuilder, specdec.Eagle2BatchBuilder):
        add(f"{cls.__name__}.begin", cls.begin, eagle2_call(cls),
            lambda r: dict(root_logits=logits(r, 2, V), root_tokens=[1, 2], target_vocab=V),
            dict(root_logits="f32", root_tokens="i32", target_vocab="int"))
        add(f"{cls.__name__}.expand", cls.expand, lambda kw, cls=cls: eagle2_call(cls)(dict(
            root_logits=np.zeros((2, V), np.float32), root_tokens=[0, 1], **kw)),
            lambda r: dict(frontier_logits=logits(r, 4, V)), dict(frontier_logits="f32"))
        add(cls.__name__, cls, lambda kw, cls=cls: cls(**kw),
            lambda r: dict(top_k=2, depth=2, total_tokens=4, batch=2, d2t=np.zeros(V, np.int32)),
            dict(top_k="int", depth="int", total_tokens="int", batch="int", d2t="i32"))
    policy = specdec.DraftLengthPolicy
    add("DraftLengthPolicy", policy, lambda kw: policy(**kw), lambda r: dict(longest=4, contexts=2),
        dict(longest="int", contexts="int"))
    add("DraftLengthPolicy.verified", policy.verified, lambda kw: policy(4, 2).verified(**kw),
        lambda r: dict(accepted=1, drafted=3, context=1), dict(accepted="int", drafted="int", context="int"))
    add("DraftLengthPolicy.choose", policy.choose, lambda kw: policy(4, 2).choose(**kw),
        lambda r: dict(context=1, available=3), dict(context="int", available="int"))
    add("DraftLengthPolicy.target_forward_timed", policy.target_forward_timed,
        lambda kw: policy(4).target_forward_timed(**kw), lambda r: dict(rows=3, seconds=0.01), dict(rows="int", seconds="float"))
    add("DraftLengthPolicy.expected_tokens", policy.expected_tokens, lambda kw: policy(4).expected_tokens(**kw),
        lambda r: dict(length=2, context=0), dict(length="int", context="int"))

    # verification of specdec's trees
    add("verify_greedy", specdec.verify_greedy, lambda kw: specdec.verify_greedy(**kw),
        lambda r: dict(logits=logits(r, 10, V), trees=[tree(r), tree(r)], target_rows=np.array([0, 5])),
        dict(logits="f32", trees="trees", target_rows="i64"),
        lambda res, kw: [tokens_in(v.tokens, 0, V) for v in res])
    add("verify_speculative", specdec.verify_speculative, lambda kw: specdec.verify_speculative(**kw),
        lambda r: dict(target=probs(r, 10, V), trees=[tree(r), tree(r)], temperature=1.0, target_rows=np.array([0, 5]),
                       draft_probs=probs(r, 3, V), draft_rows=[np.array([-1, 0, 1, -1, 2]), np.array([-1, -1, -1, -1, -1])],
                       seed=1, offset=2),
        dict(target="f32", trees="trees", temperature="float", target_rows="i64", draft_probs="f32", draft_rows="seq",
             seed="u64", offset="u64"),
        lambda res, kw: [tokens_in(v.tokens, 0, V) for v in res])
    add("tree_batch", specdec.tree_batch, lambda kw: specdec.tree_batch(**kw),
        lambda r: dict(trees=[tree(r), specdec.DraftTree.chain(1, [2])], nodes=6), dict(trees="trees", nodes="size"))

    def batch_args(r):
        tokens, parents, counts = specdec.tree_batch([tree(r), specdec.DraftTree.chain(1, [2, 3])])
        return dict(target=probs(r, 10, V), tokens=tokens, parents=parents, node_counts=counts, target_rows=np.array([0, 5]),
                    max_accepted=np.array([-1, 1], np.int32), bonus_tokens=np.array([-1, 2], np.int32), seed=3, offset=1)

    add("verify_tree_batch", specdec.verify_tree_batch, lambda kw: specdec.verify_tree_batch(**kw), batch_args,
        dict(target="f32", tokens="i32", parents="i32", node_counts="i32", target_rows="i64", max_accepted="i32",
             bonus_tokens="i32", seed="u64", offset="u64"),
        lambda res, kw: tokens_in(res.tokens, -1, V))

    # drafter blocks
    weights = decoder_weights(np.random.default_rng(1))

    def layer(**more):
        return specdec.DecoderLayer(weights, heads=2, kv_heads=1, head_dim=4, capacity=16, **more)

    def primed():
        d = layer()
        d.forward(np.ones((3, 8), np.float32), np.arange(3))
        return d

    add("DecoderLayer", specdec.DecoderLayer, lambda kw: specdec.DecoderLayer(**kw),
        lambda r: dict(weights=weights, heads=2, kv_heads=1, head_dim=4, rms_eps=1e-5, rope_theta=1e4, input_norm=True,
                       capacity=16, prefix=""),
        dict(heads="int", kv_heads="int", head_dim="int", rms_eps="float", rope_theta="float", input_norm="flag",
             capacity="size", prefix="prefix"))
    add("DecoderLayer.forward", specdec.DecoderLayer.forward, lambda kw: primed().forward(**kw),
        lambda r: dict(x=logits(r, 2, 8), positions=np.array([3, 4]), mask=np.ones((2, 5), np.bool_)),
        dict(x="f32out", positions="i64", mask="bool"))
    add("DecoderLayer.keep", specdec.DecoderLayer.keep, lambda kw: primed().keep(**kw),
        lambda r: dict(prefix=1, offsets=np.array([0, 1], np.int32)), dict(prefix="int", offsets="i32"))
    add("DecoderLayer.crop", specdec.DecoderLayer.crop, lambda kw: primed().crop(**kw), lambda r: dict(n=1), dict(n="int"))
    add("eagle_fuse", specdec.eagle_fuse, lambda kw: specdec.eagle_fuse(**kw),
        lambda r: dict(tokens=[1, 5], feature=logits(r, 2, 4), embed=logits(r, V, 4), fc_weight=logits(r, 4, 8),
                       fc_bias=logits(r, 4), out=np.empty((2, 4), np.float32)),
        dict(tokens="i32", feature="f32", embed="f32", fc_weight="f32", fc_bias="f32", out="f32out"))

    jakiro_case, jakiro_weights = golden_weights("blocks/jakiro_layer_0.json")
    d = jakiro_case["dims"]
    jakiro = dict(heads=d["num_attention_heads"], kv_heads=d["num_key_value_heads"], head_dim=d["head_dim"])
    add("JakiroLayer.forward", specdec.JakiroLayer.forward,
        lambda kw: specdec.JakiroLayer(jakiro_weights, capacity=8, **jakiro).forward(**kw),
        lambda r, e=d["E"]: dict(tokens=np.array([1, 2]), feature=logits(r, 2, e), positions=[0, 1], contrastive=True),
        dict(tokens="i32", feature="f32", positions="i64", contrastive="flag"))
    moa_case, moa_weights = golden_weights("blocks/moa_pipeline_inf_0.json")
    dims = moa_case["dims"]

    def part(p):
        return dict(heads=p["num_attention_heads"], kv_heads=p["num_key_value_heads"], head_dim=p["head_dim"],
                    rope_theta=p.get("rope_theta", dims["target"]["rope_theta"]))

    def moa():
        return specdec.MoaDrafter(moa_weights, lsa=part(dims["lsa"]), sa=part(dims["sa"]), ca=part(dims["ca"]),
                                  target_layers=dims["target"]["num_layers"], target_head_dim=dims["target"]["head_dim"],
                                  capacity=16)

    width = dims["target"]["num_key_value_heads"] * dims["target"]["head_dim"]
    e = moa_weights["model.embed_tokens.weight"].shape[1]
    add("MoaDrafter.add_verified", specdec.MoaDrafter.add_verified, lambda kw: moa().add_verified(**kw),
        lambda r: dict(keys=[logits(r, 2, width)] * dims["target"]["num_layers"],
                       values=[logits(r, 2, width)] * dims["target"]["num_layers"], first=0, count=2),
        dict(keys="seq", values="seq", first="int", count="int"))
    def primed_moa():
        m = moa()
        keys = [np.ones((2, width), np.float32)] * dims["target"]["num_layers"]
        m.add_verified(keys, keys, 0, 2)
        return m

    add("MoaDrafter.forward", specdec.MoaDrafter.forward, lambda kw: primed_moa().forward(**kw),
        lambda r: dict(x=logits(r, 2, e), positions=np.array([0, 1]), last=1),
        dict(x="f32out", positions="i64", last="int"))
    return t


TARGETS = targets()


def _names(message, names):
    """Whether `message` names one of `names`: the name, its singular (the C++ headers' "token 3" of
    tokens) or its words ("target rows" of target_rows), as whole words."""
    words = set()
    for n in names:
        words |= {n, n[:-1] if n.endswith("s") and len(n) > 3 else n, n.replace("_", " ")}
    return any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(w)}(?![A-Za-z0-9_])", message) for w in words)


@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
def test_hostile_arguments_are_refused_by_name(target):
    rng = np.random.default_rng(55 + TARGETS.index(target))  # seeded: a failure repeats
    kw = target.valid(rng)
    assert set(target.kinds) <= set(kw), f"{target.name}: no valid value of {set(target.kinds) - set(kw)} to mutate"
    result = target.call(dict(kw))  # the baseline call is valid
    if target.check:
        target.check(result, kw)
    params = list(target.kinds)
    failures = []
    for round_ in range(ROUNDS):
        kw = target.valid(rng)
        count = 1 if rng.random() < 0.85 or len(params) < 2 else 2
        chosen = [params[int(i)] for i in rng.choice(len(params), size=count, replace=False)]
        bads = []
        for p in chosen:
            options = mutations(target.kinds[p], kw.get(p), rng)
            bad = options[int(rng.integers(len(options)))]
            kw[p] = bad.value
            bads.append((p, bad))
        what = ", ".join(f"{p} = {b.what}" for p, b in bads)
        try:
            result = target.call(dict(kw))
        except (TypeError, ValueError) as e:
            message = str(e)
            if isinstance(e, FORBIDDEN):
                failures.append(f"{what}: {type(e).__name__}: {message}")
            elif "incompatible function arguments" in message or not _names(message, target.names):
                failures.append(f"{what}: {type(e).__name__} naming none of {sorted(target.names)}: {message}")
            continue
        except Exception as e:  # noqa: BLE001 - every other exception breaks the contract
            failures.append(f"{what}: {type(e).__name__}: {e}")
            continue
        if any(b.must for _, b in bads):
            failures.append(f"{what}: accepted; expected a TypeError or ValueError naming it")
        elif target.check:
            try:
                target.check(result, kw)
            except AssertionError as e:
                failures.append(f"{what}: {e}")
    assert not failures, f"{target.name}:\n" + "\n".join(failures[:20])


# ---- regression tests: one per defect issue 55 found ----------------------------------------------------------

def _raises(error, name, call, *args, **kwargs):
    """`call` raises `error` whose message starts with argument `name` (or names it, for C++ messages)."""
    with pytest.raises(error) as got:
        call(*args, **kwargs)
    message = str(got.value)
    assert message.startswith(name) or re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", message), message
    return message


def _vllm_args(rng):
    return dict(draft_token_ids=ints(rng, 5), num_draft_tokens=None, max_spec_len=3, cu_num_draft_tokens=np.array([2, 5]),
                draft_probs=None, target_probs=probs(rng, 5, V), bonus_token_ids=np.array([1, 2], np.int32), seed=3)


def test_integers_past_int32_are_refused_not_wrapped():
    rng = np.random.default_rng(0)
    kw = _vllm_args(rng)
    _raises(ValueError, "bonus_token_ids", specdec.rejection_sample, **dict(kw, bonus_token_ids=[2**32 + 5, 1]))
    _raises(ValueError, "bonus_token_ids", specdec.rejection_sample, **dict(kw, bonus_token_ids=np.array([2**32 + 5, 1])))
    _raises(ValueError, "is_greedy", specdec.rejection_sample, **dict(kw, is_greedy=[256, 0]))  # was read as 0: random
    _raises(ValueError, "is_greedy", specdec.rejection_sample, **dict(kw, is_greedy=[2, 1]))
    _raises(ValueError, "root", specdec.DraftTree.chain, 2**32 + 5, [1])
    _raises(ValueError, "tokens", specdec.DraftTree.chain, 1, [2**32 + 5])
    parents = np.array([[-1, 0, 0]], np.int32)
    _raises(ValueError, "node_counts", specdec.batch_tree_mask, parents, [2**32 + 3])
    _raises(ValueError, "node_counts", specdec.batch_tree_mask_flashinfer, parents, [2**32 + 3])
    wide = specdec.DraftTree(np.array([2**32 + 5], np.int64), np.array([-1]), np.array([0]), np.zeros(1, np.float32))
    _raises(ValueError, "trees[0].token", specdec.tree_batch, [wide])
    _raises(ValueError, "indptr", specdec.segment_packbits, np.ones(8, bool), [0, 2**32 + 8])
    _raises(ValueError, "seq_id", specdec.SuffixTree(4).extend, 2**32, [1])
    # A float where an integer is expected is refused, not truncated.
    p = probs(rng, 2, V)
    _raises(TypeError, "top_k", specdec.top_k_renorm_probs, p, 2.7)
    _raises(TypeError, "top_k", specdec.top_k_renorm_probs, p, [2.0, 3.0])
    _raises(TypeError, "k", specdec.topk, p, 2.0)
    _raises(TypeError, "length", specdec.propose_ngram, [1, 2, 1], 2.5)
    # ... and so are Python ints that nanobind would refuse without a name.
    _raises(ValueError, "seed", specdec.sampling_from_probs, p, seed=-1)
    _raises(ValueError, "seed", specdec.sampling_from_probs, p, seed=2**64)
    _raises(ValueError, "length", specdec.propose_ngram, [1, 2, 1], 2**70)


def test_indices_are_never_negative_nor_past_the_rows():
    rng = np.random.default_rng(1)
    p = probs(rng, 3, V)
    for bad in ([-1], [3], [0, -3], np.array([2**40])):
        _raises(ValueError, "indices", specdec.sampling_from_probs, p, indices=bad, seed=1)
        _raises(ValueError, "indices", specdec.top_k_top_p_sampling_from_logits, logits(rng, 3, V), 2, 0.9, indices=bad, seed=1)
    _raises(TypeError, "indices", specdec.sampling_from_probs, p, indices=[1.0], seed=1)
    got = specdec.sampling_from_probs(p, indices=[2, 0], seed=4, offset=1)
    np.testing.assert_array_equal(got, specdec.sampling_from_probs(p[[2, 0]], seed=4, offset=1))


def test_read_only_inputs_are_accepted_and_read_only_outputs_refused(tmp_path):
    rng = np.random.default_rng(2)
    x = logits(rng, 4, 9)
    frozen = x.copy()
    frozen.setflags(write=False)
    from_bytes = np.frombuffer(x.tobytes(), dtype=np.float32).reshape(4, 9)
    mapped = np.memmap(tmp_path / "x.bin", dtype=np.float32, mode="w+", shape=(4, 9))
    mapped[:] = x
    mapped.flush()
    mapped = np.memmap(tmp_path / "x.bin", dtype=np.float32, mode="r", shape=(4, 9))
    for ro in (frozen, from_bytes, mapped):
        assert not ro.flags.writeable
        np.testing.assert_array_equal(specdec.argmax(ro), specdec.argmax(x))
        np.testing.assert_array_equal(specdec.softmax(ro, 0.7), specdec.softmax(x, 0.7))
        np.testing.assert_array_equal(specdec.topk(ro, 3)[1], specdec.topk(x, 3)[1])
        p = specdec.softmax(ro)
        np.testing.assert_array_equal(specdec.top_k_renorm_probs(p, 3), specdec.top_k_renorm_probs(specdec.softmax(x), 3))
    tokens, parents, counts = specdec.tree_batch([specdec.DraftTree.from_parents([3, 1, 4], [-1, 0, 0])])
    target = specdec.softmax(logits(rng, 3, V))
    want = specdec.verify_tree_batch(target, tokens, parents, node_counts=counts, seed=1)
    for a in (target, tokens, parents, counts):
        a.setflags(write=False)
    got = specdec.verify_tree_batch(target, tokens, parents, node_counts=counts, seed=1)
    np.testing.assert_array_equal(got.tokens, want.tokens)
    ids = np.frombuffer(np.array([5, 1, 5, 1, 5], np.int32).tobytes(), dtype=np.int32)
    want_tokens = specdec.propose_ngram([5, 1, 5, 1, 5], 2, min_ngram=1).token
    np.testing.assert_array_equal(specdec.propose_ngram(ids, 2, min_ngram=1).token, want_tokens)
    # Outputs must be writable: refused by name, never written.
    _raises(ValueError, "out", specdec.softmax, x, out=frozen)
    _raises(ValueError, "out", specdec.argmax, x, out=np.frombuffer(np.zeros(4, np.int32).tobytes(), dtype=np.int32))
    _raises(ValueError, "indices", specdec.topk, x, 2, indices=_readonly(np.zeros((4, 2), np.int32)))
    mask = specdec.DraftTree.chain(1, [2]).mask
    assert "writable" in _raises(ValueError, "out", mask, 0, out=_readonly(np.zeros((2, 2), bool)))
    np.testing.assert_array_equal(frozen, x)  # untouched


def test_dtype_errors_name_the_dtype_received():
    x = np.zeros((2, 3), np.float64)
    assert "logits: expected dtype float32 or float16 or bfloat16; got float64" in _raises(TypeError, "logits", specdec.argmax, x)
    assert "got int64" in _raises(TypeError, "probs", specdec.top_k_renorm_probs, x.astype(np.int64), 1)
    assert "got list" in _raises(TypeError, "logits", specdec.softmax, [[1.0, 2.0]])
    case = load("trees/sglang_verify_tree_greedy_upstream_test.json")["inputs"]
    links = [np.array(case[name], np.int64) for name in ("candidates", "retrive_index", "retrive_next_token",
                                                        "retrive_next_sibling", "target_predict")]
    bs, n = links[0].shape
    outputs = [np.zeros(bs * n, np.int32), np.zeros((bs, 4), np.int32), np.zeros(bs, np.int32)]
    for i, name in enumerate(("predicts", "accept_index", "accept_token_num")):
        args = list(outputs)
        args[i] = None
        assert "got NoneType" in _raises(TypeError, name, specdec.verify_tree_greedy, *args, *links)


def test_sizes_are_checked_before_anything_is_allocated():
    rng = np.random.default_rng(3)
    x = logits(rng, 2, V)
    _raises(ValueError, "k", specdec.topk, x, 2**40)
    _raises(ValueError, "k", specdec.topk, x, -1)
    _raises(ValueError, "max_spec_len", specdec.rejection_sample, **dict(_vllm_args(rng), max_spec_len=2**40))
    _raises(ValueError, "max_spec_len", specdec.rejection_sample, **dict(_vllm_args(rng), max_spec_len=-1))
    _raises(ValueError, "rows", specdec.philox_uniforms, 1, 0, 2**40, 1)
    _raises(ValueError, "count", specdec.philox_uniforms, 1, 0, 1, 2**40)
    _raises(ValueError, "rows", specdec.philox_uniforms, 1, 0, -1, 1)
    _raises(ValueError, "count", specdec.philox_uniforms, 1, 0, 2**30, 2**30)  # each fits; the product does not
    _raises(ValueError, "rows", specdec.philox_exponentials, 1, 0, -1, 1)
    _raises(ValueError, "count", specdec.philox_exponentials, 1, 0, 2**30, 2**30)
    tree = specdec.DraftTree.from_parents([1, 2, 3], [-1, 0, 1])
    _raises(ValueError, "prefix_length", tree.mask, 2**40)
    _raises(ValueError, "prefix_length", tree.mask, -1)
    parents = np.array([[-1, 0, 1]], np.int32)
    _raises(ValueError, "prefix_length", specdec.batch_tree_mask, parents, prefix_length=2**40)
    _raises(ValueError, "nodes", specdec.tree_batch, [tree], 2**40)
    # segment_packbits sized y by indptr before checking it against x
    assert "indptr gives segment 0 elements [0, 100000000)" in _raises(
        ValueError, "indptr", specdec.segment_packbits, np.ones(8, bool), [0, 100_000_000])


def test_zero_d_and_wrong_dimensions_are_named_not_index_errors():
    rng = np.random.default_rng(4)
    scalar = np.float32(1.0)
    zero_d = np.array(1.0, np.float32)
    for a in (scalar, zero_d):
        _raises(ValueError, "logits", specdec.argmax, a)
        _raises(ValueError, "logits", specdec.topk, a, 1)
        _raises(ValueError, "logits", specdec.logsumexp, a)
        _raises(ValueError, "probs", specdec.sampling_from_probs, a, seed=1)
        _raises(ValueError, "logits", specdec.apply_top_k_top_p, a, [1])
        _raises(ValueError, "tokens", specdec.verify_tree_batch, np.ones((1, V), np.float32), np.array(1, np.int32),
                np.array(-1, np.int32), greedy=True)
    _raises(ValueError, "target_probs", specdec.rejection_sample, **dict(_vllm_args(rng), target_probs=np.ones(5, np.float32)))
    _raises(ValueError, "draft_token_ids", specdec.chain_speculative_sampling, probs(rng, 2, 3, V), np.zeros(3, np.int32),
            probs(rng, 2, 4, V), seed=1)


def test_optional_arrays_of_another_shape_are_refused_not_ignored():
    rng = np.random.default_rng(5)
    x = logits(rng, 3, V)
    _raises(ValueError, "values", specdec.argmax, x, values=np.zeros((3, 1), np.float32))  # was ignored: 2-D
    _raises(ValueError, "uniforms", specdec.chain_speculative_sampling, probs(rng, 2, 3, V), ints(rng, (2, 3)),
            probs(rng, 2, 4, V), uniforms=np.array(0.5))  # was ignored: 0-d
    tree = specdec.DraftTree.from_parents([1, 2, 3], [-1, 0, 0])
    _raises(ValueError, "target_rows", specdec.verify_greedy, x, [tree], target_rows=np.zeros((1, 1), np.int64))
    _raises(ValueError, "draft_probs", specdec.verify_speculative, specdec.softmax(x), [tree], draft_probs=np.ones(V, np.float32),
            draft_rows=[np.array([-1, 0, 0])], seed=1)
    _raises(TypeError, "node_counts", specdec.verify_tree_batch, specdec.softmax(x), np.zeros((1, 3), np.int32),
            np.array([[-1, 0, 0]], np.int32), node_counts=[3], greedy=True)  # a list was read as absent


def test_errors_blame_the_argument_at_fault():
    rng = np.random.default_rng(6)
    # A decreasing cu_num_draft_tokens was blamed on the uniform_probs drawn from it.
    _raises(ValueError, "cu_num_draft_tokens", specdec.rejection_sample, **dict(_vllm_args(rng), cu_num_draft_tokens=[3, 2]))
    _raises(ValueError, "cu_num_draft_tokens", specdec.rejection_sample, **dict(_vllm_args(rng), cu_num_draft_tokens=[2, 9]))
    # _tokens said "token ids" of node counts and offsets: each conversion names its argument.
    assert "node_counts" in _raises(TypeError, "node_counts", specdec.batch_tree_mask_flashinfer, np.array([[-1, 0]], np.int32),
                                    [1.5])
    layer = specdec.DecoderLayer(decoder_weights(rng), heads=2, kv_heads=1, head_dim=4, capacity=8)
    layer.forward(np.ones((2, 8), np.float32), [0, 1])
    _raises(TypeError, "offsets", layer.keep, 1, [0.5])
    _raises(ValueError, "uniform_probs", specdec.rejection_sample, **dict(_vllm_args(rng), uniform_probs=np.full(5, 1.5),
                                                                          exponentials=np.ones((2, V), np.float32)))
    _raises(ValueError, "req_id", specdec.SuffixDecodingCache(4).speculate, "nobody", [1, 2])
    _raises(TypeError, "req_id", specdec.SuffixDecodingCache(4).start_request, ["unhashable"], [1, 2])


# ---- threads ------------------------------------------------------------------------------------------------------

def _hammer(work, threads=4, seconds=0.5):
    """Runs `work(i)` in a loop on `threads` threads; returns the exceptions they raised."""
    import time

    errors, stop = [], time.monotonic() + seconds

    def loop(i):
        while time.monotonic() < stop:
            try:
                work(i)
            except ValueError as e:  # a documented refusal (a step out of order) is fine
                errors.append(e)
            except Exception as e:  # noqa: BLE001
                errors.append(AssertionError(f"{type(e).__name__}: {e}"))

    pool = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not [e for e in errors if isinstance(e, AssertionError)], errors[:3]
    return errors


def test_threads_sharing_an_eagle2_tree_builder_do_not_crash():
    # Two threads calling begin / expand on one builder crashed the interpreter (the builder's state was
    # mutated with the GIL released and no lock).
    rng = np.random.default_rng(7)
    v, k, depth = 500, 4, 3
    builder = specdec.Eagle2TreeBuilder(top_k=k, depth=depth, total_tokens=8, batch=2)
    root = logits(rng, 2, v)
    frontier = logits(rng, 2 * k, v)

    def work(i):
        builder.begin(root, [1, 2])
        for _ in range(depth):
            builder.expand(frontier)
        for dynamic in builder.finish():
            dynamic.tree.validate(v)

    errors = _hammer(work, threads=2)
    for e in errors:  # interleaved steps are refused by the builder, by name
        assert "expansions" in str(e) or "before begin" in str(e) or "does not fit" in str(e), e
    builder.begin(root, [1, 2])
    for _ in range(depth):
        builder.expand(frontier)
    trees = builder.finish()
    assert len(trees) == 2 and all(t.tree.size == 8 for t in trees)
    for t in trees:
        t.tree.validate(v)


def test_threads_sharing_an_eagle2_batch_builder_do_not_crash():
    rng = np.random.default_rng(8)
    k, depth = 2, 2
    builder = specdec.Eagle2BatchBuilder(top_k=k, depth=depth, total_tokens=4, batch=2)
    root, frontier = logits(rng, 2, 50), logits(rng, 2 * k, 50)

    def work(i):
        builder.begin(root, [1, 2])
        for _ in range(depth):
            builder.expand(frontier)
        out = builder.finish()
        assert out.tokens.shape == (2, 4)

    _hammer(work, threads=2, seconds=0.3)


def test_threads_sharing_a_decoder_layer_do_not_crash():
    rng = np.random.default_rng(9)
    layer = specdec.DecoderLayer(decoder_weights(rng), heads=2, kv_heads=1, head_dim=4, capacity=64)

    def work(i):
        if i % 2:
            if layer.cache_size > 48:
                layer.crop(0)
            n = layer.cache_size
            layer.forward(logits(np.random.default_rng(i), 2, 8), [n, n + 1])
        else:
            keys = layer.keys()
            assert keys.shape[1] == 4
            layer.values()

    errors = _hammer(work, threads=4, seconds=0.3)
    for e in errors:  # a forward whose positions another thread's forward overtook: refused by name
        assert "position" in str(e) or "capacity" in str(e) or "cache" in str(e), e


def test_threads_sharing_a_suffix_cache_do_not_crash():
    cache = specdec.SuffixDecodingCache(8, max_cached_requests=4)

    def work(i):
        rid = (i, threading.get_ident())
        cache.start_request(rid, [1, 2, 3, i])
        cache.add_active_response(rid, [4, 5])
        cache.speculate(rid, [1, 2])
        cache.stop_request(rid)
        assert isinstance(cache.active_requests, list)

    _hammer(work, threads=4, seconds=0.3)


# ---- float arrays of the wrong dtype or shape: TypeError / ValueError naming the argument (issue 57) ---------

class FloatArg:
    """A float array argument of a public function or method of specdec's own modules (rows, tree, mask,
    sampling, blocks): `call(value)` calls it with `value` in place of argument `arg` (whose valid value is
    `valid`), everything else valid and made afresh. `converted`: the argument is converted to float32 (a
    block's weights, MoA's keys / values), so an integer dtype is accepted and only a non-real one is
    refused. `shapes`: wrong shapes of the same number of dimensions that the call must refuse (an extra
    dimension always is, unless `reshapes`: the argument may have any shape of the right size, as
    batch_tree_mask's out). `names`: what the message may name for it besides `arg` (a weight's
    checkpoint name). `signature_of`: whose parameters a message must not blame instead."""

    def __init__(self, qualname, signature_of, arg, valid, call, shapes=(), converted=False, names=(), reshapes=False):
        self.qualname, self.arg, self.valid, self.call, self.reshapes = qualname, arg, valid, call, reshapes
        self.shapes, self.converted, self.names = list(shapes), converted, (arg,) + tuple(names)
        self.params = [p for p in inspect.signature(signature_of).parameters if p != "self"]
        assert arg in self.params, f"{qualname}: {arg} is not a parameter"


def _float_args():
    rng = np.random.default_rng(57)
    out = []

    def add(qualname, signature_of, arg, valid, call, shapes=(), **kw):
        out.append(FloatArg(qualname, signature_of, arg, valid, call, shapes, **kw))

    x = logits(rng, 3, V)
    # specdec's row primitives
    for fn in (specdec.argmax, specdec.topk, specdec.softmax, specdec.log_softmax, specdec.logsumexp):
        extra = (2,) if fn is specdec.topk else ()
        add(fn.__name__, fn, "logits", x, lambda a, fn=fn, extra=extra: fn(a, *extra))
    add("argmax", specdec.argmax, "values", np.empty(3, np.float32), lambda a: specdec.argmax(x, values=a), [(4,)])
    add("topk", specdec.topk, "values", np.empty((3, 2), np.float32), lambda a: specdec.topk(x, 2, values=a), [(3, 3), (2, 2)])
    for fn in (specdec.softmax, specdec.log_softmax):
        add(fn.__name__, fn, "out", np.empty((3, V), np.float32), lambda a, fn=fn: fn(x, out=a), [(3, V + 1), (4, V)])
    add("logsumexp", specdec.logsumexp, "out", np.empty(3, np.float32), lambda a: specdec.logsumexp(x, out=a), [(2,)])
    # trees and masks
    tree = specdec.DraftTree.from_parents([3, 1, 4], [-1, 0, 0])
    add("DraftTree.mask", specdec.DraftTree.mask, "out", np.empty((3, 5), np.float32), lambda a: tree.mask(2, out=a), [(3, 6), (4, 5)])
    add("DraftTree.mask(additive)", specdec.DraftTree.mask, "out", np.empty((3, 5), np.float32),
        lambda a: tree.mask(2, additive=True, out=a), [(3, 4)])
    parents = np.array([[-1, 0, 0, 1], [-1, 0, 1, 2]], np.int32)
    add("batch_tree_mask(additive)", specdec.batch_tree_mask, "out", np.empty((2, 4, 6), np.float32),
        lambda a: specdec.batch_tree_mask(parents, layout="additive", prefix_length=2, out=a), [(2, 4, 7)], reshapes=True)
    # EAGLE-2
    for cls in (specdec.Eagle2TreeBuilder, specdec.Eagle2BatchBuilder):
        def begun(cls=cls):
            b = cls(2, 2, 4, batch=2)
            b.begin(np.zeros((2, V), np.float32), [1, 2])
            return b

        name = cls.__name__
        add(f"{name}.begin", cls.begin, "root_logits", logits(rng, 2, V), lambda a, cls=cls: cls(2, 2, 4, batch=2).begin(a, [1, 2]),
            [(3, V)])
        add(f"{name}.expand", cls.expand, "frontier_logits", logits(rng, 4, V), lambda a, begun=begun: begun().expand(a),
            [(3, V), (4, V + 1)])
        add(f"{name}.expand_dual", cls.expand_dual, "left_logits", logits(rng, 4, V),
            lambda a, begun=begun: begun().expand_dual(a, np.zeros((4, V), np.float32)), [(3, V), (4, V + 1)])
        add(f"{name}.expand_dual", cls.expand_dual, "right_logits", logits(rng, 4, V),
            lambda a, begun=begun: begun().expand_dual(np.zeros((4, V), np.float32), a), [(3, V), (4, V + 1)])
    # verification of specdec's trees
    p = probs(rng, 6, V)
    add("verify_greedy", specdec.verify_greedy, "logits", logits(rng, 6, V), lambda a: specdec.verify_greedy(a, [tree, tree]),
        [(5, V)])
    add("verify_speculative", specdec.verify_speculative, "target", p, lambda a: specdec.verify_speculative(a, [tree, tree], seed=1),
        [(5, V)])
    draft_rows = [np.array([-1, 0, 1]), np.array([-1, -1, 2])]
    add("verify_speculative", specdec.verify_speculative, "draft_probs", probs(rng, 3, V),
        lambda a: specdec.verify_speculative(p, [tree, tree], draft_probs=a, draft_rows=draft_rows, seed=1), [(3, V + 1)])
    tokens, tree_parents, counts = specdec.tree_batch([tree, tree])
    batch = dict(tokens=tokens, parents=tree_parents, node_counts=counts)
    add("verify_tree_batch", specdec.verify_tree_batch, "target", p, lambda a: specdec.verify_tree_batch(a, **batch, seed=1),
        [(5, V)])
    add("verify_tree_batch(greedy)", specdec.verify_tree_batch, "target", logits(rng, 6, V),
        lambda a: specdec.verify_tree_batch(a, **batch, greedy=True), [(5, V)])
    add("verify_tree_batch", specdec.verify_tree_batch, "draft_probs", probs(rng, 3, V),
        lambda a: specdec.verify_tree_batch(p, **batch, draft_probs=a, draft_rows=np.array([[-1, 0, 1], [-1, -1, 2]]), seed=1),
        [(3, V + 1)])
    add("verify_tree_batch", specdec.verify_tree_batch, "uniforms", rng.random((2, 5)),
        lambda a: specdec.verify_tree_batch(p, **batch, uniforms=a), [(3, 5)])
    # drafter blocks
    weights = decoder_weights(np.random.default_rng(1))

    def layer():
        d = specdec.DecoderLayer(weights, heads=2, kv_heads=1, head_dim=4, capacity=16)
        d.forward(np.ones((3, 8), np.float32), np.arange(3))
        return d

    add("DecoderLayer", specdec.DecoderLayer, "weights", weights["self_attn.q_proj.weight"],
        lambda a: specdec.DecoderLayer(dict(weights, **{"self_attn.q_proj.weight": a}), heads=2, kv_heads=1, head_dim=4),
        [(8, 9), (9, 8)], converted=True, names=("self_attn.q_proj.weight",))
    add("DecoderLayer.forward", specdec.DecoderLayer.forward, "x", logits(rng, 2, 8), lambda a: layer().forward(a, [3, 4]),
        [(2, 9)])
    add("DecoderLayer.forward", specdec.DecoderLayer.forward, "mask", np.zeros((2, 5), np.float32),
        lambda a: layer().forward(np.ones((2, 8), np.float32), [3, 4], mask=a), [(2, 6), (3, 5)])
    fuse = dict(tokens=[1, 5], feature=logits(rng, 2, 4), embed=logits(rng, V, 4), fc_weight=logits(rng, 4, 8),
                fc_bias=logits(rng, 4), out=np.empty((2, 4), np.float32))
    for arg, shape in (("feature", [(2, 5), (3, 4)]), ("embed", [(V, 5)]), ("fc_weight", [(4, 9), (5, 8)]), ("fc_bias", [(5,)]),
                       ("out", [(2, 5), (3, 4)])):
        add("eagle_fuse", specdec.eagle_fuse, arg, fuse[arg], lambda a, arg=arg: specdec.eagle_fuse(**dict(fuse, **{arg: a})), shape)

    out += _block_float_args(rng)
    return out


def _block_float_args(rng):
    """FloatArg cases of the golden-weight blocks, one function per block (each closure its own names)."""
    out = []

    def add(qualname, signature_of, arg, valid, call, shapes=(), **kw):
        out.append(FloatArg(qualname, signature_of, arg, valid, call, shapes, **kw))

    def eagle3_cases():
        case, weights = golden_weights("blocks/eagle3_layer_0.json")
        d = case["dims"]
        e, et = d["E"], d["E_t"]

        def block():
            return specdec.Eagle3Block(weights, heads=d["num_attention_heads"], kv_heads=d["num_key_value_heads"],
                                       head_dim=d["head_dim"], capacity=32)

        add("Eagle3Block.fuse", specdec.Eagle3Block.fuse, "taps", logits(rng, 2, 3 * et), lambda a: block().fuse(a),
            [(2, 3 * et + 1)])
        add("Eagle3Block.forward", specdec.Eagle3Block.forward, "hidden", logits(rng, 2, e),
            lambda a: block().forward([1, 2], a, [0, 1]), [(2, e + 1), (3, e)])
        add("Eagle3Block.forward", specdec.Eagle3Block.forward, "out", np.empty((2, e), np.float32),
            lambda a: block().forward([1, 2], np.ones((2, e), np.float32), [0, 1], out=a), [(2, e + 1), (3, e)])
        add("Eagle3Block.forward", specdec.Eagle3Block.forward, "mask", np.zeros((2, 2), np.float32),
            lambda a: block().forward([1, 2], np.ones((2, e), np.float32), [0, 1], mask=a), [(2, 3)])
        add("Eagle3Block.logits", specdec.Eagle3Block.logits, "h2", logits(rng, 2, e), lambda a: block().logits(a), [(2, e + 1)])

    def mtp_cases():
        case, weights = golden_weights("blocks/mtp_module_0.json")
        d = case["dims"]
        e = d["E"]

        def module():
            return specdec.MtpModule(weights, prefix="layers.0.", heads=d["num_attention_heads"], kv_heads=d["num_key_value_heads"],
                                     head_dim=d["head_dim"], capacity=32)

        for arg in ("hidden", "out", "projected"):
            def call(a, arg=arg):
                kw = {"hidden": np.ones((2, e), np.float32), arg: a}
                return module().forward([1, 2], kw.pop("hidden"), [0, 1], **kw)

            add("MtpModule.forward", specdec.MtpModule.forward, arg, np.empty((2, e), np.float32), call, [(2, e + 1), (3, e)])
        add("MtpModule.logits", specdec.MtpModule.logits, "o", logits(rng, 2, e), lambda a: module().logits(a), [(2, e + 1)])

    def jakiro_cases():
        case, weights = golden_weights("blocks/jakiro_layer_0.json")
        d = case["dims"]
        add("JakiroLayer.forward", specdec.JakiroLayer.forward, "feature", logits(rng, 2, d["E"]),
            lambda a: specdec.JakiroLayer(weights, heads=d["num_attention_heads"], kv_heads=d["num_key_value_heads"],
                                          head_dim=d["head_dim"], capacity=8).forward([1, 2], a, [0, 1]),
            [(2, d["E"] + 1), (3, d["E"])])

    def amphista_cases():
        case, weights = golden_weights("blocks/amphista_staged_0.json")
        d = case["dims"]
        e = d["E"]

        def heads():
            return specdec.AmphistaHeads(weights, heads=d["num_attention_heads"], kv_heads=d["num_key_value_heads"],
                                         head_dim=d["head_dim"], capacity=8)

        add("AmphistaHeads.forward", specdec.AmphistaHeads.forward, "feature", logits(rng, 2, e),
            lambda a: heads().forward(a, np.ones((2, e), np.float32), [0, 1]), [(2, e + 1)])
        add("AmphistaHeads.forward", specdec.AmphistaHeads.forward, "embedding", logits(rng, 2, e),
            lambda a: heads().forward(np.ones((2, e), np.float32), a, [0, 1]), [(2, e + 1), (3, e)])

    def moa_cases():
        case, weights = golden_weights("blocks/moa_pipeline_inf_0.json")
        dims = case["dims"]
        target = dims["target"]
        layers, width = target["num_layers"], target["num_key_value_heads"] * target["head_dim"]
        e = weights["model.embed_tokens.weight"].shape[1]

        def part(q):
            return dict(heads=q["num_attention_heads"], kv_heads=q["num_key_value_heads"], head_dim=q["head_dim"],
                        rope_theta=q.get("rope_theta", target["rope_theta"]))

        def drafter(primed=False):
            m = specdec.MoaDrafter(weights, lsa=part(dims["lsa"]), sa=part(dims["sa"]), ca=part(dims["ca"]),
                                   target_layers=layers, target_head_dim=target["head_dim"], capacity=16)
            if primed:
                m.add_verified([kv] * layers, [kv] * layers, 0, 2)
            return m

        kv = np.ones((2, width), np.float32)
        add("MoaDrafter.add_verified", specdec.MoaDrafter.add_verified, "keys", logits(rng, 2, width),
            lambda a: drafter().add_verified([kv] * (layers - 1) + [a], [kv] * layers, 0, 2), [(2, width + 1)], converted=True)
        add("MoaDrafter.add_verified", specdec.MoaDrafter.add_verified, "values", logits(rng, 2, width),
            lambda a: drafter().add_verified([kv] * layers, [a] + [kv] * (layers - 1), 0, 2), [(2, width + 1)], converted=True)
        add("MoaDrafter.forward", specdec.MoaDrafter.forward, "x", logits(rng, 2, e), lambda a: drafter(True).forward(a, [0, 1]),
            [(2, e + 1)])

    for cases in (eagle3_cases, mtp_cases, jakiro_cases, amphista_cases, moa_cases):
        cases()
    return out


FLOAT_ARGS = _float_args()
_FLOAT_IDS = [f"{f.qualname}:{f.arg}" for f in FLOAT_ARGS]


def _blamed(message, case):
    """Whether `message` blames `case`'s argument: it names it, and of the call's parameters named in it
    the first is that one (a message that opens with another argument's name blames that one)."""
    def first(word):
        found = re.search(rf"(?<![A-Za-z0-9_.]){re.escape(word)}(?![A-Za-z0-9_])", message)
        return found.start() if found else None

    mine = [at for at in map(first, case.names) if at is not None]
    others = [at for at in map(first, [p for p in case.params if p not in case.names]) if at is not None]
    return bool(mine) and (not others or min(mine) <= min(others))


@pytest.mark.parametrize("case", FLOAT_ARGS, ids=_FLOAT_IDS)
def test_a_float_array_of_another_dtype_is_a_type_error_naming_it_and_its_dtype(case):
    case.call(case.valid.copy())  # the valid call succeeds
    for dtype in ((np.complex64,) if case.converted else (np.int8, np.complex64)):
        with np.errstate(all="ignore"):
            bad = case.valid.astype(dtype)
        with pytest.raises(TypeError) as got:
            case.call(bad)
        message = str(got.value)
        assert _blamed(message, case) and np.dtype(dtype).name in message, f"{case.qualname}({case.arg}={dtype.__name__}): {message}"
    if case.converted:  # an integer array converts
        case.call(np.ones(case.valid.shape, np.int8))


@pytest.mark.parametrize("case", FLOAT_ARGS, ids=_FLOAT_IDS)
def test_a_float_array_of_another_shape_is_a_value_error_naming_it(case):
    for shape in case.shapes + ([] if case.reshapes else [case.valid.shape + (1,)]):
        with pytest.raises(ValueError) as got:
            case.call(np.resize(case.valid, shape))  # the valid entries, repeated or cut: rows stay distributions
        message = str(got.value)
        assert _blamed(message, case), f"{case.qualname}({case.arg} of shape {shape}): {message}"
