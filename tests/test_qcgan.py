"""QC-GAN generators and the MetricGAN discriminator: sizes, cost, causality, streaming ==
offline, fixed-shape state, export of the streaming step, losses and gradients."""

import dataclasses

import pytest
import torch

from qsa.config import config_from_dict, config_to_dict
from qsa.errors import ConfigError
from qsa.models.discriminator import (
    DiscriminatorConfig,
    GeneratorLosses,
    LossConfig,
    MetricDiscriminator,
    discriminator_loss,
)
from qsa.models.qcgan import (
    QCGAN,
    QCGANConfig,
    StepModule,
    count_parameters,
    streaming_macs_per_second,
)
from qsa.models.registry import build_model, preset_config

TARGETS = {"qcgan-35k": 35_000, "qcgan-0.89m": 890_000, "qcgan-0.89m-causal": 890_000}
CAUSAL = ["qcgan-35k", "qcgan-0.89m-causal"]


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _model(name: str, **changes) -> QCGAN:
    torch.manual_seed(0)
    cfg = preset_config(name)
    if changes:
        cfg = dataclasses.replace(cfg, **changes)
    return build_model(cfg).eval()


def _small_bins() -> QCGAN:
    """The per-bin time path (CMGAN's) on qcgan-0.89m-causal's STFT at a test size, with a
    short window so that the attention cache evicts within a few steps."""
    return _model(
        "qcgan-0.89m-causal",
        time_path="bins",
        enc_channels=(8, 16),
        num_blocks=2,
        time_heads=1,
        freq_heads=1,
        window=4,
        time_kernel=3,
    )


