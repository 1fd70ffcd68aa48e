# SPDX-License-Identifier: Apache-2.0
"""test_contract.py's promise about bad input for DFlash's block drafter, by that file's own fuzzer and
float-array checks (imported, not copied; test_contract.py is past the length its targets could grow in):
every hostile argument a TypeError or ValueError naming a parameter, never a crash or another error."""
import numpy as np
import pytest

import specdec
import test_contract as contract


def _drafter_targets():
    case, weights = contract.golden_weights("blocks/dflash_0.json")
    d = case["dims"]
    e, v, bs = d["E"], d["vocab"], d["block_size"]
    shape = dict(heads=d["heads"], kv_heads=d["kv_heads"], head_dim=d["head_dim"], mask_token=d["mask_token"], block_size=bs,
                 rms_eps=d["rms_norm_eps"], rope_theta=d["rope_theta"], capacity=16)

    def primed():
        drafter = specdec.DFlashDrafter(weights, **shape)
        drafter.append_context(np.ones((3, e), np.float32), np.arange(3))
        return drafter

    def drafts_in_vocabulary(result, kw):
        contract.tokens_in(np.argmax(result, axis=1), 0, v)

    Target, cls = contract.Target, specdec.DFlashDrafter
    targets = [
        Target("DFlashDrafter", cls, lambda kw: cls(**kw), lambda r: dict(weights=weights, **shape),
               dict(heads="int", kv_heads="int", head_dim="int", mask_token="int", block_size="int", rms_eps="float",
                    rope_theta="float", capacity="size")),
        Target("DFlashDrafter.append_context", cls.append_context, lambda kw: primed().append_context(**kw),
               lambda r: dict(features=contract.logits(r, 2, e), positions=np.array([3, 4])),
               dict(features="f32", positions="i64")),
        Target("DFlashDrafter.forward", cls.forward, lambda kw: primed().forward(**kw),
               lambda r: dict(tokens=contract.ints(r, bs, high=v), positions=np.arange(3, 3 + bs), out=np.empty((bs, e), np.float32)),
               dict(tokens="i32", positions="i64", out="f32out")),
        Target("DFlashDrafter.logits", cls.logits, lambda kw: primed().logits(**kw),
               lambda r: dict(normed=contract.logits(r, 2, e), out=np.empty((2, v), np.float32)),
               dict(normed="f32", out="f32out"), check=drafts_in_vocabulary),
        Target("DFlashDrafter.crop", cls.crop, lambda kw: primed().crop(**kw), lambda r: dict(n=1), dict(n="int")),
        Target("dflash_target_layer_ids", specdec.dflash_target_layer_ids, lambda kw: specdec.dflash_target_layer_ids(**kw),
               lambda r: dict(target_layers=36, draft_layers=5), dict(target_layers="int", draft_layers="int"),
               check=lambda ids, kw: contract.tokens_in(ids, 0, kw["target_layers"])),
    ]

    def call_forward(arg):
        def call(a):
            kw = {"out": np.empty((bs, e), np.float32), arg: a}
            return primed().forward(np.zeros(bs, np.int32), np.arange(3, 3 + bs), **kw)
        return call

    rng = np.random.default_rng(58)
    FloatArg = contract.FloatArg
    # features of another row count than positions is a tie of two arguments, blamed on positions (the
    # second, as DecoderLayer.forward's x and positions): not among its wrong shapes.
    floats = [
        FloatArg("DFlashDrafter.append_context", cls.append_context, "features", contract.logits(rng, 2, e),
                 lambda a: primed().append_context(a, [3, 4]), [(2, e + 1)]),
        FloatArg("DFlashDrafter.forward", cls.forward, "out", np.empty((bs, e), np.float32), call_forward("out"),
                 [(bs, e + 1), (bs + 1, e)]),
        FloatArg("DFlashDrafter.logits", cls.logits, "normed", contract.logits(rng, 2, e), lambda a: primed().logits(a),
                 [(2, e + 1)]),
        FloatArg("DFlashDrafter.logits", cls.logits, "out", np.empty((2, v), np.float32),
                 lambda a: primed().logits(np.ones((2, e), np.float32), out=a), [(2, v + 1), (3, v)]),
    ]
    for name in ("fc.weight", "layers.0.self_attn.q_norm.weight", "embed_tokens.weight"):
        def construct(a, name=name):
            return specdec.DFlashDrafter({**weights, name: a}, **shape)

        w = weights[name].astype(np.float32)
        floats.append(FloatArg("DFlashDrafter", cls, "weights", w, construct, [w.shape[:-1] + (w.shape[-1] + 1,)],
                               converted=True, names=(name,)))
    return targets, floats


TARGETS, FLOAT_ARGS = _drafter_targets()


@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
def test_hostile_arguments_to_the_dflash_drafter_are_refused_by_name(target, monkeypatch):
    # test_contract seeds each target by its place in its own list: these go after its targets.
    monkeypatch.setattr(contract, "TARGETS", contract.TARGETS + TARGETS)
    contract.test_hostile_arguments_are_refused_by_name(target)


@pytest.mark.parametrize("case", FLOAT_ARGS, ids=[f"{f.qualname}:{f.arg}:{f.names[-1]}" for f in FLOAT_ARGS])
def test_dflash_float_arrays_of_another_dtype_or_shape_are_refused_by_name(case):
    contract.test_a_float_array_of_another_dtype_is_a_type_error_naming_it_and_its_dtype(case)
    contract.test_a_float_array_of_another_shape_is_a_value_error_naming_it(case)
