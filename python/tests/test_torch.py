# SPDX-License-Identifier: Apache-2.0
# torch tensors in and out (skipped where torch is not installed: the package's tests never need it).
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import specdec  # noqa: E402
from specdec import _specdec  # noqa: E402


def test_torch_tensors_are_viewed_in_place_and_returned_as_tensors():
    probs = torch.softmax(torch.randn(4, 300, generator=torch.Generator().manual_seed(0)), dim=1)
    assert _specdec._address(probs) == probs.data_ptr()
    got = specdec.top_k_renorm_probs(probs, torch.tensor([1, 5, 20, 300]))
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    want = specdec.top_k_renorm_probs(probs.numpy(), np.array([1, 5, 20, 300]))
    np.testing.assert_array_equal(got.numpy(), want)
    # A torch reference: the k largest kept, renormalised.
    vals, idx = torch.topk(probs[1], 5)
    ref = torch.zeros(300).scatter(0, idx, vals / vals.double().sum().float())
    torch.testing.assert_close(got[1], ref, rtol=1e-6, atol=1e-7)


def test_torch_generator_seeds_the_draw():
    probs = torch.softmax(torch.randn(6, 50, generator=torch.Generator().manual_seed(1)), dim=1)
    a = specdec.sampling_from_probs(probs, generator=torch.Generator().manual_seed(5))
    b = specdec.sampling_from_probs(probs, generator=torch.Generator().manual_seed(5))
    assert isinstance(a, torch.Tensor) and a.dtype == torch.int32
    assert torch.equal(a, b)


def test_chain_speculative_sampling_with_tensors():
    g = torch.Generator().manual_seed(2)
    draft = torch.softmax(torch.randn(3, 4, 40, generator=g), dim=2)
    target = torch.softmax(torch.randn(3, 5, 40, generator=g), dim=2)
    ids = torch.multinomial(draft.reshape(-1, 40), 1, generator=g).reshape(3, 4).to(torch.int32)
    accepted = torch.zeros(3, dtype=torch.int32)
    out, acc, emitted = specdec.chain_speculative_sampling(draft, ids, target, accepted, seed=9)
    assert acc is accepted and isinstance(out, torch.Tensor) and out.shape == (3, 5)
    out2, acc2, emitted2 = specdec.chain_speculative_sampling(draft.numpy(), ids.numpy(), target.numpy(), seed=9)
    np.testing.assert_array_equal(out.numpy(), out2)
    np.testing.assert_array_equal(acc.numpy(), acc2)
    np.testing.assert_array_equal(emitted.numpy(), emitted2)


def test_apply_top_k_top_p_equals_vllms_pytorch_code():
    # vLLM's apply_top_k_top_p_pytorch as written (a stable sort: PyTorch's default leaves tie order open).
    def vllm(logits, k, p):
        logits_sort, logits_idx = logits.sort(dim=-1, descending=False, stable=True)
        top_k_mask = logits_sort.gather(1, (logits_sort.size(1) - k.to(torch.long)).clamp(min=0).unsqueeze(dim=1))
        logits_sort.masked_fill_(logits_sort < top_k_mask, -float("inf"))
        probs_sum = torch.cumsum(logits_sort.softmax(dim=-1), dim=-1)
        top_p_mask = probs_sum <= 1 - p.unsqueeze(dim=1)
        top_p_mask[:, -1] = False
        logits_sort.masked_fill_(top_p_mask, -float("inf"))
        return logits.scatter_(dim=-1, index=logits_idx, src=logits_sort)

    g = torch.Generator().manual_seed(4)
    logits = torch.randn(16, 32000, generator=g) * 4
    k = torch.tensor([1, 2, 5, 20, 50, 100, 1000, 32000] * 2)
    p = torch.tensor([0.1, 0.5, 0.8, 0.9, 0.95, 0.99, 1.0, 0.7] * 2)
    got = specdec.apply_top_k_top_p(logits.clone(), k, p)
    want = vllm(logits.clone(), k, p)
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_tensors_through_the_dlpack_exchange_api_keep_offsets_strides_and_dtypes():
    # PyTorch offers the DLPack C exchange API; the binding views tensors through it. A slice starts at
    # its own address, a transposed view is refused by name, a wrong dtype is a TypeError.
    x = torch.arange(40, dtype=torch.float32).reshape(4, 10)
    assert _specdec._address(x[1:]) == x[1:].data_ptr() == x.data_ptr() + 40
    assert specdec.argmax(x[2:]).tolist() == [9, 9]
    with pytest.raises(ValueError, match="logits: expected a C-contiguous array"):
        specdec.argmax(x.t())
    with pytest.raises(TypeError, match="logits: expected dtype float32"):
        specdec.argmax(x.double())
    tokens = torch.tensor([5, 6, 5, 6, 5], dtype=torch.int32)
    assert specdec.propose_ngram(tokens, 3, min_ngram=1).token.tolist() == [5, 6, 5]


class _Metadata:
    def __init__(self, temperature, generators):
        self.temperature = temperature
        self.all_greedy, self.all_random = False, bool((temperature != 0).all())
        self.top_k = self.top_p = None
        self.generators = generators


def test_vllm_form_draws_as_vllm_from_torch_generators():
    # vLLM 0.33's draws for torch tensors: torch.rand over every draft position, each seeded request's
    # uniforms redrawn from its generator, then exponential_() over [batch, V] and the seeded requests'
    # rows; given those numbers explicitly, specdec's probabilities form must emit the same tokens.
    gen = torch.Generator().manual_seed(3)
    counts, v = [2, 0, 3, 1], 40
    tokens = sum(counts)
    logits = torch.randn(tokens, v, generator=gen)
    drafts = torch.randint(0, v, (tokens,), generator=gen, dtype=torch.int32)
    draft_probs = torch.softmax(torch.randn(tokens, v, generator=gen), dim=1)
    cu = torch.tensor(np.cumsum(counts))
    bonus = torch.randint(0, v, (4, 1), generator=gen)
    temperature = torch.ones(4)

    def seeded():
        return {0: torch.Generator().manual_seed(11), 2: torch.Generator().manual_seed(12)}

    torch.manual_seed(5)
    got = specdec.rejection_sample(drafts, counts, 3, cu, draft_probs, logits, bonus, _Metadata(temperature, seeded()))
    torch.manual_seed(5)
    gens = seeded()
    u = torch.rand((tokens,), dtype=torch.float64)
    u[0:2] = torch.empty(2, dtype=torch.float64).uniform_(generator=gens[0])
    u[2:5] = torch.empty(3, dtype=torch.float64).uniform_(generator=gens[2])
    q = torch.empty((4, v), dtype=torch.float32).exponential_()
    q[0] = torch.empty(v).exponential_(generator=gens[0])
    q[2] = torch.empty(v).exponential_(generator=gens[2])
    want = specdec.rejection_sample(drafts, counts, 3, cu, draft_probs, None, bonus, None, target_probs=torch.softmax(logits, dim=-1),
                                    uniform_probs=u, exponentials=q)
    assert torch.equal(got, want)
