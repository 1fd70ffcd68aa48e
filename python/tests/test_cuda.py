# SPDX-License-Identifier: Apache-2.0
# The CUDA side (a build where nvcc was found, run where a GPU is): every device function against the
# host's, integers exact and floats to a stated tolerance. Skipped without torch, a GPU or a CUDA build.
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import specdec  # noqa: E402

pytestmark = pytest.mark.skipif(not (specdec.cuda and torch.cuda.is_available()),
                                reason="needs a CUDA build of specdec and a GPU")


@pytest.mark.parametrize("rows,v", [(1, 32000), (8, 128256), (64, 151936), (3, 4099)])
def test_row_primitives_on_the_device_equal_the_hosts(rows, v):
    g = torch.Generator().manual_seed(rows + v)
    host = torch.randn(rows, v, generator=g) * 4
    host[0, 7] = host[0].max() + 1  # a clear maximum
    if rows > 1:
        host[1, :] = -float("inf")
        host[1, v // 2] = 0.0  # one finite entry
    dev = host.cuda()
    assert torch.equal(specdec.argmax(dev).cpu(), specdec.argmax(host))
    values, indices = specdec.topk(dev, 8)
    want_values, want_indices = specdec.topk(host, 8)
    assert torch.equal(indices.cpu(), want_indices) and torch.equal(values.cpu(), want_values)
    for t in (1.0, 0.7):
        torch.testing.assert_close(specdec.softmax(dev, t).cpu(), specdec.softmax(host, t), rtol=4e-6, atol=1e-9)
        torch.testing.assert_close(specdec.log_softmax(dev, t).cpu(), specdec.log_softmax(host, t), rtol=4e-6, atol=4e-6)
        torch.testing.assert_close(specdec.logsumexp(dev, t).cpu(), specdec.logsumexp(host, t), rtol=4e-6, atol=4e-6)
    probs = specdec.softmax(host)
    u = torch.rand(rows, generator=g)
    assert torch.equal(specdec.sampling_from_probs(probs.cuda(), uniforms=u.cuda()).cpu(),
                       specdec.sampling_from_probs(probs, uniforms=u))
    assert torch.equal(specdec.sampling_from_probs(probs.cuda(), seed=5).cpu(), specdec.sampling_from_probs(probs, seed=5))


def test_device_calls_run_on_the_current_stream_and_raise_data_faults():
    stream = torch.cuda.Stream()
    x = torch.randn(4, 1000, device="cuda")
    with torch.cuda.stream(stream):
        got = specdec.argmax(x)
    stream.synchronize()
    assert torch.equal(got.cpu(), specdec.argmax(x.cpu()))
    x[2, 5] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        specdec.argmax(x)
    with pytest.raises(ValueError, match="out: expected an array on CUDA device"):
        specdec.argmax(x.nan_to_num(), out=np.empty(4, dtype=np.int32))


def _batch(seed, count, n, vocab):
    rng = np.random.default_rng(seed)
    trees = []
    for _ in range(count):
        size = int(rng.integers(1, n + 1))
        parents = [-1] + [int(rng.integers(max(0, i - 4), i)) for i in range(1, size)]
        trees.append(specdec.DraftTree.from_parents(rng.integers(0, vocab, size=size).astype(np.int32), parents))
    return trees


@pytest.mark.parametrize("count,n,vocab", [(1, 8, 32000), (16, 60, 32000), (64, 60, 4099)])
def test_batch_verification_on_the_device_equals_the_hosts(count, n, vocab):
    trees = _batch(count + n, count, n, vocab)
    tokens, parents, counts = (torch.from_numpy(a) for a in specdec.tree_batch(trees, n))
    g = torch.Generator().manual_seed(count)
    logits = torch.randn(count * n, vocab, generator=g) * 3
    for r, t in enumerate(trees):  # plant argmaxes on first children: long greedy walks
        for i in range(t.size):
            kids = [c for c in range(t.size) if t.parent[c] == i]
            if kids:
                logits[r * n + i, int(t.token[kids[0]])] = 30.0
    probs = specdec.softmax(logits)
    draft = specdec.softmax(torch.randn(count * n, vocab, generator=g))
    draft_rows = torch.tensor([[-1 if i == 0 or i >= t.size else r * n + i for i in range(n)] for r, t in enumerate(trees)],
                              dtype=torch.int64)
    dev = dict(tokens=tokens.cuda(), parents=parents.cuda(), node_counts=counts.cuda())

    def same(a, b):
        for name in ("tokens", "accepted", "accepted_nodes", "uniforms_consumed"):
            assert torch.equal(getattr(a, name).cpu(), getattr(b, name)), name

    same(specdec.verify_tree_batch(logits.cuda(), dev["tokens"], dev["parents"], greedy=True, node_counts=dev["node_counts"]),
         specdec.verify_tree_batch(logits, tokens, parents, greedy=True, node_counts=counts))
    for kwargs_host, kwargs_dev in [({}, {}), (dict(draft_probs=draft, draft_rows=draft_rows),
                                             dict(draft_probs=draft.cuda(), draft_rows=draft_rows.cuda()))]:
        host = specdec.verify_tree_batch(probs, tokens, parents, node_counts=counts, seed=3, offset=5, **kwargs_host)
        same(specdec.verify_tree_batch(probs.cuda(), dev["tokens"], dev["parents"], node_counts=dev["node_counts"], seed=3,
                                       offset=5, **kwargs_dev), host)
        offsets = torch.full((count,), 5, dtype=torch.int64)
        same(specdec.verify_tree_batch(probs.cuda(), dev["tokens"], dev["parents"], node_counts=dev["node_counts"], seed=3,
                                       offset=offsets.cuda(), **kwargs_dev), host)
    with pytest.raises(ValueError, match="tokens: expected an array on CUDA device"):
        specdec.verify_tree_batch(logits.cuda(), tokens, dev["parents"], greedy=True)


@pytest.mark.parametrize("batch,k,vocab", [(1, 4, 32000), (16, 6, 128256), (64, 3, 4099)])
def test_chain_speculative_sampling_on_the_device_equals_the_hosts(batch, k, vocab):
    g = torch.Generator().manual_seed(batch * k)
    ids = torch.randint(0, vocab, (batch, k), generator=g, dtype=torch.int32)
    draft = torch.softmax(torch.randn(batch, k, vocab, generator=g), dim=-1)
    target = torch.softmax(torch.randn(batch, k + 1, vocab, generator=g), dim=-1)
    target[:, :k].scatter_add_(2, ids.long().unsqueeze(2), torch.full((batch, k, 1), 2.0))  # drafts often accepted
    target /= target.sum(dim=-1, keepdim=True)
    host = specdec.chain_speculative_sampling(draft, ids, target, seed=7, offset=2)
    dev = specdec.chain_speculative_sampling(draft.cuda(), ids.cuda(), target.cuda(), seed=7, offset=2)
    for h, d in zip(host, dev):
        assert torch.equal(d.cpu(), h)


def _sglang_trees(seed, bs, n):
    """SGLang's link-encoded trees (global retrive_index) from random parents, predictions that usually
    name one of a node's children."""
    rng = np.random.default_rng(seed)
    candidates = rng.integers(0, 50, size=(bs, n)).astype(np.int64)
    next_token = np.full((bs, n), -1, dtype=np.int64)
    next_sibling = np.full((bs, n), -1, dtype=np.int64)
    predict = rng.integers(50, 100, size=(bs, n)).astype(np.int64)
    for b in range(bs):
        kids = [[] for _ in range(n)]
        for i in range(1, n):
            kids[int(rng.integers(0, i))].append(i)
        for i, k in enumerate(kids):
            rng.shuffle(k)
            if k:
                next_token[b, i] = k[0]
                if rng.random() < 0.8:
                    predict[b, i] = candidates[b, k[int(rng.integers(0, len(k)))]]
            for x, y in zip(k, k[1:]):
                next_sibling[b, x] = y
    retrive_index = np.arange(bs * n, dtype=np.int64).reshape(bs, n)
    return candidates, retrive_index, next_token, next_sibling, predict


@pytest.mark.parametrize("bs,n,steps", [(1, 8, 4), (16, 60, 6), (64, 12, 12)])
def test_sglang_verify_tree_greedy_on_the_device_equals_the_hosts(bs, n, steps):
    arrays = _sglang_trees(bs * n + steps, bs, n)

    def run(device):
        predicts = torch.full((bs * n,), -7, dtype=torch.int32, device=device)
        accept_index = torch.full((bs, steps), -7, dtype=torch.int32, device=device)
        accept_token_num = torch.full((bs,), -7, dtype=torch.int32, device=device)
        specdec.verify_tree_greedy(predicts, accept_index, accept_token_num,
                                   *(torch.from_numpy(a).to(device) for a in arrays))
        return predicts.cpu(), accept_index.cpu(), accept_token_num.cpu()

    host, dev = run("cpu"), run("cuda")
    assert int((host[2] > 0).sum()) > 0  # some requests accept drafts
    for h, d in zip(host, dev):
        assert torch.equal(h, d)
    candidates, retrive_index, next_token, next_sibling, predict = arrays
    next_token = next_token.copy()
    next_token[0, 0] = 0  # the root as its own child: the links cycle
    predict = predict.copy()
    predict[0, 0] = candidates[0, 0]
    with pytest.raises(ValueError, match="back to node 0 on the accepted path"):
        specdec.verify_tree_greedy(torch.zeros(bs * n, dtype=torch.int32, device="cuda"),
                                   torch.zeros((bs, steps), dtype=torch.int32, device="cuda"),
                                   torch.zeros(bs, dtype=torch.int32, device="cuda"),
                                   *(torch.from_numpy(a).cuda() for a in (candidates, retrive_index, next_token,
                                                                          next_sibling, predict)))


@pytest.mark.parametrize("bs,n,steps,v", [(1, 8, 4, 32000), (16, 60, 6, 4099), (64, 12, 12, 1000)])
def test_sglang_sampled_tree_verification_on_the_device_equals_the_hosts(bs, n, steps, v):
    candidates, retrive_index, next_token, next_sibling, _ = _sglang_trees(bs * n + v, bs, n)
    g = torch.Generator().manual_seed(bs * n)
    target = torch.softmax(torch.randn(bs, n, v, generator=g) * 3, dim=-1)
    for b in range(bs):  # a node's children often carry most of its row's mass: long accepted paths
        for i in range(n):
            c = next_token[b, i]
            if c >= 0 and torch.rand(1, generator=g).item() < 0.7:
                target[b, i, int(candidates[b, c])] += 4.0
    target /= target.sum(dim=-1, keepdim=True)
    coins = torch.rand(bs, n, generator=g) * 0.999
    finals = torch.rand(bs, generator=g) * 0.999

    def run(device, single=1.0, acc=1.0, dtype=torch.float32):
        predicts = torch.full((bs * n,), -7, dtype=torch.int32, device=device)
        accept_index = torch.full((bs, steps), -7, dtype=torch.int32, device=device)
        accept_token_num = torch.full((bs,), -7, dtype=torch.int32, device=device)
        links = (torch.from_numpy(a).to(device) for a in (candidates, retrive_index, next_token, next_sibling))
        specdec.tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, *links, coins.to(device),
                                                      finals.to(device), target.to(device, dtype), None, single, acc)
        return predicts.cpu(), accept_index.cpu(), accept_token_num.cpu()

    for single, acc in ((1.0, 1.0), (0.4, 0.7)):
        host, dev = run("cpu", single, acc), run("cuda", single, acc)
        assert int((host[2] > 0).sum()) > 0  # some requests accept drafts
        for h, d in zip(host, dev):
            assert torch.equal(h, d)
    for dtype in (torch.bfloat16, torch.float16):  # 16-bit rows read as they are on both
        for h, d in zip(run("cpu", dtype=dtype), run("cuda", dtype=dtype)):
            assert torch.equal(h, d)
    bad = next_sibling.copy()
    bad[0, 0] = 0  # the root as a sibling: linked twice
    with pytest.raises(ValueError, match="the links of request 0 reach node 0 twice"):
        specdec.tree_speculative_sampling_target_only(
            torch.zeros(bs * n, dtype=torch.int32, device="cuda"), torch.zeros((bs, steps), dtype=torch.int32, device="cuda"),
            torch.zeros(bs, dtype=torch.int32, device="cuda"),
            *(torch.from_numpy(a).cuda() for a in (candidates, retrive_index, next_token, bad)), coins.cuda(),
            finals.cuda(), target.cuda())


