# SPDX-License-Identifier: Apache-2.0
"""The drafter blocks from Python: the decoder layer against the recorded Llama layers of the C++ tests
(HF LlamaDecoderLayer math in float64, as MoA's self-attention uses it), through its cache and under a
tree mask."""
import numpy as np
import pytest

import specdec


def layer_of(case, capacity=64):
    sa = case["dims"]["sa"]
    weights = {name: np.asarray(p["data"], dtype=np.float64).reshape(p["shape"]) for name, p in case["params"].items()}
    return specdec.DecoderLayer(weights, prefix="self_attention.", heads=sa["num_attention_heads"],
                                kv_heads=sa["num_key_value_heads"], head_dim=sa["head_dim"],
                                rms_eps=case["dims"]["target"]["rms_norm_eps"],
                                rope_theta=case["dims"]["target"]["rope_theta"], capacity=capacity), sa


@pytest.mark.parametrize("index", range(4))
def test_decoder_layer_equals_the_recorded_llama_layer(golden, index):
    case = golden(f"blocks/moa_sa_{index}.json")
    layer, sa = layer_of(case)
    x_in = case["inputs"]["x"]
    t, e = x_in["shape"][1], x_in["shape"][2]
    x = np.asarray(x_in["data"], dtype=np.float32).reshape(t, e)
    positions = np.asarray(case["inputs"]["position_ids"]["data"], dtype=np.int64)
    got = layer.forward(x.copy(), positions)
    want = np.asarray(case["outputs"]["y"]["data"]).reshape(t, e)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    kv, hd = sa["num_key_value_heads"], sa["head_dim"]
    present_k = np.asarray(case["outputs"]["present_k"]["data"]).reshape(kv, t, hd).transpose(1, 0, 2).reshape(t, kv * hd)
    present_v = np.asarray(case["outputs"]["present_v"]["data"]).reshape(kv, t, hd).transpose(1, 0, 2).reshape(t, kv * hd)
    np.testing.assert_allclose(layer.keys(), present_k, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer.values(), present_v, rtol=1e-5, atol=1e-5)
    # One row at a time through the cache: the same rows.
    step, _ = layer_of(case)
    rows = [step.forward(x[i:i + 1].copy(), positions[i:i + 1]) for i in range(t)]
    np.testing.assert_allclose(np.concatenate(rows), want, rtol=1e-5, atol=1e-5)
    assert step.cache_size == t


def test_a_tree_pass_equals_each_of_its_paths(golden):
    case = golden("blocks/moa_sa_0.json")
    e = case["dims"]["sa"]["hidden"]
    rng = np.random.default_rng(3)
    prefix = rng.uniform(-1, 1, (2, e)).astype(np.float32)
    nodes = rng.uniform(-1, 1, (5, e)).astype(np.float32)
    tree = specdec.DraftTree.from_parents([1, 2, 3, 4, 5], [-1, 0, 0, 1, 2])
    layer, _ = layer_of(case)
    layer.forward(prefix.copy(), np.arange(2))
    got = layer.forward(nodes.copy(), tree.positions(2), mask=tree.mask(2))
    assert layer.cache_size == 7
    for path in ([0, 1, 3], [0, 2, 4]):
        chain, _ = layer_of(case)
        chain.forward(prefix.copy(), np.arange(2))
        want = chain.forward(nodes[path].copy(), np.arange(2, 2 + len(path)))
        np.testing.assert_allclose(got[path], want, rtol=1e-5, atol=1e-5)
    # Keep the accepted path 0 -> 2 -> 4: the cache then holds the prefix and those rows, in order.
    keys = layer.keys()
    layer.keep(2, [0, 2, 4])
    np.testing.assert_array_equal(layer.keys(), keys[[0, 1, 2, 4, 6]])
    additive = np.where(tree.mask(2), 0, -np.inf).astype(np.float32)
    again, _ = layer_of(case)
    again.forward(prefix.copy(), np.arange(2))
    np.testing.assert_allclose(again.forward(nodes.copy(), tree.positions(2), mask=additive), got, rtol=1e-6, atol=1e-6)


