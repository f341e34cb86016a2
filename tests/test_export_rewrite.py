"""The export-time quaternion rewrite: same numbers, components stored once, exact mixing."""

import pytest
import torch
from torch import nn

from qsa.export import ExportError, ExportQuaternionLayer, mixing_matrix, prepare_for_export
from qsa.export.rewrite import ExportPReLU
from qsa.layers import (
    QuaternionConv1d,
    QuaternionConv2d,
    QuaternionConvTranspose1d,
    QuaternionConvTranspose2d,
    QuaternionLinear,
    hamilton_product,
)
from qsa.quantize import Int8Config, quantize_

LAYERS = [
    (lambda: QuaternionLinear(16, 12), (3, 16)),
    (lambda: QuaternionLinear(8, 8, bias=False), (2, 5, 8)),
    (lambda: QuaternionConv1d(8, 12, 3, padding=1, dilation=1), (2, 8, 10)),
    (lambda: QuaternionConv1d(8, 8, 3, stride=2), (2, 8, 11)),
    (lambda: QuaternionConv1d(16, 16, 5, groups=4), (2, 16, 9)),
    (lambda: QuaternionConv2d(8, 4, (3, 1), padding=(1, 0)), (2, 8, 6, 5)),
    (lambda: QuaternionConvTranspose1d(8, 4, 4, stride=2, padding=1), (2, 8, 7)),
    (lambda: QuaternionConvTranspose2d(8, 8, (3, 1), stride=(2, 1)), (2, 8, 5, 3)),
]


@pytest.mark.parametrize("mix", ["conv", "matmul"])
@pytest.mark.parametrize("make, shape", LAYERS)
def test_rewrite_matches_layer(make, shape, mix):
    torch.manual_seed(0)
    layer = make().eval()
    if layer.bias is not None:
        nn.init.normal_(layer.bias)
    model = nn.Sequential(layer)
    ex = prepare_for_export(model, mix=mix)
    assert isinstance(ex[0], ExportQuaternionLayer)
    x = torch.randn(*shape)
    with torch.no_grad():
        assert torch.allclose(ex(x), model(x), atol=1e-5, rtol=1e-5)
    # the components are stored once: the artifact's weight holds the packed values (strided
    # transposed convs add zero taps when the kernel is not a multiple of the stride)
    assert int((ex[0].weight != 0).sum()) == layer.weight.numel()
    if not layer._transposed:
        assert ex[0].weight.numel() == layer.weight.numel()


def test_mixing_matrix_is_the_hamilton_product():
    m = mixing_matrix()
    assert set(m.unique().tolist()) == {-1.0, 0.0, 1.0}
    assert (m != 0).sum(1).tolist() == [1] * 16  # one signed input component per row
    torch.manual_seed(1)
    w, x = torch.randn(4), torch.randn(4)
    mixed = (m @ x).reshape(4, 4)  # (c, a)
    assert torch.allclose(mixed @ w, hamilton_product(w, x), atol=1e-6)


def test_int8_reference_rewrite_uses_its_components():
    torch.manual_seed(0)
    model = nn.Sequential(QuaternionLinear(16, 8)).eval()
    q = quantize_(nn.Sequential(QuaternionLinear(16, 8)), Int8Config())
    q.load_state_dict(quantize_(model, Int8Config()).state_dict())
    ex = prepare_for_export(q)
    x = torch.randn(4, 16)
    with torch.no_grad():
        assert torch.allclose(ex(x), q(x), atol=1e-5)


def test_prelu_rewrite():
    p = nn.PReLU(6)
    nn.init.uniform_(p.weight, 0.05, 0.5)
    x = torch.randn(2, 6, 5)
    with torch.no_grad():
        assert torch.allclose(ExportPReLU(p)(x), p(x), atol=1e-6)


def test_unknown_mix_is_a_clear_error():
    from qsa.export import ExportError

    with pytest.raises(ExportError, match="mix='dense'.*conv.*matmul"):
        prepare_for_export(nn.Sequential(QuaternionLinear(8, 8)), mix="dense")


def test_layer_norm_export_form_matches():
    from qsa.export.rewrite import ExportQuaternionLayerNorm
    from qsa.models.qtransformer import QuaternionLayerNorm

    torch.manual_seed(0)
    norm = QuaternionLayerNorm(24)
    nn.init.uniform_(norm.gain, 0.5, 2.0)
    x = torch.randn(3, 5, 24) * 3 + 1
    with torch.no_grad():
        want = norm(x)
        ex = prepare_for_export(nn.Sequential(QuaternionLinear(24, 24), norm), fold_norm=True)
        assert isinstance(ex[1], ExportQuaternionLayerNorm)
        assert isinstance(prepare_for_export(nn.Sequential(norm))[0], QuaternionLayerNorm)
        got = ex[1](x)
        assert torch.allclose(ExportQuaternionLayerNorm(norm)(x), want, atol=1e-5)
        assert torch.allclose(got, want, atol=1e-5)
        z = torch.zeros(2, 24)  # silence: finite, zero
        assert torch.equal(ExportQuaternionLayerNorm(norm)(z), norm(z))
        lin = prepare_for_export(nn.Sequential(norm), fold_norm=True, norm_reduce="linear")[0]
        assert lin.reduce == "linear"
        assert torch.allclose(lin(x), want, atol=1e-5)
        assert torch.equal(lin(z), norm(z))
    with pytest.raises(ExportError, match="norm_reduce='sum'.*mean.*linear"):
        prepare_for_export(nn.Sequential(norm), fold_norm=True, norm_reduce="sum")