@pytest.mark.parametrize("batch,spec,v,with_draft", [(1, 4, 32000, True), (16, 5, 4099, False), (64, 3, 1000, True)])
def test_vllm_rejection_sample_on_the_device_equals_the_hosts(batch, spec, v, with_draft):
    g = torch.Generator().manual_seed(batch * spec + v)
    counts = torch.randint(0, spec + 1, (batch,), generator=g)
    cu = torch.cumsum(counts, 0)
    n = int(cu[-1])
    ids = torch.randint(0, v, (n,), generator=g, dtype=torch.int32)
    target = torch.softmax(torch.randn(n, v, generator=g) * 3, dim=-1)
    target[torch.arange(n), ids.long()] += torch.rand(n, generator=g) * 3  # drafts often accepted
    target /= target.sum(dim=-1, keepdim=True)
    draft = None
    if with_draft:
        draft = torch.softmax(torch.randn(n, v, generator=g) * 3, dim=-1)
        draft[torch.arange(n), ids.long()] += 1.0
        draft /= draft.sum(dim=-1, keepdim=True)
    bonus = torch.randint(0, v, (batch,), generator=g, dtype=torch.int32)
    greedy = torch.rand(batch, generator=g) < 0.3
    uniforms = torch.rand(n, generator=g, dtype=torch.float64)
    noise = -torch.log1p(-torch.rand(batch, v, generator=g))

    def run(device, dtype=torch.float32, draft_dtype=None):
        return specdec.rejection_sample(ids.to(device), None, spec, cu.to(device),
                                        None if draft is None else draft.to(device, draft_dtype or dtype), target.to(device, dtype),
                                        bonus.to(device), greedy.to(device), uniforms.to(device), noise.to(device))

    host, dev = run("cpu"), run("cuda")
    assert dev.is_cuda and torch.equal(dev.cpu(), host)
    for dtype, draft_dtype in ((torch.bfloat16, None), (torch.float16, None), (torch.float32, torch.bfloat16)):
        assert torch.equal(run("cuda", dtype, draft_dtype).cpu(), run("cpu", dtype, draft_dtype))
    assert int((host[:, 1:] >= 0).sum()) > 0  # some drafts accepted
    # seeded: uniforms and exponentials drawn on the host, the same tokens on the device
    assert torch.equal(specdec.rejection_sample(ids.cuda(), None, spec, cu.cuda(), None, target.cuda(), bonus.cuda(), seed=3).cpu(),
                       specdec.rejection_sample(ids, None, spec, cu, None, target, bonus, seed=3))
    bad = cu.clone()
    bad[0] = n + 1
    with pytest.raises(ValueError, match="cu_num_draft_tokens gives request 0 entries"):
        specdec.rejection_sample(ids.cuda(), None, spec, bad.cuda(), None, target.cuda(), bonus.cuda(), None,
                                 uniforms.cuda(), noise.cuda())