def _stream(model: QCGAN, x: torch.Tensor) -> torch.Tensor:
    hop = model.hop
    state = model.init_state(x.shape[0])
    shapes = [s.shape for s in state]
    outs = []
    with torch.no_grad():
        for t in range(x.shape[1] // hop):
            y, state = model.step(x[:, t * hop : (t + 1) * hop], state)
            assert [s.shape for s in state] == shapes  # fixed-shape state
            outs.append(y)
    return torch.cat(outs, 1)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_param_counts_within_3_percent(name):
    n = count_parameters(_model(name))
    assert abs(n - TARGETS[name]) <= 0.03 * TARGETS[name], n


def test_35k_compute_and_latency_budget():
    m = _model("qcgan-35k")
    assert streaming_macs_per_second(m) <= 40e6
    assert m.algorithmic_latency_samples / m.config.sample_rate <= 0.020
    assert m.config.causal and m.lookahead_samples == m.config.n_fft - m.hop  # no extra frames


def test_089m_causal_latency():
    m = _model("qcgan-0.89m-causal")
    assert m.algorithmic_latency_samples / m.config.sample_rate <= 0.020


@pytest.mark.parametrize("name", CAUSAL)
def test_causality(name):
    m = _model(name)
    hop = m.hop
    n = 24 * hop
    torch.manual_seed(1)
    a = torch.randn(1, n) * 0.1
    b = a.clone()
    cut = 16 * hop
    b[:, cut:] = torch.randn(1, n - cut)
    with torch.no_grad():
        ya, yb = m(a), m(b)
    ok = cut - m.lookahead_samples  # output before this sample sees only the shared prefix
    assert (ya[:, :ok] - yb[:, :ok]).abs().max() < 1e-5
    assert (ya[:, cut:] - yb[:, cut:]).abs().max() > 1e-3  # and the suffix does matter


def _stream_matches_offline(m, steps: int, batch: int):
    """Stream ``steps`` hops of noise through ``m``; assert the stream equals the offline
    output delayed by ``m.delay_samples``; return (input, streamed output)."""
    torch.manual_seed(2)
    x = torch.randn(batch, steps * m.hop) * 0.1
    with torch.no_grad():
        y_off = m(x)
    y_str = _stream(m, x)
    d = m.delay_samples
    assert (y_str[:, d:] - y_off[:, : x.shape[1] - d]).abs().max() < 1e-4
    return x, y_str


@pytest.mark.parametrize("which", ["qcgan-35k", "bins-small", "qcgan-0.89m-causal"])
def test_streaming_equals_offline(which):
    if which == "bins-small":
        m, steps, batch = _small_bins(), 20, 2
    elif which == "qcgan-35k":
        m, steps, batch = _model(which), 40, 2  # > window (32): the cache evicts
    else:
        m, steps, batch = _model(which), 6, 1
    _stream_matches_offline(m, steps, batch)


def test_non_causal_has_no_step_but_offline_works():
    m = _model("qcgan-0.89m")
    with pytest.raises(ConfigError, match="causal"):
        m.init_state(1)
    x = torch.randn(1, 1600) * 0.1
    with torch.no_grad():
        out = m.enhance_spec(x)
    assert out.wave.shape == x.shape
    assert out.spec.shape == out.spec_compressed.shape == (1, 161, m.stft.num_frames(1600))


@pytest.mark.slow
def test_export_step_module_35k():
    m = _model("qcgan-35k")
    step = m.step_module()
    assert isinstance(step, StepModule) and step.hop == 128
    state = step.init_state(1)
    frame = torch.randn(1, step.hop) * 0.1
    ep = torch.export.export(step, (frame, *state), strict=False)
    ops = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert not any("stft" in o or "fft" in o or "complex" in o for o in ops), ops
    with torch.no_grad():
        want = step(frame, *state)
    got = ep.module()(frame, *state)
    assert len(got) == len(want) == 1 + len(state)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and (g - w).abs().max() < 1e-5


def test_discriminator_shape_and_range():
    torch.manual_seed(3)
    d = MetricDiscriminator(DiscriminatorConfig())
    c, e = torch.rand(3, 40, 201), torch.rand(3, 40, 201)
    y = d(c, e)
    assert y.shape == (3,)
    assert bool(((y > 0) & (y < 1)).all())
    with pytest.raises(ValueError, match=r"\(B, T, F\)"):
        d(c, e[:, :20])


def test_losses_and_gradients_flow():
    torch.manual_seed(4)
    g = _model("qcgan-35k").train()
    d = MetricDiscriminator()
    losses = GeneratorLosses(LossConfig())
    clean = torch.randn(2, 4000) * 0.1
    noisy = clean + 0.05 * torch.randn(2, 4000)
    enh = g(noisy)
    cs, es = losses.spec(clean), losses.spec(enh)
    d_fake = d(losses.mag(cs), losses.mag(es))
    loss, parts = losses.generator_loss(clean, enh, cs, es, d_enhanced=d_fake)
    assert set(parts) == {"magnitude", "complex", "time", "metric"}
    loss.backward()
    missing = [n for n, p in g.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing, missing
    assert all(torch.isfinite(p.grad).all() for p in g.parameters())
    d.zero_grad()
    d_loss = discriminator_loss(
        d(losses.mag(cs), losses.mag(cs)),
        d(losses.mag(cs), losses.mag(es.detach())),
        torch.full((2,), 0.3),
    )
    d_loss.backward()
    assert all(p.grad is not None for p in d.parameters())


def test_configs_validate_and_round_trip():
    for name in TARGETS:
        cfg = preset_config(name)
        assert config_from_dict(config_to_dict(cfg)) == cfg
    with pytest.raises(ConfigError, match="window"):
        QCGANConfig(causal=True, window=None)
    with pytest.raises(ConfigError, match="multiple"):
        QCGANConfig(enc_channels=(8, 10))
    with pytest.raises(ConfigError, match="halved"):
        QCGANConfig(n_fft=256, enc_channels=(8,) * 8)
    with pytest.raises(ConfigError, match="loss weights"):
        LossConfig(time_weight=-1.0)
    with pytest.raises(ConfigError, match="QCGANConfig"):
        QCGAN(DiscriminatorConfig())


def test_receptive_field_bounds_the_past():
    """Offline output of a segment that starts receptive_field_samples early equals the
    output of the whole signal (what chunked file enhancement relies on)."""
    m = _model("qcgan-35k")
    rf, hop = m.receptive_field_samples, m.hop
    assert rf % hop == 0
    torch.manual_seed(5)
    x = torch.randn(1, rf + 24 * hop) * 0.1
    keep = 8 * hop
    with torch.no_grad():
        y_full = m(x)
        y_seg = m(x[:, -(rf + keep) :])
    assert (y_seg[:, -keep:] - y_full[:, -keep:]).abs().max() < 1e-5


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_packed_file_round_trip_and_int8_streaming(tmp_path, precision):
    from qsa.quantize import load_packed, save_packed

    m = _model("qcgan-35k")
    path = save_packed(m, tmp_path / f"qcgan-35k-{precision}.qsa", precision=precision)
    q = load_packed(path).eval()
    torch.manual_seed(6)
    x = torch.randn(1, 40 * m.hop) * 0.1
    with torch.no_grad():
        y, yq = m(x), q(x)
    sqnr = 10 * torch.log10(y.pow(2).sum() / (y - yq).pow(2).sum().clamp_min(1e-20))
    assert sqnr > (30.0 if precision == "int8" else 100.0)
    d = q.delay_samples
    assert (_stream(q, x)[:, d:] - yq[:, : x.shape[1] - d]).abs().max() < 1e-4


def test_module_moves_and_casts_like_any_torch_module():
    """.to() / .cpu() / .double() go through nn.Module._apply (a model method of that name
    once shadowed it and broke them): the float64 model computes what the float32 one does."""
    import qsa

    m = qsa.load("qcgan-35k").eval()
    x = 0.1 * torch.randn(1, 4000)
    with torch.no_grad():
        y32 = m(x)
        m64 = m.cpu().to(torch.float64)
        assert all(p.dtype == torch.float64 for p in m64.parameters())
        y64 = m64(x.double())
    assert torch.allclose(y64.float(), y32, atol=1e-4)


def test_training_device_is_checked():
    import pytest

    from qsa.errors import ConfigError
    from qsa.train.se import TrainConfig, resolve_device

    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ConfigError, match="device='tpu'"):
        TrainConfig(device="tpu")
    if not torch.cuda.is_available():
        assert resolve_device("auto") == torch.device("cpu")
        with pytest.raises(ConfigError, match="no CUDA device"):
            resolve_device("cuda")


@pytest.mark.parametrize("name", ["qcgan-35k", "qcgan-0.89m"])
def test_training_path_is_the_same_function(name):
    """Training runs the quaternion layers on their dense path (set_quaternion_path), export
    and inference on the packed one: same outputs and same gradients on every parameter."""
    from qsa.layers import set_quaternion_path

    m = _model(name)
    x = torch.randn(2, 4000) * 0.1
    grads = {}
    for path in ("packed", "dense"):
        assert set_quaternion_path(m, path) > 10
        m.zero_grad()
        y = m(x)
        y.pow(2).mean().backward()
        grads[path] = (y.detach(), {n: p.grad.clone() for n, p in m.named_parameters()})
    (yp, gp), (yd, gd) = grads["packed"], grads["dense"]
    assert torch.allclose(yp, yd, atol=1e-5, rtol=1e-4)
    for n in gp:
        assert torch.allclose(gp[n], gd[n], atol=1e-6, rtol=1e-3), n
    with pytest.raises(ValueError, match="expected one of"):
        set_quaternion_path(m, "fast")


# -- deep filtering (df_taps) ------------------------------------------------------------------
def _df_model(taps: int = 2, **changes) -> QCGAN:
    """qcgan-35k with ``taps`` deep-filter taps whose head is randomised (a fresh model's taps
    are 0, which would test nothing)."""
    m = _model("qcgan-35k", df_taps=taps, **changes)
    with torch.no_grad():
        head = m.complex_decoder.head
        head.weight[2:].normal_(0.0, 0.5)
        head.bias[2:].normal_(0.0, 0.3)
    return m


def test_deep_filter_config_and_cost():
    for bad in (-1, 1.5, True, 17):
        with pytest.raises(ConfigError, match="df_taps"):
            QCGANConfig(df_taps=bad)
    cfg = QCGANConfig(df_taps=2)
    assert config_from_dict(config_to_dict(cfg)) == cfg
    m0, m2 = _model("qcgan-35k"), _model("qcgan-35k", df_taps=2)
    # the complex decoder's 1x1 head gets 2K more outputs: 4 weights + 1 bias each
    assert count_parameters(m2) - count_parameters(m0) == 2 * 2 * 5
    assert m2.complex_decoder.head.weight[2:].abs().max() == 0  # taps start at 0
    assert streaming_macs_per_second(m2) <= 40e6
    assert m2.n_dsp_state == m2.step_module().n_dsp_state == 3 and m0.n_dsp_state == 2
    st = m2.init_state(2)
    assert st[2].shape == (2, 2, 2, m2.config.n_freq)
    assert len(m2.step_module().network().init_state(1)) == len(st) - 3


def test_deep_filter_applies_causal_complex_taps():
    """Y_c = mask X_c + res + sum_k C_k X_c(t - k), complex products, zero frames before the
    start, taps in (-1, 1) (tanh)."""
    m = _df_model(2)
    torch.manual_seed(7)
    x = torch.randn(1, 12 * m.hop) * 0.1
    with torch.no_grad():
        re, im = m.stft.stft(x)
        feats, mag_c, cos, sin = m._features(re, im)
        h, skips = m._encode(feats)
        for blk in m.blocks:
            h = blk(h)
        mask, res = m._heads(h, skips)
        y_c = m.enhance_spec(x).spec_compressed.transpose(1, 2)  # (B, T, F)
    assert res.shape[1] == 6 and res[:, 2:].abs().max() < 1 and res[:, 2:].abs().max() > 0.1
    xc = torch.complex(mag_c * cos, mag_c * sin)  # (B, T, F)
    want = mask * xc + torch.complex(res[:, 0], res[:, 1])
    for k in (1, 2):
        past = torch.cat([torch.zeros_like(xc[:, :k]), xc[:, :-k]], dim=1)  # X_c(t - k)
        want = want + torch.complex(res[:, 2 * k], res[:, 2 * k + 1]) * past
    assert (y_c - want).abs().max() < 1e-5


@pytest.mark.parametrize("taps", [1, 2])
def test_deep_filter_streaming_equals_offline(taps):
    m, steps, batch = _df_model(taps), 36, 2  # > window (32): the cache evicts
    x, y_str = _stream_matches_offline(m, steps, batch)
    # the StepModule / split form streams the same
    step = m.step_module()
    state, outs = step.init_state(batch), []
    with torch.no_grad():
        for t in range(steps):
            o = step(x[:, t * m.hop : (t + 1) * m.hop], *state)
            outs.append(o[0])
            state = o[1:]
    assert (torch.cat(outs, 1) - y_str).abs().max() < 1e-6


def test_deep_filter_causality_and_receptive_field():
    m = _df_model(2)
    hop = m.hop
    torch.manual_seed(1)
    a = torch.randn(1, 24 * hop) * 0.1
    b = a.clone()
    cut = 16 * hop
    b[:, cut:] = torch.randn(1, 24 * hop - cut)
    with torch.no_grad():
        ya, yb = m(a), m(b)
    ok = cut - m.lookahead_samples
    assert (ya[:, :ok] - yb[:, :ok]).abs().max() < 1e-5
    assert m.receptive_field_samples == _model("qcgan-35k").receptive_field_samples


def test_deep_filter_is_refused_where_it_is_not_exported_yet(tmp_path):
    """The channels-last network (TFLite-Micro) and the C export's DSP have no deep filter:
    exporting a df_taps > 0 model there is an ExportError naming df_taps, not a wrong
    artifact."""
    from qsa.export.channels_last import channels_last_reason
    from qsa.export.errors import ExportError
    from qsa.export.exporters import EXPORTERS

    m = _df_model(2)
    assert "df_taps=2" in channels_last_reason(m.step_module().network())
    exp = EXPORTERS["tflm"](m, "int8", tmp_path / "tflm")
    with pytest.raises(ExportError, match="df_taps=2.*not exported"):
        exp.prepare()


def _pf_model(gain_exponent: float) -> QCGAN:
    """qcgan-35k with the post-filter and a mask head that attenuates (a fresh model's mask is
    ~1, where the post-filter does nothing)."""
    m = _model("qcgan-35k", gain_exponent=gain_exponent)
    with torch.no_grad():
        m.mask_decoder.head.bias.fill_(-0.3)
    return m


def test_post_filter_raises_the_gains_below_one_to_the_exponent():
    """Each bin's linear gain G = |Y| / |X| < 1 becomes G^g, bins with G >= 1 stay (g = 1: the
    network's output as it was); training runs through it (gradients reach the network)."""
    for bad in (0.5, 0.99, 4.5, True, "1.3"):
        with pytest.raises(ConfigError, match="gain_exponent"):
            dataclasses.replace(preset_config("qcgan-35k"), gain_exponent=bad)
    m, g = _pf_model(1.6), 1.6
    plain = _model("qcgan-35k")
    plain.load_state_dict(m.state_dict())
    torch.manual_seed(3)
    x = torch.randn(2, 20 * m.hop) * 0.1
    with torch.no_grad():
        y0 = plain.enhance_spec(x).spec  # (B, F, T) linear, no post-filter
        y1 = m.enhance_spec(x).spec
        re, im = m.stft.stft(x)
        xs = torch.complex(re, im).transpose(1, 2)  # (B, F, T)
    gain0 = y0.abs() / xs.abs().clamp_min(1e-12)
    low = gain0 < 0.9
    assert low.float().mean() > 0.2 and (~low).any()  # both kinds of bins are present
    want = torch.where(gain0 < 1, y0 * gain0 ** (g - 1), y0)
    # the compressed domain carries a 1e-8 floor: compare where the bins have energy
    live = xs.abs() > 1e-3
    err = (y1 - want).abs()[live] / xs.abs()[live]
    assert err.max() < 1e-4, float(err.max())
    assert (y1.abs()[live & low] < y0.abs()[live & low]).all()
    m.train()
    m(x).square().mean().backward()
    m.eval()
    grad = m.mask_decoder.head.bias.grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_post_filter_streams_like_offline():
    m = _pf_model(1.6)
    _stream_matches_offline(m, 36, 2)