class _NormAttention(nn.Module):
    """Quaternion layers, norms and an unmasked (frequency-style) attention, as in qcgan."""

    def __init__(self):
        super().__init__()
        from qsa.layers import QuaternionSelfAttention
        from qsa.models.qtransformer import QuaternionLayerNorm

        self.inp = QuaternionLinear(16, 32)
        self.norm = QuaternionLayerNorm(32)
        self.attn = QuaternionSelfAttention(32, 2, causal=False, window=None)
        self.norm2 = QuaternionLayerNorm(32)

    def forward(self, x):
        h = self.norm(self.inp(x))
        return self.norm2(h + self.attn(h))


def test_executorch_lowering_delegates_norms_and_attention():
    """ExecuTorch's export form leaves nothing of a norm or an attention outside XNNPACK: the
    norms' means as linear ops, the attention's matmuls as 3-D bmm (a 4-D matmul exports
    with expand copies), no mask when every key is visible. One delegate call, the numbers of
    the eager module."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from qsa.export.exporters import ExecuTorchExporter

    torch.manual_seed(0)
    m = _NormAttention().eval()
    ex = prepare_for_export(
        m, fold_norm=ExecuTorchExporter.fold_norm, norm_reduce=ExecuTorchExporter.norm_reduce
    )
    x = torch.randn(1, 17, 16)
    with torch.no_grad():
        assert torch.allclose(ex(x), m(x), atol=1e-5)
    edge = to_edge_transform_and_lower(
        torch.export.export(ex, (x,)), partitioner=[XnnpackPartitioner()]
    )
    outside = [
        str(n.target)
        for n in edge.exported_program().graph.nodes
        if n.op == "call_function" and "getitem" not in str(n.target)
    ]
    assert outside == ["executorch_call_delegate"], outside


def test_single_row_bias_is_added_in_place():
    """A streaming step's quaternion linear (one row): bias added on the (4, n_out) rows."""
    torch.manual_seed(0)
    layer = QuaternionLinear(16, 12).eval()
    nn.init.normal_(layer.bias)
    ex = prepare_for_export(nn.Sequential(layer), mix="matmul")
    for shape in [(1, 16), (1, 1, 16), (3, 16)]:
        x = torch.randn(*shape)
        with torch.no_grad():
            assert torch.allclose(ex(x), layer(x), atol=1e-5), shape


def test_norm_gains_fold_into_the_linears_they_feed():
    """fold_norm: a norm whose module names it in ``norm_feeds`` hands its gain to the
    quaternion linears it feeds (one MUL fewer per norm), with the same numbers; a norm not
    named keeps its gain."""
    from qsa.export.rewrite import ExportQuaternionLayerNorm
    from qsa.models.qcgan import QuaternionConformer, QuaternionFeedForward

    torch.manual_seed(0)
    block = QuaternionConformer(16, 2, 2, 3, causal=True, window=8).eval()
    for m in block.modules():
        if hasattr(m, "gain"):
            nn.init.uniform_(m.gain, 0.5, 2.0)
    x = torch.randn(2, 6, 16)
    with torch.no_grad():
        want = block(x)
        ex = prepare_for_export(block, fold_norm=True)
        norms = {n: m for n, m in ex.named_modules() if isinstance(m, ExportQuaternionLayerNorm)}
        folded = sorted(n for n, m in norms.items() if not m.apply_gain)
        assert folded == ["attn_norm", "conv.norm", "ff1.norm", "ff2.norm"]
        assert norms["norm"].apply_gain and norms["conv.norm2"].apply_gain  # not into a linear
        assert torch.allclose(ex(x), want, atol=1e-5)
        ff = QuaternionFeedForward(8, 2)
        ff.norm_feeds = (("norm", ("down",)),)  # a wrong width: left alone, not folded
        ex_ff = prepare_for_export(nn.Sequential(ff), fold_norm=True)
        assert ex_ff[0].norm.apply_gain


