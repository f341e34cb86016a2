"""Quaternion layers: Hamilton product, dense == packed (values and gradients), parameter
counts and MAC counts."""

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from qsa.layers import (
    QuaternionConv1d,
    QuaternionConv2d,
    QuaternionConvTranspose1d,
    QuaternionConvTranspose2d,
    QuaternionLinear,
    conjugate,
    hamilton_product,
)


def table_product(p, q):
    """Reference Hamilton product written out from the multiplication table
    (i^2 = j^2 = k^2 = ijk = -1)."""
    a1, b1, c1, d1 = p.unbind(-1)
    a2, b2, c2, d2 = q.unbind(-1)
    return torch.stack(
        [
            a1 * a2 - b1 * b2 - c1 * c2 - d1 * d2,
            a1 * b2 + b1 * a2 + c1 * d2 - d1 * c2,
            a1 * c2 - b1 * d2 + c1 * a2 + d1 * b2,
            a1 * d2 + b1 * c2 - c1 * b2 + d1 * a2,
        ],
        -1,
    )


def test_hamilton_product_matches_table():
    g = torch.Generator().manual_seed(0)
    p, q = torch.randn(1000, 4, generator=g), torch.randn(1000, 4, generator=g)
    torch.testing.assert_close(hamilton_product(p, q), table_product(p, q), rtol=0, atol=1e-6)
    # basis identities, not symmetric: ij = k, ji = -k
    e = torch.eye(4)
    torch.testing.assert_close(hamilton_product(e[1], e[2]), e[3])
    torch.testing.assert_close(hamilton_product(e[2], e[1]), -e[3])
    # |pq| = |p||q| and q conj(q) = |q|^2
    torch.testing.assert_close(hamilton_product(p, q).norm(dim=-1), p.norm(dim=-1) * q.norm(dim=-1))
    qq = hamilton_product(q, conjugate(q))
    torch.testing.assert_close(qq[:, 0], q.pow(2).sum(-1))
    torch.testing.assert_close(qq[:, 1:], torch.zeros(1000, 3), atol=1e-5, rtol=0)


def test_single_unit_layers_compute_the_hamilton_product():
    torch.manual_seed(1)
    lin = QuaternionLinear(4, 4, bias=False)
    x = torch.randn(50, 4)
    w = lin.weight[:, 0, 0]  # (4,) the one weight quaternion
    torch.testing.assert_close(lin(x), table_product(w.expand(50, 4), x), rtol=0, atol=1e-6)
    conv = QuaternionConv1d(4, 4, 1, bias=False)
    xc = torch.randn(3, 4, 7)
    wc = conv.weight[:, 0, 0, 0]
    ref = table_product(wc.expand(3, 7, 4), xc.transpose(1, 2)).transpose(1, 2)
    torch.testing.assert_close(conv(xc), ref, rtol=0, atol=1e-6)


