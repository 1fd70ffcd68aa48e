# SPDX-License-Identifier: Apache-2.0
"""DFlash's block drafter from Python: z-lab/dflash's recorded drafter calls (tools/goldens/dflash.py, the
reference run as-is in float64) replayed on one session as tests/conformance/blocks_dflash.hpp replays
them on the C++ side, and the faults it names, each leaving the context cache as it was."""
import numpy as np
import pytest

import specdec


def weights_of(case):
    return {name: np.asarray(p["data"]).reshape(p["shape"]) for name, p in case["params"].items()}


def drafter_of(case, capacity=256, weights=None, **overrides):
    d = case["dims"]
    kw = dict(heads=d["heads"], kv_heads=d["kv_heads"], head_dim=d["head_dim"], rms_eps=d["rms_norm_eps"],
              rope_theta=d["rope_theta"], block_size=d["block_size"], mask_token=d["mask_token"], capacity=capacity)
    kw.update(overrides)
    return specdec.DFlashDrafter(weights_of(case) if weights is None else weights, **kw)


def step_inputs(case, step):
    """A recorded step's context features [n x K E], its n context positions and the block's positions."""
    d = case["dims"]
    features = np.asarray(step["context_features"]["data"], dtype=np.float32).reshape(-1, len(d["target_layer_ids"]) * d["E"])
    positions = np.asarray(step["position_ids"]["data"], dtype=np.int64)
    n = features.shape[0]
    assert positions.shape[0] == n + d["block_size"]
    return features, positions[:n], positions[n:]


@pytest.mark.parametrize("index", range(4))
def test_dflash_drafter_replays_the_recorded_drafter_calls(golden, index):
    case = golden(f"blocks/dflash_{index}.json")
    d, outputs = case["dims"], case["outputs"]
    for row in outputs["target_layer_ids"]:
        assert specdec.dflash_target_layer_ids(row["target_layers"], row["draft_layers"]) == row["ids"]
    drafter = drafter_of(case)
    assert (drafter.hidden, drafter.vocab, drafter.layers, drafter.feature_layers, drafter.block_size, drafter.mask_token) == (
        d["E"], d["vocab"], d["draft_layers"], len(d["target_layer_ids"]), d["block_size"], d["mask_token"])
    for s, step in enumerate(outputs["steps"]):
        assert drafter.cache_size == step["cached_before"], f"steps[{s}]"
        features, context_positions, block_positions = step_inputs(case, step)
        drafter.append_context(features, context_positions)
        cached = drafter.cache_size
        assert cached == step["cached_before"] + features.shape[0]
        out = drafter.forward(step["block_ids"]["data"], block_positions)
        assert drafter.cache_size == cached, f"steps[{s}]: forward left block rows in the cache"
        np.testing.assert_allclose(out.ravel(), step["out"]["data"], rtol=1e-5, atol=1e-5, err_msg=f"steps[{s}].out")
        logits = drafter.logits(out[1:])
        np.testing.assert_allclose(logits.ravel(), step["logits"]["data"], rtol=1e-5, atol=1e-5, err_msg=f"steps[{s}].logits")
        assert np.argmax(logits, axis=1).tolist() == step["draft"]["data"], f"steps[{s}].draft"


def test_dflash_drafter_rewinds_and_writes_into_given_outputs(golden):
    case = golden("blocks/dflash_2.json")
    steps = case["outputs"]["steps"]
    drafter = drafter_of(case)
    for step in steps[:2]:
        features, context_positions, _ = step_inputs(case, step)
        drafter.append_context(features, context_positions)
    # Cropped back to the second step's context and fed it again: the recorded block once more.
    drafter.crop(steps[1]["cached_before"])
    assert drafter.cache_size == steps[1]["cached_before"]
    features, context_positions, block_positions = step_inputs(case, steps[1])
    drafter.append_context(features, context_positions)
    e, v, bs = drafter.hidden, drafter.vocab, drafter.block_size
    out = np.full((bs, e), np.nan, dtype=np.float32)
    assert drafter.forward(np.asarray(steps[1]["block_ids"]["data"], dtype=np.int32), block_positions, out=out) is out
    np.testing.assert_allclose(out.ravel(), steps[1]["out"]["data"], rtol=1e-5, atol=1e-5)
    logits = np.full((bs - 1, v), np.nan, dtype=np.float32)
    assert drafter.logits(out[1:], out=logits) is logits
    assert np.argmax(logits, axis=1).tolist() == steps[1]["draft"]["data"]
    with pytest.raises(ValueError, match="crop"):
        drafter.crop(drafter.cache_size + 1)


