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
    with pytest.raises(ValueError, match="index: expected an array on CUDA device"):
        specdec.argmax(x.nan_to_num(), out=np.empty(4, dtype=np.int32))
