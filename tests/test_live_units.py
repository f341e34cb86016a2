"""qsa.apps.live without an audio server: rings, processors, latency bookkeeping, CLI."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import scipy.signal as ss
import torch

from qsa.apps.live import (
    PassThrough,
    QuaternionLowpass,
    RuntimeProcessor,
    SpscRing,
    TorchStepProcessor,
    load_processor,
    lowpass_taps,
    pipeline_deficit,
)
from qsa.errors import ConfigError


# -- ring ------------------------------------------------------------------------------------
def test_ring_wraps_and_keeps_order():
    r = SpscRing(10, 2)
    out = np.zeros((7, 2), np.float32)
    seq = np.arange(200, dtype=np.float32)
    got, pos = [], 0
    for n in (3, 7, 5, 9, 1, 10, 4) * 4:
        w = r.write(np.stack([seq[pos : pos + n], -seq[pos : pos + n]], 1))
        pos += w
        k = r.read_into(out[: (n + 1) // 2 + 1])
        got.append(out[:k].copy())
    while r.available():
        k = r.read_into(out)
        got.append(out[:k].copy())
    g = np.concatenate(got)
    np.testing.assert_array_equal(g[:, 0], seq[:pos])
    np.testing.assert_array_equal(g[:, 1], -seq[:pos])
    assert r.write(np.zeros((11, 2), np.float32)) == 10  # never overwrites unread frames
    assert r.space() == 0 and r.skip(4) == 4 and r.space() == 4


def test_ring_mono_broadcasts_into_channels():
    r = SpscRing(8, 1)
    r.write(np.arange(5, dtype=np.float32))
    out = np.zeros((5, 2), np.float32)
    assert r.read_into(out) == 5
    np.testing.assert_array_equal(out, np.repeat(np.arange(5.0)[:, None], 2, 1))


def test_ring_two_threads_lose_nothing():
    """Producer and consumer threads hammering a small ring: the stream arrives intact."""
    r = SpscRing(97, 1)
    total = 30_000
    src = np.arange(total, dtype=np.float32)
    dst = np.zeros(total, np.float32)

    def produce():
        pos = 0
        while pos < total:
            w = r.write(src[pos : pos + 31])
            pos += w
            if not w:
                time.sleep(0)  # let the consumer have the GIL

    t = threading.Thread(target=produce)
    t.start()
    pos = 0
    buf = np.zeros((23, 1), np.float32)
    while pos < total:
        k = r.read_into(buf)
        dst[pos : pos + k] = buf[:k, 0]
        pos += k
        if not k:
            time.sleep(0)
    t.join()
    np.testing.assert_array_equal(dst, src)


# -- processors ------------------------------------------------------------------------------
def test_reference_lowpass_streams_like_its_closed_form():
    m = QuaternionLowpass()
    p = TorchStepProcessor(m, name="ref")
    assert p.hop == 128 and p.signal_delay_samples == 31
    x = np.random.default_rng(0).standard_normal(128 * 40).astype(np.float32)
    y = p.process_offline(x)
    ref = ss.lfilter(lowpass_taps(), 1.0, x).astype(np.float32)
    np.testing.assert_allclose(y, ref, atol=2e-6)
    with torch.no_grad():
        off = m(torch.from_numpy(x)[None])[0].numpy()
    np.testing.assert_allclose(off, ref, atol=2e-6)
    # causal: a different future leaves the past unchanged
    x2 = x.copy()
    x2[128 * 20 :] = 0
    np.testing.assert_array_equal(p.process_offline(x2)[: 128 * 20], y[: 128 * 20])


def test_lowpass_removes_high_band_noise():
    rng = np.random.default_rng(1)
    n = ss.sosfilt(ss.butter(8, 5000, "high", fs=16000, output="sos"), rng.standard_normal(16000))
    y = load_processor("reference-lowpass").process_offline(n.astype(np.float32))
    assert 10 * np.log10(np.mean(n**2) / np.mean(y**2)) > 30


class TupleStateNet(torch.nn.Module):
    """step(frame, state) with the state as one tuple (the qcgan convention)."""

    hop = 64

    def init_state(self, batch):
        return (torch.zeros(batch, 64), torch.zeros(batch, 1))

    def step(self, frame, state):
        prev, count = state
        return 0.5 * (frame + prev), (frame, count + 1)


def test_torch_adapter_both_state_conventions():
    x = np.random.default_rng(2).standard_normal(64 * 10).astype(np.float32)
    p = TorchStepProcessor(TupleStateNet())
    y = p.process_offline(x)
    ref = 0.5 * (x + np.concatenate([np.zeros(64, np.float32), x[:-64]]))
    np.testing.assert_allclose(y, ref, atol=1e-6)
    from qsa.export.toy import ToyStreamingQNet  # step(frame, c1, c2): spread state

    toy = ToyStreamingQNet().eval()
    p = TorchStepProcessor(toy)
    y = p.process_offline(x)
    with torch.no_grad():
        off = toy(torch.from_numpy(x)[None])[0].numpy()
    np.testing.assert_allclose(y, off, atol=1e-5)


def test_torch_adapter_int8_close_to_fp32():
    from qsa.export.toy import ToyStreamingQNet

    toy = ToyStreamingQNet().eval()
    x = 0.3 * np.random.default_rng(3).standard_normal(64 * 50).astype(np.float32)
    y = TorchStepProcessor(toy).process_offline(x)
    y8 = TorchStepProcessor(toy, precision="int8").process_offline(x)
    sqnr = 10 * np.log10(np.sum(y**2) / np.sum((y - y8) ** 2))
    assert sqnr > 20, sqnr


def test_runtime_adapter_on_the_export_runtime_interface():
    from qsa.export.runtimes import load_runtime

    m = QuaternionLowpass()
    rt = load_runtime("torch", m)
    p = RuntimeProcessor(rt, algorithmic_latency_samples=m.algorithmic_latency_samples)
    x = np.random.default_rng(4).standard_normal(128 * 12).astype(np.float32)
    np.testing.assert_allclose(p.process_offline(x), ss.lfilter(lowpass_taps(), 1.0, x), atol=2e-6)


def test_passthrough_and_bad_arguments():
    x = np.arange(256, dtype=np.float32)
    np.testing.assert_array_equal(PassThrough().process_offline(x), x)
    with pytest.raises(ConfigError, match="--runtime"):
        load_processor("passthrough", runtime="coreml")
    with pytest.raises(ConfigError, match="not a streaming model"):
        TorchStepProcessor(torch.nn.Linear(2, 2))


# -- latency bookkeeping ---------------------------------------------------------------------
@pytest.mark.parametrize("sr", [16000, 44100, 48000])
def test_pipeline_deficit_bounds(sr):
    block = round(sr * 0.01)
    d = pipeline_deficit(sr, 16000, block, 128, "HQ")
    assert d >= 0
    if sr == 16000:  # no resampling: only the hop framing holds samples back
        assert d <= 128 + block
    assert pipeline_deficit(sr, 16000, block, 128, "QQ") <= d + 2 * block


# -- CLI -------------------------------------------------------------------------------------
def qsa(*args):
    return subprocess.run(
        [sys.executable, "-m", "qsa.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_cli_help_and_argument_errors():
    r = qsa("live", "--help")
    assert r.returncode == 0 and "--input-file" in r.stdout and "--list-devices" in r.stdout
    r = qsa("live", "--block-ms", "0", "--model", "passthrough")
    assert r.returncode == 2 and "--block-ms 0" in r.stderr and "Traceback" not in r.stderr
    r = qsa("live", "--input-file", "/nonexistent.wav", "--model", "passthrough")
    assert r.returncode == 2 and "/nonexistent.wav" in r.stderr
    r = qsa("live", "--jitter-ms", "-5", "--model", "passthrough")
    assert r.returncode == 2 and "--jitter-ms -5; expected 0 to 1000 ms" in r.stderr
    assert "Traceback" not in r.stderr


def test_int_or_str():
    from qsa.commands.live import int_or_str

    assert int_or_str("3") == 3 and int_or_str("pulse") == "pulse"


def test_live_view_renders_the_figures():
    from rich.console import Console

    from qsa.apps.live import render

    stats = {
        "t": 3.2, "model": "reference-lowpass", "bypass": True, "input_dbfs": -30.1,
        "output_dbfs": -33.0, "snr_in_db": 12.0, "snr_out_db": 30.5, "snr_gain_db": 18.5,
        "hop_ms_median": 0.4, "hop_ms_p99": 1.1, "hop_ms_max": 2.0, "rtf": 0.05,
        "latency_ms": {"algorithmic": 9.9, "buffering": 80.0, "device": 60.0,
                       "pipeline": 28.0, "end_to_end": 89.9},
        "overruns": 0, "underruns": 2, "restarts": 0,
        "xruns": {"ring_overruns": 0, "ring_underruns": 1, "device_input_overflows": 0,
                  "device_output_underflows": 1, "file_underruns": 0},
        "hop": 128, "samplerate": 48000, "block": 480, "input_device": "mic",
        "output_device": "speaker", "recorded_s": 3.1,
    }  # fmt: skip
    console = Console(record=True, width=140)
    console.print(render(stats))
    text = console.export_text()
    for s in ("BYPASS", "18.5 dB", "p99 1.100 ms", "89.9 ms", "0 / 2", "mic -> speaker"):
        assert s in text, (s, text)


def test_export_cache_key_follows_the_weights(tmp_path):
    """The live app exports a model once per runtime into a cache; the key hashes the weights,
    config and qsa version, so new shipped weights (or a retrained file) are re-exported,
    never served from an artifact of the old ones."""
    import torch

    from qsa.apps.live.processors import _model_key
    from qsa.apps.live.reference import QuaternionLowpass

    a, b = QuaternionLowpass(), QuaternionLowpass()
    assert _model_key("reference-lowpass", a) == _model_key("reference-lowpass", b)
    with torch.no_grad():
        b.conv.weight[0, 0, 0, 0] += 1e-3  # one tap, slightly retrained
    assert _model_key("reference-lowpass", a) != _model_key("reference-lowpass", b)
    c = QuaternionLowpass(cutoff_hz=3000.0)  # another filter altogether
    assert _model_key("reference-lowpass", a) != _model_key("reference-lowpass", c)
    assert _model_key("reference-lowpass", a).startswith("reference-lowpass-")


def test_export_cache_key_follows_the_graph_code(tmp_path):
    """The key also hashes the source of the code that builds the exported graph: after an
    exporter or model change (same weights, same version) the live app re-exports."""
    from qsa.export.codedigest import graph_roots as _graph_roots
    from qsa.export.codedigest import source_digest as _source_digest

    roots = {p.as_posix() for p in _graph_roots()}
    for part in ("export", "models", "layers"):
        assert any(r.endswith("/" + part) for r in roots), (part, roots)
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "sub" / "b.py").write_text("y = 2\n")
    d0 = _source_digest([pkg])
    assert _source_digest([pkg]) == d0
    (pkg / "sub" / "b.py").write_text("y = 3\n")
    assert _source_digest([pkg]) != d0
    (pkg / "sub" / "b.py").write_text("y = 2\n")
    assert _source_digest([pkg]) == d0
    (pkg / "c.py").write_text("")
    assert _source_digest([pkg]) != d0
