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