@pytest.mark.parametrize("mix", ["conv", "matmul"])
@pytest.mark.parametrize("int8", [False, True])
@pytest.mark.parametrize("filler", ["concat", "same"])
def test_upsample_stage_is_one_conv(mix, int8, filler):
    """QC-GAN's polyphase upsampling (an even 1-tap and an odd 2-tap quaternion conv,
    interleaved) exports as one mixing and one conv with both phases as output channels:
    the same numbers offline (batch, several frames) and for a streaming row, fp32 and the
    packed int8 reference, with the bin past the end appended (concat) or the conv's own
    padding (same); the components stay stored once (only the even phase's zero taps are
    added)."""
    from qsa.export.rewrite import ExportQuaternionUpsample
    from qsa.models.qcgan import QuaternionUpsample

    torch.manual_seed(3)
    up = QuaternionUpsample(12, 8).eval()
    for m in (up.even, up.odd):
        nn.init.normal_(m.bias)
    model = nn.Sequential(up)
    if int8:
        model = quantize_(model, Int8Config())
    ex = prepare_for_export(model, mix=mix, upsample_filler=filler)
    assert isinstance(ex[0], ExportQuaternionUpsample) and ex[0].filler == filler
    n_conv = sum(isinstance(m, ExportQuaternionLayer) for m in ex.modules())
    assert n_conv == 0  # one module, one conv
    w = ex[0].weight
    assert tuple(w.shape) == (2 * 2, 4 * 3, 1, 2)  # (phase, o) x (a, i) x 1 x 2 taps
    assert torch.count_nonzero(w[: 2, :, :, 1]) == 0  # the even phase's zero taps
    packed = 4 * 2 * 3 * (1 + 2)  # four components of (n_out, n_in) x (1 + 2 taps)
    nonzero = int((w != 0).sum())  # an int8 weight may round to zero
    assert nonzero == packed if not int8 else packed - 4 <= nonzero <= packed
    for shape in ((2, 12, 3, 9), (1, 12, 1, 17)):
        x = torch.randn(*shape)
        with torch.no_grad():
            want, got = model(x), ex(x)
        assert got.shape == want.shape == (shape[0], 8, shape[2], 2 * shape[3] - 1)
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)


def test_upsample_export_form_checks_its_layers():
    from qsa.export.rewrite import ExportQuaternionUpsample
    from qsa.models.qcgan import QuaternionUpsample

    up = QuaternionUpsample(8, 4)
    up.odd = QuaternionConv2d(8, 4, (1, 3))
    with pytest.raises(ExportError, match=r"\(1, 2\) odd"):
        ExportQuaternionUpsample(up)
    up = QuaternionUpsample(8, 4)
    up.odd = QuaternionConv2d(8, 8, (1, 2))
    with pytest.raises(ExportError, match="channels differ"):
        ExportQuaternionUpsample(up)
    with pytest.raises(ExportError, match="filler='zeros'"):
        ExportQuaternionUpsample(QuaternionUpsample(8, 4), filler="zeros")
    with pytest.raises(ExportError, match="upsample_filler='zeros'"):
        prepare_for_export(nn.Sequential(QuaternionUpsample(8, 4)), upsample_filler="zeros")


@pytest.mark.parametrize("heads", [1, 4])
def test_shared_score_attention_step_without_head_moves(heads):
    """prepare_for_export(mix="matmul") gives a causal windowed shared-score attention the
    head-select step (every head reads the whole token, no per-head reshapes/transposes):
    the same outputs and the same state as the source's step over a stream longer than the
    window (cache filling, then sliding), and the same offline forward; conv-mix exports and
    other attention kinds keep the source module."""
    from qsa.export.rewrite import ExportSharedScoreAttention
    from qsa.layers.attention import QuaternionSelfAttention

    torch.manual_seed(heads)
    attn = QuaternionSelfAttention(16 * heads, heads, "shared", causal=True, window=5).eval()
    for m in (attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj):
        nn.init.normal_(m.bias)
    ex = prepare_for_export(nn.Sequential(attn), mix="matmul")[0]
    assert isinstance(ex, ExportSharedScoreAttention)
    assert isinstance(ex.q_proj, ExportQuaternionLayer)
    state, ex_state = attn.init_state(2), ex.init_state(2)
    xs = torch.randn(2, 9, 16 * heads)
    with torch.no_grad():
        for t in range(xs.shape[1]):
            want, state = attn.step(xs[:, t : t + 1], state)
            got, ex_state = ex.step(xs[:, t : t + 1], ex_state)
            assert torch.allclose(got, want, atol=1e-5), t
            for a, b in zip(ex_state, state, strict=True):
                assert torch.allclose(a, b, atol=1e-5), t
        assert torch.allclose(ex(xs), attn(xs), atol=1e-5)
    assert not isinstance(prepare_for_export(nn.Sequential(attn), mix="conv")[0],
                          ExportSharedScoreAttention)
    ham = QuaternionSelfAttention(16, 1, "hamilton", causal=True, window=5)
    assert not isinstance(prepare_for_export(nn.Sequential(ham), mix="matmul")[0],
                          ExportSharedScoreAttention)
    with pytest.raises(ExportError, match="shared-score, causal"):
        ExportSharedScoreAttention(QuaternionSelfAttention(16, 1, "shared"))