CASES = [
    ("linear", lambda: QuaternionLinear(12, 20), (3, 5, 12), lambda: nn.Linear(12, 20)),
    ("linear-1d", lambda: QuaternionLinear(8, 4, bias=False), (6, 8), lambda: nn.Linear(8, 4)),
    (
        "conv1d",
        lambda: QuaternionConv1d(8, 16, 3, padding=1),
        (2, 8, 11),
        lambda: nn.Conv1d(8, 16, 3),
    ),
    (
        "conv1d-strided",
        lambda: QuaternionConv1d(8, 12, 4, stride=2, dilation=1),
        (2, 8, 17),
        lambda: nn.Conv1d(8, 12, 4),
    ),
    (
        "conv1d-dilated",
        lambda: QuaternionConv1d(8, 8, 3, dilation=2, padding="same"),
        (2, 8, 9),
        lambda: nn.Conv1d(8, 8, 3),
    ),
    (
        "conv1d-depthwise",
        lambda: QuaternionConv1d(16, 16, 5, groups=4, padding=2),
        (2, 16, 13),
        lambda: nn.Conv1d(16, 16, 5, groups=4),
    ),
    (
        "conv2d",
        lambda: QuaternionConv2d(8, 12, (3, 2), stride=(1, 2)),
        (2, 8, 7, 9),
        lambda: nn.Conv2d(8, 12, (3, 2)),
    ),
    (
        "conv2d-depthwise",
        lambda: QuaternionConv2d(8, 8, 3, groups=2, padding=1),
        (2, 8, 6, 5),
        lambda: nn.Conv2d(8, 8, 3, groups=2),
    ),
    (
        "convT1d",
        lambda: QuaternionConvTranspose1d(8, 12, 4, stride=2, padding=1),
        (2, 8, 9),
        lambda: nn.ConvTranspose1d(8, 12, 4),
    ),
    (
        "convT2d",
        lambda: QuaternionConvTranspose2d(8, 4, (1, 3), stride=(1, 2)),
        (2, 8, 5, 6),
        lambda: nn.ConvTranspose2d(8, 4, (1, 3)),
    ),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name,make,shape,make_dense", CASES, ids=[c[0] for c in CASES])
def test_dense_and_packed_agree(name, make, shape, make_dense, dtype):
    torch.manual_seed(2)
    layer = make().to(dtype)
    x = torch.randn(shape, dtype=dtype, requires_grad=True)
    layer.path = "packed"
    yp = layer(x)
    gy = torch.randn_like(yp)
    gxp, gwp = torch.autograd.grad(yp, (x, layer.weight), gy)
    layer.path = "dense"
    yd = layer(x)
    gxd, gwd = torch.autograd.grad(yd, (x, layer.weight), gy)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    assert (yp - yd).abs().max() < tol
    assert (gxp - gxd).abs().max() < tol
    assert (gwp - gwd).abs().max() < tol * 10


@pytest.mark.parametrize("name,make,shape,make_dense", CASES, ids=[c[0] for c in CASES])
def test_parameter_count_is_a_quarter_of_dense(name, make, shape, make_dense):
    layer, dense = make(), make_dense()
    assert layer.weight.numel() * 4 == dense.weight.numel()
    assert layer.dense_weight().numel() == dense.weight.numel()
    assert layer.dense_weight().shape == dense.weight.shape
    n_bias = 0 if layer.bias is None else layer.bias.numel()
    assert sum(p.numel() for p in layer.parameters()) == dense.weight.numel() // 4 + n_bias


@pytest.mark.parametrize("name,make,shape,make_dense", CASES, ids=[c[0] for c in CASES])
def test_packed_path_does_the_dense_number_of_macs(name, make, shape, make_dense):
    layer = make()
    x = torch.randn(shape)
    counts = {}
    for path in ("packed", "dense"):
        layer.path = path
        with FlopCounterMode(display=False) as fc:
            layer(x)
        counts[path] = fc.get_total_flops()
    assert counts["packed"] == counts["dense"] > 0


def test_packed_path_reads_only_the_components():
    layer = QuaternionLinear(16, 32)
    w = layer.stacked_weight()
    assert w.data_ptr() == layer.weight.data_ptr()  # a view, not an expanded copy
    assert w.numel() == layer.weight.numel()


def test_init_statistics():
    torch.manual_seed(3)
    layer = QuaternionLinear(256, 256, bias=False)
    # Parcollet: modulus ~ chi(4) * sigma, sigma = 1/sqrt(2 (n_in + n_out)); E|w|^2 = 4 sigma^2
    sigma2 = 1.0 / (2 * (64 + 64))
    power = layer.weight.detach().pow(2).sum(0).mean().item()
    assert abs(power / (4 * sigma2) - 1) < 0.05
    assert abs(layer.weight.mean().item()) < 1e-3


@pytest.mark.parametrize("bad", [6, 0, -4])
def test_bad_channels_give_clear_errors(bad):
    with pytest.raises(ValueError, match="multiple of 4"):
        QuaternionLinear(bad, 8)


def test_bad_input_shape_is_named():
    with pytest.raises(ValueError, match=r"expected input \(B, 8"):
        QuaternionConv1d(8, 8, 3)(torch.randn(2, 4, 10))


@pytest.mark.parametrize("grad_off", ["no_grad", "inference_mode"])
def test_dense_weight_cache_follows_the_weights(grad_off):
    """With autograd off the dense path expands the weight once; any change of the weight
    (in-place update, load_state_dict, a new Parameter) is seen on the next call, and with
    autograd on nothing is cached (gradients reach the components)."""
    import copy
    import pickle

    from qsa.layers import set_quaternion_path

    torch.manual_seed(0)
    layer = QuaternionConv1d(8, 12, 3, padding=1)
    set_quaternion_path(layer, "dense")
    ref = copy.deepcopy(layer)
    set_quaternion_path(ref, "packed")
    x = torch.randn(2, 8, 5)
    off = torch.no_grad if grad_off == "no_grad" else torch.inference_mode
    with off():
        y1 = layer(x)
        assert "_dense_cache" in layer.__dict__  # the expansion was kept
        hit = layer.__dict__["_dense_cache"][2]
        torch.testing.assert_close(layer(x), y1, rtol=0, atol=0)
        assert layer.__dict__["_dense_cache"][2] is hit  # ... and reused
        torch.testing.assert_close(y1, ref(x), rtol=1e-5, atol=1e-6)
    with torch.no_grad():  # an optimiser-like in-place update bumps the version counter
        layer.weight.mul_(-2.0)
        ref.weight.mul_(-2.0)
    with off():
        torch.testing.assert_close(layer(x), ref(x), rtol=1e-5, atol=1e-6)
    other = QuaternionConv1d(8, 12, 3, padding=1)  # load_state_dict copies in place
    layer.load_state_dict(other.state_dict())
    ref.load_state_dict(other.state_dict())
    with off():
        torch.testing.assert_close(layer(x), ref(x), rtol=1e-5, atol=1e-6)
    layer.weight = nn.Parameter(torch.randn_like(layer.weight))  # a new tensor object
    ref.weight = nn.Parameter(layer.weight.detach().clone())
    with off():
        torch.testing.assert_close(layer(x), ref(x), rtol=1e-5, atol=1e-6)
    # autograd on: no cache in the way of the gradient
    layer.zero_grad()
    layer(x).pow(2).sum().backward()
    ref(x).pow(2).sum().backward()
    torch.testing.assert_close(layer.weight.grad, ref.weight.grad, rtol=1e-4, atol=1e-5)
    # copies and pickles leave the cache behind
    assert "_dense_cache" not in copy.deepcopy(layer).__dict__
    assert "_dense_cache" not in pickle.loads(pickle.dumps(layer)).__dict__


def test_int8_layers_follow_the_path_and_cache_their_float_weights():
    """set_quaternion_path switches int8 layers too; their cached float weights and scales
    give the packed path's numbers and follow a re-quantisation of the buffers."""
    import copy

    from qsa.layers import dense_inference_copy
    from qsa.quantize import Int8Config, quantize_

    torch.manual_seed(1)
    net = nn.Sequential(QuaternionLinear(16, 16), nn.PReLU(), QuaternionLinear(16, 8))
    q = quantize_(copy.deepcopy(net), Int8Config(activation="dynamic"))
    fast = dense_inference_copy(q)
    assert fast is not q and q[0].layer.path == "packed" and fast[0].layer.path == "dense"
    x = torch.randn(7, 16)
    with torch.inference_mode():
        want = q(x)
        for _ in range(2):  # miss, then hit
            torch.testing.assert_close(fast(x), want, rtol=1e-5, atol=1e-5)
        assert "_qweight_cache" in fast[0].__dict__ and "_scale_cache" in fast[0].__dict__
    with torch.no_grad():
        q[0].qweight.neg_()
        fast[0].qweight.neg_()
        q[0].scale.mul_(0.5)
        fast[0].scale.mul_(0.5)
    with torch.inference_mode():
        torch.testing.assert_close(fast(x), q(x), rtol=1e-5, atol=1e-5)
    plain = nn.Sequential(nn.Linear(3, 3))
    assert dense_inference_copy(plain) is plain  # nothing quaternion: not copied
