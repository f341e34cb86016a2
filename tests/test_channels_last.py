"""QC-GAN's bin-major network step (qsa.export.channels_last), the form the LiteRT and
TFLite-Micro int8 exporters convert: the same numbers as the export form it re-views, and
the graph it gives has no layout moves around its convs."""

import pytest
import torch

from qsa.export.channels_last import ChannelsLastNetworkStep, channels_last_reason
from qsa.export.errors import ExportError
from qsa.export.rewrite import prepare_for_export
from qsa.models.qcgan import QCGAN, QCGANConfig, qcgan_089m, qcgan_35k

LITERT_FORM = {"mix": "matmul", "fold_norm": True, "norm_reduce": "mean",
               "upsample_filler": "same"}


def _net(cfg, seed=0):
    torch.manual_seed(seed)
    model = QCGAN(cfg).eval()
    with torch.no_grad():  # trained-looking biases, gains and slopes, not the init's zeros
        for name, p in model.named_parameters():
            if name.endswith(("bias", "gain")) or "acts" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model.step_module().network()


def _inputs(net, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = net.example_input(1)
    x = torch.randn(x.shape, generator=g)
    x[:, 0] = 0.0  # the real channel of the quaternion input is zero
    state = [torch.randn(s.shape, generator=g) for s in net.init_state(1)]
    return x, state


@pytest.mark.parametrize("cfg", [qcgan_35k(), qcgan_089m(causal=True)],
                         ids=["qcgan-35k", "qcgan-0.89m-causal"])
def test_same_numbers_as_the_export_form_and_the_source(cfg):
    """Every output (mask, residual, each block's new state) equals the prepared export
    form's and the source network's within fp32 rounding; 0.89m-causal covers two blocks and
    two frequency heads."""
    net = _net(cfg)
    form = prepare_for_export(net, **LITERT_FORM)
    cl = ChannelsLastNetworkStep(form).eval()
    x, state = _inputs(net)
    with torch.no_grad():
        want, got, src = form(x, *state), cl(x, *state), net(x, *state)
    assert len(got) == len(want) == 2 + 4 * cfg.num_blocks
    for w, g, s in zip(want, got, src, strict=True):
        assert g.shape == w.shape
        assert torch.allclose(g, w, atol=2e-5, rtol=1e-5), float((g - w).abs().max())
        assert torch.allclose(g, s, atol=2e-5, rtol=1e-5), float((g - s).abs().max())


def test_forms_without_a_channels_last_step_are_named():
    net = _net(qcgan_35k())
    assert channels_last_reason(prepare_for_export(net, **LITERT_FORM)) is None
    for kw, words in [
        ({"upsample_filler": "concat"}, "upsample_filler='concat'"),
        ({"norm_reduce": "linear"}, "norm_reduce='linear'"),
        ({"fold_norm": False}, "fold_norm=True"),
    ]:
        form = prepare_for_export(net, **{**LITERT_FORM, **kw})
        assert words in channels_last_reason(form)
        with pytest.raises(ExportError, match="no channels-last network step"):
            ChannelsLastNetworkStep(form)
    bins = QCGAN(QCGANConfig(time_path="bins", time_heads=1)).step_module().network()
    assert "time_path='bins'" in channels_last_reason(prepare_for_export(bins, **LITERT_FORM))
    assert "not QC-GAN's network step" in channels_last_reason(torch.nn.Linear(4, 4))


def test_one_frame_only():
    form = prepare_for_export(_net(qcgan_35k()), **LITERT_FORM)
    cl = ChannelsLastNetworkStep(form)
    x, state = _inputs(form)
    with pytest.raises(ExportError, match=r"one frame \(1, 4, 1, F\)"):
        cl(torch.cat([x, x]), *state)


@pytest.mark.slow
def test_int8_simulation_keeps_the_source_layouts_precision():
    """The TFLite-Micro exporter's PT2E int8 model of the bin-major step, simulated in torch on
    calibration frames, is as close to fp32 as the source layout's (qcgan-0.89m-causal: two
    blocks and two frequency heads; a head-select form of the multi-head frequency attention
    lost 14 dB here, 12-05)."""
    import numpy as np

    import qsa
    from qsa.export.exporters import EXPORTERS

    torch.manual_seed(0)
    model = qsa.load("qcgan-0.89m-causal")
    sqnr = {}
    for layout in ("source", "channels_last"):
        cls = type("Exp", (EXPORTERS["tflm"],), {"layout": layout})
        exp = cls(model, "int8", "/nonexistent-unused", model_name="qcgan-0.89m-causal")
        for stage in ("prepare", "export", "quantize"):
            getattr(exp, stage)()
        assert (type(exp.export_step).__name__ == "ChannelsLastNetworkStep") == (
            layout == "channels_last")
        ref = err = 0.0
        for inp in exp.calibration_inputs(max_steps=60)[-30:]:
            with torch.no_grad():
                a, b = exp.export_step(*inp), exp.quantized(*inp)
            for i in range(2):  # mask and residual
                ref += float((a[i] ** 2).sum())
                err += float(((a[i] - b[i]) ** 2).sum())
        sqnr[layout] = 10 * np.log10(ref / err)
    assert sqnr["channels_last"] >= 25.0, sqnr
    assert sqnr["channels_last"] >= sqnr["source"] - 3.0, sqnr
