"""Packed int8 quaternion weights: quality floor, bit-exact equivalence with per-channel
quantisation of the expanded weight (checked against torchao), and the quantize_ API."""

import math

import pytest
import torch
from test_quaternion_layers import CASES
from torch import nn

from qsa.layers import QuaternionConv1d, QuaternionLinear
from qsa.quantize import (
    Int8Config,
    Int8QuaternionLayer,
    expand_packed,
    pack_quaternion_weights,
    pack_weight,
    quantize_,
    quantize_per_channel,
    unpack,
)


def sqnr_db(ref: torch.Tensor, test: torch.Tensor) -> float:
    return 10 * math.log10(ref.pow(2).mean().item() / (ref - test).pow(2).mean().item())


@pytest.mark.parametrize("activation", [None, "dynamic"])
@pytest.mark.parametrize("name,make,shape,make_dense", CASES, ids=[c[0] for c in CASES])
def test_int8_packed_sqnr_floor(name, make, shape, make_dense, activation):
    torch.manual_seed(0)
    model = nn.Sequential(make())
    x = torch.randn(shape)
    with torch.no_grad():
        ref = model(x)
        quantize_(model, Int8Config(activation=activation))
        assert isinstance(model[0], Int8QuaternionLayer)
        out = model(x)
    assert sqnr_db(ref, out) >= 35.0


@pytest.mark.parametrize("name,make,shape,make_dense", CASES, ids=[c[0] for c in CASES])
def test_expanded_packed_int8_equals_per_channel_int8_bit_for_bit(name, make, shape, make_dense):
    from torchao.quantization.quant_primitives import (
        MappingType,
        choose_qparams_affine,
        quantize_affine,
    )

    torch.manual_seed(1)
    layer = make()
    dense_fp32 = layer.dense_weight().detach()
    axis = 1 if layer._transposed else 0
    q_ours, s_ours = expand_packed(layer, pack_weight(layer))
    # our own per-channel quantiser on the expanded fp32 weight
    q_pc, s_pc = quantize_per_channel(dense_fp32, axis=axis)
    assert torch.equal(q_ours, q_pc) and torch.equal(s_ours, s_pc)
    # torchao's affine primitives, an independent implementation
    block = [1 if d == axis else n for d, n in enumerate(dense_fp32.shape)]
    s_ao, zp = choose_qparams_affine(
        dense_fp32,
        MappingType.SYMMETRIC,
        block,
        torch.int8,
        quant_min=-127,
        quant_max=127,
        eps=torch.finfo(torch.float32).eps,
        scale_dtype=torch.float32,
        zero_point_dtype=torch.int8,
    )
    q_ao = quantize_affine(dense_fp32, block, s_ao, zp, torch.int8, -127, 127)
    assert torch.equal(q_ours, q_ao)
    assert torch.equal(s_ours, s_ao.flatten())


def test_packed_and_dense_int8_paths_agree():
    torch.manual_seed(2)
    x = torch.randn(4, 8, 20)
    outs = []
    for path in ("packed", "dense"):
        torch.manual_seed(3)
        m = nn.Sequential(QuaternionConv1d(8, 16, 3), nn.ReLU(), QuaternionConv1d(16, 8, 1))
        quantize_(m, Int8Config(path=path))
        outs.append(m(x))
    assert (outs[0] - outs[1]).abs().max() < 1e-5


def test_filter_fn_selects_layers_by_name():
    m = nn.Sequential()
    m.add_module("enc", QuaternionLinear(8, 16))
    m.add_module("act", nn.ReLU())
    m.add_module("dec", QuaternionLinear(16, 8))
    quantize_(m, Int8Config(), filter_fn=lambda mod, fqn: fqn == "dec")
    assert isinstance(m.dec, Int8QuaternionLayer)
    assert isinstance(m.enc, QuaternionLinear)
    assert m.dec.qweight.dtype == torch.int8
    assert m.dec.qweight.numel() == 16 * 8 // 4  # the four components only
    assert m.dec.scale.numel() == 8 // 4  # one scale per output quaternion unit


def test_pack_unpack_roundtrip_is_idempotent():
    torch.manual_seed(4)
    m = nn.Sequential(QuaternionLinear(16, 32), QuaternionConv1d(32, 16, 3, groups=1))
    packed = pack_quaternion_weights(m)
    assert set(packed) == {"0", "1"}
    unpack(m, packed)
    again = pack_quaternion_weights(m)
    for k in packed:
        assert torch.equal(packed[k].qweight, again[k].qweight)
        torch.testing.assert_close(packed[k].scale, again[k].scale, rtol=1e-6, atol=0)


def test_zero_weights_quantise_to_zero():
    layer = QuaternionLinear(8, 8)
    with torch.no_grad():
        layer.weight.zero_()
    p = pack_weight(layer)
    assert torch.count_nonzero(p.qweight) == 0 and torch.all(p.scale == 1)


def test_unknown_config_is_rejected():
    from qsa.errors import ConfigError

    with pytest.raises(ConfigError, match="no quantisation handler"):
        quantize_(nn.Sequential(QuaternionLinear(4, 4)), object())
    with pytest.raises(ConfigError, match="activation"):
        Int8Config(activation="static")


def test_int8_layer_reads_geometry_through():
    m = nn.Sequential(QuaternionConv1d(8, 8, 3, groups=2, padding=1))
    quantize_(m, Int8Config())
    assert m[0].in_channels == 8 and m[0].kernel_size == (3,) and m[0].depthwise
    with pytest.raises(AttributeError):
        _ = m[0].no_such_attribute
