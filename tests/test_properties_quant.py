"""Property tests (hypothesis) for the quantiser and the safetensors container."""

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from qsa import safefile
from qsa.layers import QuaternionConv1d, QuaternionLinear
from qsa.quantize import expand_packed, pack_weight, quantize_per_channel

dims = st.integers(1, 6)


@settings(max_examples=60, deadline=None)
@given(n_in=dims, n_out=dims, k=st.integers(1, 4), conv=st.booleans(),
       seed=st.integers(0, 2**31 - 1), scale_exp=st.integers(-8, 4))
def test_packed_int8_equals_per_channel_and_error_is_bounded(n_in, n_out, k, conv, seed,
                                                             scale_exp):
    torch.manual_seed(seed)
    layer = QuaternionConv1d(4 * n_in, 4 * n_out, k) if conv else QuaternionLinear(
        4 * n_in, 4 * n_out)
    with torch.no_grad():
        layer.weight.mul_(2.0**scale_exp)
        if seed % 5 == 0:
            layer.weight[:, 0].zero_()  # an all-zero output unit
    p = pack_weight(layer)
    q, s = expand_packed(layer, p)
    q_ref, s_ref = quantize_per_channel(layer.dense_weight().detach(), axis=0)
    assert torch.equal(q, q_ref) and torch.equal(s, s_ref)
    assert int(p.qweight.abs().max()) <= 127
    err = (p.dequantize() - layer.weight.detach()).abs()
    assert torch.all(err <= p.scale_view() * 0.5 + 1e-12)


@settings(max_examples=60, deadline=None)
@given(
    shapes=st.lists(st.lists(st.integers(0, 5), min_size=0, max_size=3), min_size=0,
                    max_size=5),
    dtype=st.sampled_from([torch.float32, torch.int8, torch.int64, torch.float16, torch.bool]),
    note=st.text(max_size=40),
    seed=st.integers(0, 1000),
)
def test_safefile_roundtrip(shapes, dtype, note, seed):
    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for i, shp in enumerate(shapes):
        t = torch.randn(shp, generator=g) * 50
        tensors[f"t{i}"] = t.to(dtype)
    data = safefile.dumps(tensors, {"format": "test", "note": note})
    back, meta = safefile.loads(data, kind="test")
    assert meta["note"] == note
    assert sorted(back) == sorted(tensors)
    for k, t in tensors.items():
        assert back[k].dtype == t.dtype and torch.equal(back[k], t)
    (hlen,) = np.frombuffer(data[:8], dtype="<u8")
    assert hlen % 8 == 0