def test_decoder_layer_names_what_does_not_fit(golden):
    case = golden("blocks/moa_sa_0.json")
    weights = {name: np.asarray(p["data"], dtype=np.float32).reshape(p["shape"]) for name, p in case["params"].items()}
    with pytest.raises(ValueError, match="self_attention.self_attn.q_proj.weight has shape"):
        specdec.DecoderLayer(weights, prefix="self_attention.", heads=8, kv_heads=2, head_dim=4)
    del weights["self_attention.mlp.up_proj.weight"]
    with pytest.raises(ValueError, match='named "self_attention.mlp.up_proj.weight"'):
        specdec.DecoderLayer(weights, prefix="self_attention.", heads=4, kv_heads=2, head_dim=4)


def test_eagle_fuse_is_the_embedding_and_feature_through_fc():
    rng = np.random.default_rng(4)
    v, e, t = 50, 16, 5
    embed = rng.standard_normal((v, e)).astype(np.float32)
    feature = rng.standard_normal((t, e)).astype(np.float32)
    weight = (rng.standard_normal((e, 2 * e)) * 0.2).astype(np.float32)
    bias = rng.standard_normal(e).astype(np.float32)
    tokens = np.array([3, 0, 49, 3, 17])
    got = specdec.eagle_fuse(tokens, feature, embed, weight, bias)
    want = np.concatenate([embed[tokens], feature], axis=1).astype(np.float64) @ weight.T.astype(np.float64) + bias
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="tokens entry 0 = 50 is out of range"):
        specdec.eagle_fuse([50], feature[:1], embed, weight, bias)
    with pytest.raises(ValueError, match=r"fc_weight: expected shape \[E x 2E\]; got \(16, 16\)"):
        specdec.eagle_fuse(tokens, feature, embed, weight[:, :e].copy(), bias)
    # E is fc_weight's rows: the argument that differs from it is the one named.
    with pytest.raises(ValueError, match=r"embed: expected 16 columns \(E: fc_weight's rows\); got shape \(50, 15\)"):
        specdec.eagle_fuse(tokens, feature, embed[:, 1:].copy(), weight, bias)


@pytest.mark.parametrize("index", range(4))
def test_eagle3_block_replays_eagle3s_recorded_draft(golden, index):
    # SafeAILab's Model run through topK_genrate (float64): the prefill over the taps, then tree steps
    # whose hidden rows come from the previous step's h2; fused, h2, logits and the mapped argmax.
    case = golden(f"blocks/eagle3_layer_{index}.json")
    d = case["dims"]
    weights = {name: np.asarray(p["data"]).reshape(p["shape"]) for name, p in case["params"].items()}
    d2t = weights["d2t"].astype(np.int64)
    block = specdec.Eagle3Block(weights, heads=d["num_attention_heads"], kv_heads=d["num_key_value_heads"],
                                head_dim=d["head_dim"], rms_eps=d["rms_norm_eps"], rope_theta=d["rope_theta"], capacity=256)
    taps = np.asarray(case["inputs"]["taps"]["data"], dtype=np.float32).reshape(case["inputs"]["taps"]["shape"])
    previous = None
    for s, step in enumerate(case["outputs"]["steps"]):
        rows = step["input_ids"]["shape"][0]
        if s == 0:
            hidden = block.fuse(taps)
            np.testing.assert_allclose(hidden.ravel(), step["fused"]["data"], rtol=1e-5, atol=1e-5)
        else:
            hidden = previous[np.asarray(step["hidden_from_rows"]["data"], dtype=np.int64)]
        allowed = np.asarray(step["allowed"]["data"], dtype=np.uint8).reshape(rows, -1).astype(bool)
        h2 = block.forward(step["input_ids"]["data"], hidden, step["position_ids"]["data"], mask=allowed)
        np.testing.assert_allclose(h2.ravel(), step["h2"]["data"], rtol=1e-5, atol=1e-5)
        logits = block.logits(h2[rows - 1:] if s == 0 else h2)
        np.testing.assert_allclose(logits.ravel(), step["logits"]["data"], rtol=1e-5, atol=1e-5)
        mapped = np.argmax(logits, axis=1) + d2t[np.argmax(logits, axis=1)]
        assert mapped.tolist() == step["argmax_target_ids"]["data"]
        previous = h2
    assert block.cache_size == sum(step["input_ids"]["shape"][0] for step in case["outputs"]["steps"])