@pytest.mark.parametrize("rows,v", [(1, 32000), (8, 128256), (3, 4099)])
def test_top_k_filters_on_the_device_equal_the_hosts(rows, v):
    g = torch.Generator().manual_seed(rows + v)
    logits = torch.randn(rows, v, generator=g) * 3
    logits[0, : v // 2] = torch.round(logits[0, : v // 2])  # ties
    logits[-1, 5] = -float("inf")
    probs = torch.softmax(logits, dim=-1)
    for k in (1, 20, v, torch.randint(1, v + 1, (rows,), generator=g)):
        want = specdec.top_k_renorm_probs(probs, k)
        assert torch.equal(specdec.top_k_renorm_probs(probs.cuda(), k).cpu(), want)
        in_place = probs.cuda()
        assert specdec.top_k_renorm_probs(in_place, k, out=in_place) is in_place
        assert torch.equal(in_place.cpu(), want)
        assert torch.equal(specdec.top_k_mask_logits(logits.cuda(), k).cpu(), specdec.top_k_mask_logits(logits, k))
    bad = probs.clone()
    bad[rows - 1, 3] = float("nan")
    with pytest.raises(ValueError, match=f"probs\\[{rows - 1}, 3\\] = nan; expected a probability in \\[0, 1\\]"):
        specdec.top_k_renorm_probs(bad.cuda(), 4)


@pytest.mark.parametrize("rows,v", [(1, 32000), (8, 128256), (3, 4099)])
def test_top_p_and_joint_filters_on_the_device_equal_the_hosts(rows, v):
    g = torch.Generator().manual_seed(rows * v)
    logits = torch.randn(rows, v, generator=g) * 4
    logits[0, : v // 2] = torch.round(logits[0, : v // 2])  # ties
    probs = torch.softmax(logits, dim=-1)
    ps = torch.rand(rows, generator=g) * 0.9 + 0.05
    for p in (0.9, 1.0, ps):
        assert torch.equal(specdec.top_p_renorm_probs(probs.cuda(), p).cpu(), specdec.top_p_renorm_probs(probs, p))
    kept = specdec.top_k_renorm_probs(probs, 50)
    for order in ("top_k_first", "joint"):
        # the whole call on the device (softmax, filters, draw); the device softmax is the host's only to a
        # tolerance, so the tokens are checked against the top-k set rather than the host's draw
        dev = specdec.top_k_top_p_sampling_from_logits(logits.cuda(), 50, ps.cuda(), filter_apply_order=order, seed=11)
        assert dev.is_cuda and bool((kept[torch.arange(rows), dev.cpu().long()] > 0).all())


@pytest.mark.parametrize("bs,n,k,steps", [(1, 8, 4, 4), (16, 32, 8, 5), (64, 12, 3, 9)])
def test_build_tree_kernel_efficient_on_the_device_equals_the_hosts(bs, n, k, steps):
    from test_sglang import _build, _build_inputs

    parent_list, selected, seq = _build_inputs(bs * n + k, bs, n, k, steps)
    for mode, host_dtype, dev_dtype in [(0, np.bool_, torch.bool), (1, np.bool_, torch.bool), (2, np.int32, torch.int32)]:
        want = _build(parent_list, selected, seq, k, steps, n, mode, host_dtype)
        got = _build(parent_list, selected, seq, k, steps, n, mode, dev_dtype, device="cuda")
        np.testing.assert_array_equal(got[0].cpu().numpy(), want[0])
        np.testing.assert_array_equal(got[1].cpu().numpy(), want[1])
        for a, b in zip(got[2], want[2]):
            np.testing.assert_array_equal(a.cpu().numpy(), b)
    seq_bad = seq.copy()
    seq_bad[-1] = -3
    with pytest.raises(ValueError, match=rf"verified_seq_len\[{bs - 1}\] = -3; expected a length in"):
        _build(parent_list, selected, seq_bad, k, steps, n, 1, torch.bool, device="cuda")


def test_segment_packbits_on_the_device_equals_the_hosts():
    rng = np.random.default_rng(9)
    x = rng.random(5000) < 0.3
    indptr = np.concatenate([[0], np.cumsum(rng.integers(0, 300, size=25))]).astype(np.int32)
    indptr = indptr[indptr <= len(x)]
    for order in ("big", "little"):
        y, new_indptr = specdec.segment_packbits(x, indptr, bitorder=order)
        dy, dnew = specdec.segment_packbits(torch.from_numpy(x).cuda(), torch.from_numpy(indptr).cuda(), bitorder=order)
        assert dy.is_cuda and dnew.is_cuda
        np.testing.assert_array_equal(dy.cpu().numpy(), y)
        np.testing.assert_array_equal(dnew.cpu().numpy(), new_indptr)
    with pytest.raises(ValueError, match=r"indptr gives segment 1 elements \[9, 3\)"):
        specdec.segment_packbits(torch.from_numpy(x).cuda(), torch.tensor([0, 9, 3], dtype=torch.int32))


@pytest.mark.parametrize("batch,k,depth,total,v", [(1, 10, 5, 60, 32000), (8, 8, 4, 48, 4099), (64, 4, 3, 16, 1000)])
def test_eagle2_batch_builder_on_the_device_equals_the_hosts(batch, k, depth, total, v):
    g = torch.Generator().manual_seed(batch * k + v)
    root = torch.randn(batch, v, generator=g) * 3
    logits = [torch.randn(batch * k, v, generator=g) * 3 for _ in range(depth)]
    roots = torch.arange(batch, dtype=torch.int32)

    def run(device):
        builder = specdec.Eagle2BatchBuilder(k, depth, total, batch=batch, device=device)
        steps = [builder.begin(root.to(device), roots.to(device))]
        steps += [builder.expand(x.to(device)) for x in logits]
        return steps, builder.finish()

    host_steps, host = run("cpu")
    dev_steps, dev = run("cuda")
    for h, d in zip(host_steps, dev_steps):
        for name in ("input_ids", "frontier", "parent_slot", "draft_mask"):
            assert getattr(d, name).is_cuda
            assert torch.equal(getattr(d, name).cpu(), getattr(h, name))
    for name in ("tokens", "parents", "depths", "scores", "selected"):
        assert torch.equal(getattr(dev, name).cpu(), getattr(host, name))
    bad = root.clone()
    bad[batch - 1, 3] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        specdec.Eagle2BatchBuilder(k, depth, total, batch=batch, device="cuda").begin(bad.cuda(), roots.cuda())


@pytest.mark.parametrize("layout,prefix", [("dense", 0), ("dense", 5), ("additive", 3), ("packed_int32", 0), ("bitpacked_rows", 0)])
def test_batch_tree_mask_on_the_device_equals_the_hosts(layout, prefix):
    rng = np.random.default_rng(len(layout) + prefix)
    n = 30
    trees = _batch(rng.integers(1 << 30), 16, n, 100)
    _, parents, counts = specdec.tree_batch(trees, nodes=n)
    want = specdec.batch_tree_mask(torch.from_numpy(parents), torch.from_numpy(counts), layout=layout, prefix_length=prefix)
    got = specdec.batch_tree_mask(torch.from_numpy(parents).cuda(), torch.from_numpy(counts).cuda(), layout=layout,
                                  prefix_length=prefix)
    assert got.is_cuda and got.dtype == want.dtype
    assert torch.equal(got.cpu(), want)
    if layout == "dense":
        prefixes = torch.arange(16) % 7 + prefix
        packed, indptr = specdec.batch_tree_mask_flashinfer(torch.from_numpy(parents).cuda(), torch.from_numpy(counts).cuda(),
                                                            prefixes.cuda())
        want_packed, want_indptr = specdec.tree_mask_flashinfer(trees, prefixes.numpy())
        assert packed.is_cuda and indptr.is_cuda
        assert np.array_equal(indptr.cpu().numpy(), want_indptr) and np.array_equal(packed.cpu().numpy(), want_packed)


# ---- the drafter blocks on CUDA tensors: each device block against the same block on the host ----------


def _weights(case, device):
    """A golden's weights as float32 arrays: numpy for the host, torch tensors on `device`."""
    host = {name: np.asarray(p["data"], dtype=np.float32).reshape(p["shape"]) for name, p in case["params"].items()}
    if device == "cpu":
        return host
    return {name: torch.from_numpy(a).to(device) for name, a in host.items()}


def _close(got, want, what):
    got = got.cpu().numpy() if isinstance(got, torch.Tensor) else got
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=what)


def test_decoder_layer_on_the_device_equals_the_hosts(golden):
    case = golden("blocks/moa_sa_0.json")
    sa, target = case["dims"]["sa"], case["dims"]["target"]
    kw = dict(prefix="self_attention.", heads=sa["num_attention_heads"], kv_heads=sa["num_key_value_heads"],
              head_dim=sa["head_dim"], rms_eps=target["rms_norm_eps"], rope_theta=target["rope_theta"], capacity=64)
    host = specdec.DecoderLayer(_weights(case, "cpu"), **kw)
    dev = specdec.DecoderLayer(_weights(case, "cuda"), **kw)
    assert dev.device.startswith("cuda")
    rng = np.random.default_rng(5)
    e = sa["hidden"]
    prefix = rng.uniform(-1, 1, (3, e)).astype(np.float32)
    nodes = rng.uniform(-1, 1, (5, e)).astype(np.float32)
    tree = specdec.DraftTree.from_parents([1, 2, 3, 4, 5], [-1, 0, 0, 1, 2])
    _close(dev.forward(torch.from_numpy(prefix).cuda(), torch.arange(3).cuda()), host.forward(prefix.copy(), np.arange(3)), "prefix")
    got = dev.forward(torch.from_numpy(nodes).cuda(), torch.from_numpy(tree.positions(3)).cuda(),
                      mask=torch.from_numpy(tree.mask(3)).cuda())
    _close(got, host.forward(nodes.copy(), tree.positions(3), mask=tree.mask(3)), "tree pass")
    additive = torch.from_numpy(tree.mask(8, additive=True)).cuda()
    _close(dev.forward(torch.from_numpy(nodes).cuda(), torch.from_numpy(tree.positions(8)).cuda(), mask=additive),
           host.forward(nodes.copy(), tree.positions(8), mask=tree.mask(8, additive=True)), "additive mask")
    dev.keep(8, [0, 2, 4])
    host.keep(8, [0, 2, 4])
    assert dev.cache_size == host.cache_size == 11
    _close(dev.keys(), host.keys(), "keys after keep")
    _close(dev.values(), host.values(), "values after keep")
    with pytest.raises(ValueError, match="expected an array on CUDA device"):
        dev.forward(prefix.copy(), np.arange(3))


def test_eagle_fuse_and_eagle3_block_on_the_device_equal_the_hosts(golden):
    case = golden("blocks/eagle3_layer_0.json")
    d = case["dims"]
    kw = dict(heads=d["num_attention_heads"], kv_heads=d["num_key_value_heads"], head_dim=d["head_dim"],
              rms_eps=d["rms_norm_eps"], rope_theta=d["rope_theta"], capacity=64)
    host = specdec.Eagle3Block(_weights(case, "cpu"), **kw)
    dev = specdec.Eagle3Block(_weights(case, "cuda"), **kw)
    taps = np.asarray(case["inputs"]["taps"]["data"], dtype=np.float32).reshape(case["inputs"]["taps"]["shape"])
    hidden_host = host.fuse(taps)
    hidden_dev = dev.fuse(torch.from_numpy(taps).cuda())
    _close(hidden_dev, hidden_host, "fused")
    rows = taps.shape[0]
    tokens = np.arange(rows, dtype=np.int32) % 7
    h2_host = host.forward(tokens, hidden_host, np.arange(rows))
    h2_dev = dev.forward(torch.from_numpy(tokens).cuda(), hidden_dev, torch.arange(rows).cuda())
    _close(h2_dev, h2_host, "h2")
    _close(dev.logits(h2_dev), host.logits(h2_host), "logits")
    rng = np.random.default_rng(6)
    v, e = 40, 8
    embed, feature = rng.standard_normal((v, e)).astype(np.float32), rng.standard_normal((4, e)).astype(np.float32)
    weight, bias = (rng.standard_normal((e, 2 * e)) * 0.2).astype(np.float32), rng.standard_normal(e).astype(np.float32)
    toks = np.array([3, 0, 39, 3], dtype=np.int32)
    _close(specdec.eagle_fuse(torch.from_numpy(toks).cuda(), *(torch.from_numpy(a).cuda() for a in (feature, embed, weight, bias))),
           specdec.eagle_fuse(toks, feature, embed, weight, bias), "eagle_fuse")


def test_mtp_jakiro_amphista_and_moa_on_the_device_equal_the_hosts(golden):
    case = golden("blocks/mtp_module_0.json")
    d = case["dims"]
    kw = dict(prefix="layers.0.", heads=d["num_attention_heads"], kv_heads=d["num_key_value_heads"], head_dim=d["head_dim"],
              rms_eps=d["rms_norm_eps"], rope_theta=d["rope_theta"], zero_embedding_at_position_0=True, capacity=64)
    host, dev = specdec.MtpModule(_weights(case, "cpu"), **kw), specdec.MtpModule(_weights(case, "cuda"), **kw)
    step = case["outputs"]["steps"][0]
    hidden = np.asarray(step["hidden_in"]["data"], dtype=np.float32).reshape(step["hidden_in"]["shape"])
    tokens, positions = np.asarray(step["input_ids"]["data"]), np.asarray(step["position_ids"]["data"])
    o_host = host.forward(tokens, hidden, positions)
    o_dev = dev.forward(torch.from_numpy(tokens).cuda(), torch.from_numpy(hidden).cuda(), torch.from_numpy(positions).cuda())
    _close(o_dev, o_host, "mtp o")
    _close(dev.logits(o_dev), host.logits(o_host), "mtp logits")

    case = golden("blocks/jakiro_layer_0.json")
    d, inputs = case["dims"], case["inputs"]
    kw = dict(heads=d["num_attention_heads"], kv_heads=d["num_key_value_heads"], head_dim=d["head_dim"], rms_eps=d["rms_norm_eps"],
              rope_theta=d["rope_theta"], capacity=16)
    host, dev = specdec.JakiroLayer(_weights(case, "cpu"), **kw), specdec.JakiroLayer(_weights(case, "cuda"), **kw)
    tokens = np.asarray(inputs["input_ids"]["data"]).ravel().astype(np.int32)
    feature = np.asarray(inputs["target_hidden"]["data"], dtype=np.float32).reshape(len(tokens), d["E"])
    left_host, right_host = host.forward(tokens, feature, np.arange(len(tokens)), contrastive=True)
    left_dev, right_dev = dev.forward(torch.from_numpy(tokens).cuda(), torch.from_numpy(feature).cuda(),
                                      torch.arange(len(tokens)).cuda(), contrastive=True)
    _close(left_dev, left_host, "jakiro left")
    _close(right_dev, right_host, "jakiro right")

    case = golden("blocks/amphista_staged_0.json")
    d, inputs = case["dims"], case["inputs"]
    kw = dict(heads=d["num_attention_heads"], kv_heads=d["num_key_value_heads"], head_dim=d["head_dim"],
              stage1_heads=(d["K_heads"] + 1) // 2, rms_eps=d["rms_norm_eps"], rope_theta=d["rope_theta"], capacity=16)
    host, dev = specdec.AmphistaHeads(_weights(case, "cpu"), **kw), specdec.AmphistaHeads(_weights(case, "cuda"), **kw)
    feature = np.asarray(inputs["h"]["data"], dtype=np.float32).reshape(-1, d["E"])
    embedding = np.asarray(inputs["e"]["data"], dtype=np.float32).reshape(-1, d["E"])
    positions = np.asarray(inputs["position_ids"]["data"]).ravel()
    want = host.forward(feature, embedding, positions, intermediates=True)
    got = dev.forward(torch.from_numpy(feature).cuda(), torch.from_numpy(embedding).cuda(), torch.from_numpy(positions).cuda(),
                      intermediates=True)
    for name in ("s1", "s2", "z", "u", "o", "logits"):
        _close(got[name], want[name], "amphista " + name)

    case = golden("blocks/moa_pipeline_inf_0.json")
    dims, inputs = case["dims"], case["inputs"]
    target = dims["target"]

    def part(p):
        return dict(heads=p["num_attention_heads"], kv_heads=p["num_key_value_heads"], head_dim=p["head_dim"],
                    rope_theta=p.get("rope_theta", target["rope_theta"]))

    kw = dict(lsa=part(dims["lsa"]), sa=part(dims["sa"]), ca=part(dims["ca"]), target_layers=target["num_layers"],
              target_head_dim=target["head_dim"], rms_eps=target["rms_norm_eps"], capacity=64)
    host, dev = specdec.MoaDrafter(_weights(case, "cpu"), **kw), specdec.MoaDrafter(_weights(case, "cuda"), **kw)
    from test_blocks import token_major

    keys, values = [token_major(k) for k in inputs["k"]], [token_major(v) for v in inputs["v"]]
    n = keys[0].shape[0]
    host.add_verified(keys, values, 0, n)
    dev.add_verified([torch.from_numpy(k).cuda() for k in keys], [torch.from_numpy(v).cuda() for v in values], 0, n)
    embed = np.asarray(case["params"]["model.embed_tokens.weight"]["data"], dtype=np.float32).reshape(
        case["params"]["model.embed_tokens.weight"]["shape"])
    feed = np.asarray(inputs["tokens"]["data"]).ravel()
    x = embed[feed]
    _close(dev.forward(torch.from_numpy(x.copy()).cuda(), torch.arange(n + 1 - len(feed), n + 1).cuda()),
           host.forward(x.copy(), np.arange(n + 1 - len(feed), n + 1)), "moa features")
    assert dev.cache_size == host.cache_size and dev.verified == host.verified


def test_dflash_drafter_on_the_device_equals_the_hosts(golden):
    # Every recorded step of a scripted case (several context rows per step) on one cache each.
    from test_dflash import step_inputs

    case = golden("blocks/dflash_3.json")
    d = case["dims"]
    kw = dict(heads=d["heads"], kv_heads=d["kv_heads"], head_dim=d["head_dim"], rms_eps=d["rms_norm_eps"],
              rope_theta=d["rope_theta"], block_size=d["block_size"], mask_token=d["mask_token"], capacity=64)
    host, dev = specdec.DFlashDrafter(_weights(case, "cpu"), **kw), specdec.DFlashDrafter(_weights(case, "cuda"), **kw)
    assert dev.device.startswith("cuda")
    for s, step in enumerate(case["outputs"]["steps"]):
        features, context_positions, block_positions = step_inputs(case, step)
        host.append_context(features, context_positions)
        dev.append_context(torch.from_numpy(features).cuda(), torch.from_numpy(context_positions).cuda())
        tokens = np.asarray(step["block_ids"]["data"], dtype=np.int32)
        out_host = host.forward(tokens, block_positions)
        out_dev = dev.forward(torch.from_numpy(tokens).cuda(), torch.from_numpy(block_positions).cuda())
        assert dev.cache_size == host.cache_size == step["cached_before"] + features.shape[0]
        _close(out_dev, out_host, f"dflash steps[{s}].out")
        _close(dev.logits(out_dev[1:]), host.logits(out_host[1:]), f"dflash steps[{s}].logits")
    dev.crop(3)
    host.crop(3)
    assert dev.cache_size == host.cache_size == 3
    with pytest.raises(ValueError, match="expected an array on CUDA device"):
        dev.append_context(features, context_positions)
    assert dev.cache_size == 3


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("rows,v", [(1, 32000), (8, 128256), (3, 4099)])
def test_half_rows_on_the_device_equal_the_hosts(dtype, rows, v):
    """bf16 / fp16 CUDA tensors, read as they are on the device: the row primitives, FlashInfer's filters
    (in the rows' dtype), the sampler and the batched verifier give the host's results for the same 16-bit
    rows (integers exact; softmax values to the float32 tolerance above)."""
    g = torch.Generator().manual_seed(rows * 7 + v)
    logits = (torch.randn(rows, v, generator=g) * 4).to(dtype)
    logits[0, 7] = logits[0].float().max() + 1
    dev = logits.cuda()
    assert torch.equal(specdec.argmax(dev).cpu(), specdec.argmax(logits))
    values, indices = specdec.topk(dev, 8)
    want_values, want_indices = specdec.topk(logits, 8)
    assert torch.equal(indices.cpu(), want_indices) and torch.equal(values.cpu(), want_values)
    torch.testing.assert_close(specdec.softmax(dev, 0.7).cpu(), specdec.softmax(logits, 0.7), rtol=4e-6, atol=1e-9)
    torch.testing.assert_close(specdec.logsumexp(dev).cpu(), specdec.logsumexp(logits), rtol=4e-6, atol=4e-6)
    probs = torch.softmax(logits.float(), dim=-1).to(dtype)
    for k in (1, 20, torch.randint(1, v + 1, (rows,), generator=g)):
        want = specdec.top_k_renorm_probs(probs, k)
        got = specdec.top_k_renorm_probs(probs.cuda(), k)
        assert got.dtype == dtype and torch.equal(got.cpu(), want)
        assert torch.equal(specdec.top_k_mask_logits(dev, k).cpu(), specdec.top_k_mask_logits(logits, k))
    assert torch.equal(specdec.top_p_renorm_probs(probs.cuda(), 0.9).cpu(), specdec.top_p_renorm_probs(probs, 0.9))
    u = torch.rand(rows, generator=g)
    assert torch.equal(specdec.sampling_from_probs(probs.cuda(), uniforms=u.cuda()).cpu(),
                       specdec.sampling_from_probs(probs, uniforms=u))
    trees = _batch(rows + v, rows, 6, v)
    tokens, parents, counts = (torch.from_numpy(a) for a in specdec.tree_batch(trees, 6))
    target = torch.softmax(torch.randn(rows * 6, v, generator=g) * 3, dim=-1).to(dtype)
    host = specdec.verify_tree_batch(target, tokens, parents, node_counts=counts, seed=3)
    got = specdec.verify_tree_batch(target.cuda(), tokens.cuda(), parents.cuda(), node_counts=counts.cuda(), seed=3)
    for name in ("tokens", "accepted", "accepted_nodes", "uniforms_consumed"):
        assert torch.equal(getattr(got, name).cpu(), getattr(host, name)), name