def test_dflash_drafter_names_what_does_not_fit_and_keeps_its_cache(golden):
    case = golden("blocks/dflash_0.json")
    d = case["dims"]
    step = case["outputs"]["steps"][0]
    features, context_positions, block_positions = step_inputs(case, step)
    n, bs, e = features.shape[0], d["block_size"], d["E"]
    # Room for the prompt's context and one block beside it, no more.
    drafter = drafter_of(case, capacity=n + bs)
    drafter.append_context(features, context_positions)
    assert drafter.cache_size == n
    width = rf"features: expected {e} columns \(K E: fc.weight's columns\); got shape \(1, {e + 1}\)"
    with pytest.raises(ValueError, match=width):
        drafter.append_context(np.zeros((1, e + 1), dtype=np.float32), [n])
    assert drafter.cache_size == n
    with pytest.raises(ValueError, match=r"positions: expected 1 \(one per token, as features has\); got 2"):
        drafter.append_context(features[:1], [n, n + 1])
    assert drafter.cache_size == n
    room = rf"new rows do not fit the KV cache \(it holds {n} of its capacity {n + bs};"
    with pytest.raises(ValueError, match=rf"features: {bs + 1} {room}"):
        drafter.append_context(np.zeros((bs + 1, e), dtype=np.float32), np.arange(n, n + bs + 1))
    assert drafter.cache_size == n
    with pytest.raises(ValueError, match=rf"tokens: {bs + 1} {room}"):
        drafter.forward(np.zeros(bs + 1, dtype=np.int32), np.arange(n, n + bs + 1))
    assert drafter.cache_size == n
    with pytest.raises(ValueError, match="tokens entry 1 = 96 is out of range"):
        drafter.forward([0, d["vocab"]], block_positions[:2])
    with pytest.raises(ValueError, match=r"positions: expected 2 \(one per token, as tokens has\); got 3"):
        drafter.forward([0, 1], block_positions[:3])
    with pytest.raises(ValueError, match=r"tokens: expected at least one token"):
        drafter.forward([], [])
    with pytest.raises(ValueError, match=rf"out: expected shape \(2, {e}\); got \(2, {e - 1}\)"):
        drafter.forward([0, 1], block_positions[:2], out=np.zeros((2, e - 1), dtype=np.float32))
    with pytest.raises(TypeError, match="features"):
        drafter.append_context(features.astype(np.float64), context_positions)
    with pytest.raises(ValueError, match=rf"normed: expected {e} columns"):
        drafter.logits(np.zeros((2, e + 1), dtype=np.float32))
    assert drafter.cache_size == n
    # The refused calls left the context's keys and values as they were: the recorded block.
    out = drafter.forward(step["block_ids"]["data"], block_positions)
    np.testing.assert_allclose(out.ravel(), step["out"]["data"], rtol=1e-5, atol=1e-5)
    assert drafter.cache_size == n


def test_dflash_drafter_refuses_weights_and_shapes_by_name(golden):
    case = golden("blocks/dflash_1.json")
    d = case["dims"]
    weights = weights_of(case)
    with pytest.raises(ValueError, match=r"mask_token: expected an id of the target's vocabulary, in \[0, 80\); got 80"):
        drafter_of(case, mask_token=d["vocab"])
    with pytest.raises(ValueError, match="rms_eps: expected a positive finite epsilon"):
        drafter_of(case, rms_eps=0.0)
    with pytest.raises(ValueError, match="block_size = 1"):
        drafter_of(case, block_size=1)
    with pytest.raises(ValueError, match="layers.0.self_attn.q_proj.weight has shape"):
        drafter_of(case, heads=d["heads"] * 2)
    for name in ("layers.1.self_attn.k_norm.weight", "lm_head.weight", "hidden_norm.weight"):
        with pytest.raises(ValueError, match=f'named "{name}"'):
            drafter_of(case, weights={k: w for k, w in weights.items() if k != name})
    # A layer past the others' names the first one missing in between.
    with pytest.raises(ValueError, match='named "layers.2.input_layernorm.weight"'):
        drafter_of(case, weights={**weights, "layers.3.input_layernorm.weight": weights["norm.weight"]})
    with pytest.raises(ValueError, match="fc.weight has 95 columns; expected K E, a multiple of E = 32"):
        drafter_of(case, weights={**weights, "fc.weight": weights["fc.weight"][:, 1:]})
    with pytest.raises(ValueError, match="expected the drafter's layers"):
        drafter_of(case, weights={k: w for k, w in weights.items() if not k.startswith("layers.")})
    with pytest.raises(TypeError, match="mask_token"):
        drafter_of(case, mask_token=1.0)


def test_dflash_target_layer_ids_follow_the_references_rounding():
    assert specdec.dflash_target_layer_ids(36, 5) == [1, 9, 17, 25, 33]
    assert specdec.dflash_target_layer_ids(6, 1) == [3]
    with pytest.raises(ValueError, match="target_layers = 3, draft_layers = 2"):
        specdec.dflash_target_layer_ids(3, 2)
    with pytest.raises(ValueError, match="draft_layers = 0"):
        specdec.dflash_target_layer_ids(36, 0)
    with pytest.raises(TypeError, match="draft_layers"):
        specdec.dflash_target_layer_ids(36, 2.0)
