"""The differentiable PESQ-WB proxy (qsa.models.pesq_loss) against the real ITU-T P.862.2
implementation (the `pesq` package) on synthetic-corpus speech."""

from __future__ import annotations

import numpy as np
import pytest
import torch


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    from qsa.data.readers import read_synth
    from qsa.data.synth import make_corpus

    out = tmp_path_factory.mktemp("synth") / "c"
    make_corpus(out, 0.02, seed=11, reverb=True, workers=0, progress=False)
    return [p.load() for p in read_synth(out, split="train")[:6]]


def _conditions(noisy, clean, rng):
    """Degradations of one utterance across the PESQ range: the corpus' noisy input, white
    noise at three SNRs, a 2 kHz low-pass, and half-way mixes of clean and noisy."""
    out = [noisy, 0.5 * (noisy + clean), 0.8 * clean + 0.2 * noisy]
    p = np.mean(clean ** 2)
    for snr in (0.0, 10.0, 25.0):
        out.append(clean + rng.normal(0, np.sqrt(p / 10 ** (snr / 10)), len(clean)))
    spec = np.fft.rfft(clean)
    spec[np.fft.rfftfreq(len(clean), 1 / 16000) > 2000] = 0
    out.append(np.fft.irfft(spec, n=len(clean)))
    return [o.astype(np.float32) for o in out]


def test_proxy_tracks_real_pesq_wb(pairs):
    """Across 6 utterances x 7 degradations the proxy's MOS ranks real PESQ-WB (Spearman >=
    0.85) and lands near it (mean absolute error <= 0.35 MOS, where a constant guess of the
    mean is off by ~0.6): the loss pulls toward what PESQ rewards."""
    from scipy.stats import spearmanr

    from qsa.metrics.scores import pesq_score
    from qsa.models.pesq_loss import pesq_proxy

    rng = np.random.default_rng(0)
    real, proxy = [], []
    for noisy, clean in pairs:
        n = min(len(clean), 4 * 16000)
        clean, noisy = clean[:n], noisy[:n]
        for deg in _conditions(noisy, clean, rng):
            real.append(pesq_score(clean, deg))
            c, d = torch.from_numpy(clean)[None].double(), torch.from_numpy(deg)[None].double()
            proxy.append(float(pesq_proxy(c, d)[0]))
    real, proxy = np.array(real), np.array(proxy)
    assert real.max() - real.min() > 1.5  # the conditions span the scale
    rho = spearmanr(real, proxy)[0]
    mae = np.abs(real - proxy).mean()
    assert rho >= 0.85, (rho, list(zip(real.round(2), proxy.round(2), strict=True)))
    assert mae <= 0.35, (mae, np.abs(real - real.mean()).mean())


def test_proxy_is_differentiable_and_its_gradient_raises_pesq(pairs):
    """Identical waves score PESQ's maximum (4.64); a few gradient steps on the enhanced wave
    raise both the proxy and the real PESQ-WB of a noisy utterance; the gradient is finite."""
    from qsa.metrics.scores import pesq_score
    from qsa.models.pesq_loss import pesq_loss, pesq_proxy

    noisy, clean = pairs[0]
    n = min(len(clean), 3 * 16000)
    c = torch.from_numpy(clean[:n])[None].double()
    assert float(pesq_proxy(c, c.clone())[0]) == pytest.approx(4.644, abs=0.01)
    e = torch.from_numpy(noisy[:n])[None].double().requires_grad_(True)
    before = float(pesq_proxy(c, e.detach())[0])
    opt = torch.optim.Adam([e], lr=1e-4)
    for _ in range(30):
        opt.zero_grad()
        loss = pesq_loss(c, e)
        loss.backward()
        assert torch.isfinite(e.grad).all()
        opt.step()
    after = float(pesq_proxy(c, e.detach())[0])
    assert after > before + 0.02, (before, after)
    # the value ignores the degraded wave's level, and so must the gradient: a gradient with
    # a component along the wave itself would shrink (or grow) the output without end
    y = torch.from_numpy(noisy[:n])[None].double().requires_grad_(True)
    pesq_loss(c, y).backward()
    along = float((y.grad * y).sum() / (y.grad.norm() * y.detach().norm()))
    assert abs(along) < 0.01, along
    quiet = float(pesq_proxy(c, 1e-3 * y.detach())[0])
    assert quiet == pytest.approx(float(pesq_proxy(c, y.detach())[0]), abs=1e-3)
    real_before = pesq_score(clean[:n], noisy[:n])
    real_after = pesq_score(clean[:n], e.detach()[0].numpy().astype(np.float32))
    assert real_after > real_before + 0.02, (real_before, real_after)


def test_bad_input_is_refused_with_the_shapes():
    from qsa.models.pesq_loss import pesq_proxy

    with pytest.raises(ValueError, match=r"clean \(1, 16000\) and degraded \(1, 8000\)"):
        pesq_proxy(torch.zeros(1, 16000), torch.zeros(1, 8000))
    with pytest.raises(ValueError, match="4000 samples.*at least 5376"):
        pesq_proxy(torch.zeros(2, 4000), torch.zeros(2, 4000))


def test_pesq_weight_is_validated_and_reaches_the_loss(tmp_path):
    from qsa.errors import ConfigError
    from qsa.models.discriminator import GeneratorLosses, LossConfig
    from qsa.train.se import TrainConfig

    with pytest.raises(ConfigError, match="pesq_weight=-0.5"):
        LossConfig(pesq_weight=-0.5)
    with pytest.raises(ConfigError, match="pesq_weight=-1"):
        TrainConfig(out=str(tmp_path), pesq_weight=-1.0)
    with pytest.raises(ConfigError, match="segment_seconds=0.3.*at least 0.34 s.*--segment 0.5"):
        TrainConfig(out=str(tmp_path), pesq_weight=0.5, segment_seconds=0.3)
    TrainConfig(out=str(tmp_path), pesq_weight=0.0, segment_seconds=0.3)  # off: any crop
    from qsa.models.pesq_loss import MIN_SAMPLES, pesq_loss, pesq_proxy

    # the shortest input is taken; a silent reference gives PESQ's maximum and no gradient
    # (the real metric refuses it and the trainer's PESQ pool masks it); a silent output of
    # speech a finite loss and gradient
    z = torch.zeros(1, MIN_SAMPLES)
    assert float(pesq_proxy(z, torch.randn(1, MIN_SAMPLES))[0]) == pytest.approx(4.644, abs=0.01)
    y = torch.zeros(1, MIN_SAMPLES, requires_grad=True)
    loss = pesq_loss(torch.randn(1, MIN_SAMPLES) * 0.1, y)
    loss.backward()
    assert loss.item() > 0.9 and torch.isfinite(y.grad).all()
    with pytest.raises(ValueError, match="needs at least"):
        pesq_proxy(torch.zeros(1, MIN_SAMPLES - 1), torch.zeros(1, MIN_SAMPLES - 1))
    clean = torch.randn(2, 16000) * 0.1
    _, parts0 = GeneratorLosses(LossConfig()).generator_loss(clean, clean * 0.5)
    loss1, parts1 = GeneratorLosses(LossConfig(pesq_weight=0.5)).generator_loss(
        clean, clean + 0.1 * torch.randn(2, 16000))
    assert "pesq_proxy" not in parts0
    assert 0.2 < parts1["pesq_proxy"] <= 1.0 and torch.isfinite(loss1)