@pytest.mark.parametrize("index", range(4))
def test_mtp_module_replays_the_recorded_chains(golden, index):
    # vLLM's DeepSeekMultiTokenPredictorLayer with a Llama layer (float64): each step's projection, output,
    # logits and argmax; the next step feeds back the last row's o.
    case = golden(f"blocks/mtp_module_{index}.json")
    d = case["dims"]
    weights = {name: np.asarray(p["data"]).reshape(p["shape"]) for name, p in case["params"].items()}
    modules = [specdec.MtpModule(weights, prefix=f"layers.{m}.", heads=d["num_attention_heads"],
                                 kv_heads=d["num_key_value_heads"], head_dim=d["head_dim"], rms_eps=d["rms_norm_eps"],
                                 rope_theta=d["rope_theta"], zero_embedding_at_position_0=d["zero_embedding_at_position_0"],
                                 capacity=64) for m in range(d["modules"])]
    steps = case["outputs"]["steps"]
    hidden = np.asarray(steps[0]["hidden_in"]["data"], dtype=np.float32).reshape(steps[0]["hidden_in"]["shape"])
    for s, step in enumerate(steps):
        module = modules[s % d["modules"]]
        assert step["module"] == s % d["modules"]
        rows = step["input_ids"]["shape"][0]
        projected = np.empty((rows, d["E"]), dtype=np.float32)
        o = module.forward(step["input_ids"]["data"], hidden, step["position_ids"]["data"], projected=projected)
        np.testing.assert_allclose(projected.ravel(), step["x"]["data"], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(o.ravel(), step["o"]["data"], rtol=1e-5, atol=1e-5)
        logits = module.logits(o)
        np.testing.assert_allclose(logits.ravel(), step["logits"]["data"], rtol=1e-5, atol=1e-5)
        assert np.argmax(logits, axis=1).tolist() == step["argmax"]["data"]
        hidden = np.repeat(o[-1:], rows if s + 1 == len(steps) else steps[s + 1]["input_ids"]["shape"][0], axis=0)


@pytest.mark.parametrize("index", range(4))
def test_jakiro_layer_equals_jakiros_reference_module(golden, index):
    # jakiro/model/cnets.py's Model.forward (one layer, float64), plain and penultimate (contrastive).
    case = golden(f"blocks/jakiro_layer_{index}.json")
    d, inputs = case["dims"], case["inputs"]
    weights = {name: np.asarray(p["data"]).reshape(p["shape"]) for name, p in case["params"].items()}
    layer = specdec.JakiroLayer(weights, heads=d["num_attention_heads"], kv_heads=d["num_key_value_heads"],
                                head_dim=d["head_dim"], rms_eps=d["rms_norm_eps"], rope_theta=d["rope_theta"], capacity=16)
    tokens = np.asarray(inputs["input_ids"]["data"]).ravel()
    feature = np.asarray(inputs["target_hidden"]["data"], dtype=np.float32).reshape(len(tokens), d["E"])
    fused = specdec.eagle_fuse(tokens, feature, weights["embed_tokens.weight"].astype(np.float32),
                               weights["fc.weight"].astype(np.float32), weights["fc.bias"].astype(np.float32))
    np.testing.assert_allclose(fused.ravel(), case["outputs"]["fused"]["data"], rtol=1e-5, atol=1e-5)
    got = layer.forward(tokens, feature, np.arange(len(tokens)), contrastive=inputs["penult_forward"])
    got = np.concatenate(got) if inputs["penult_forward"] else got
    np.testing.assert_allclose(got.ravel(), case["outputs"]["out"]["data"], rtol=1e-5, atol=1e-5)
    assert layer.cache_size == len(tokens)


@pytest.mark.parametrize("index", range(4))
def test_amphista_heads_equal_the_recorded_pipeline(golden, index):
    # The reconstruction behind the goldens feeds ceil(K/2) heads from stage 1.
    case = golden(f"blocks/amphista_staged_{index}.json")
    d, inputs, want = case["dims"], case["inputs"], case["outputs"]
    weights = {name: np.asarray(p["data"]).reshape(p["shape"]) for name, p in case["params"].items()}
    k = d["K_heads"]
    heads = specdec.AmphistaHeads(weights, heads=d["num_attention_heads"], kv_heads=d["num_key_value_heads"],
                                  head_dim=d["head_dim"], stage1_heads=(k + 1) // 2, rms_eps=d["rms_norm_eps"],
                                  rope_theta=d["rope_theta"], capacity=16)
    e = d["E"]
    feature = np.asarray(inputs["h"]["data"], dtype=np.float32).reshape(-1, e)
    embedding = np.asarray(inputs["e"]["data"], dtype=np.float32).reshape(-1, e)
    got = heads.forward(feature, embedding, np.asarray(inputs["position_ids"]["data"]).ravel(), intermediates=True)
    for mine, theirs in (("s1", "stage1_out"), ("s2", "stage2_out"), ("z", "z"), ("u", "u"), ("o", "o"), ("logits", "logits")):
        np.testing.assert_allclose(got[mine].ravel(), want[theirs]["data"], rtol=1e-5, atol=1e-5, err_msg=mine)
    assert heads.cache_size == feature.shape[0]


def token_major(t):
    """A recorded [1, heads, tokens, head_dim] cache as [tokens x heads head_dim] rows."""
    _, h, n, d = t["shape"]
    return np.asarray(t["data"], dtype=np.float32).reshape(h, n, d).transpose(1, 0, 2).reshape(n, h * d)


@pytest.mark.parametrize("index", range(4))
def test_moa_drafter_replays_the_recorded_inference_chain(golden, index):
    # HEBO's MoA drafter: the prompt's target cache verified, then the prompt and the bonus token through
    # self-attention and cross-attention, greedy steps from the last feature (the target's LM head).
    case = golden(f"blocks/moa_pipeline_inf_{index}.json")
    dims, inputs, want = case["dims"], case["inputs"], case["outputs"]
    target = dims["target"]
    weights = {name: np.asarray(p["data"]).reshape(p["shape"]) for name, p in case["params"].items()}

    def part(d):
        return dict(heads=d["num_attention_heads"], kv_heads=d["num_key_value_heads"], head_dim=d["head_dim"],
                    rope_theta=d.get("rope_theta", target["rope_theta"]))

    drafter = specdec.MoaDrafter(weights, lsa=part(dims["lsa"]), sa=part(dims["sa"]), ca=part(dims["ca"]),
                                 target_layers=target["num_layers"], target_head_dim=target["head_dim"],
                                 rms_eps=target["rms_norm_eps"], capacity=64)
    keys = [token_major(k) for k in inputs["k"]]
    values = [token_major(v) for v in inputs["v"]]
    n = keys[0].shape[0]
    drafter.add_verified(keys, values, 0, n)
    assert drafter.verified == n
    embed = weights["model.embed_tokens.weight"].astype(np.float32)
    lm_head = weights["lm_head.weight"]
    feed = list(np.asarray(inputs["tokens"]["data"]).ravel())
    drafted = []
    for s in range(inputs["steps"]):
        x = embed[np.asarray(feed)].copy()
        feature = drafter.forward(x, np.arange(n + 1 + s - len(feed), n + 1 + s))
        logits = feature.astype(np.float64) @ lm_head.T
        np.testing.assert_allclose(logits.ravel(), want["step_logits"][s]["data"], rtol=1e-4, atol=1e-4)
        drafted.append(int(np.argmax(logits)))
        feed = [drafted[-1]]
    assert drafted == want["draft_tokens"]
    assert drafter.cache_size == n + inputs["steps"]  # the prompt and bonus row, then one row per later step
    drafter.crop(n)
    assert drafter.cache_size == n
