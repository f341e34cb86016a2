"""qsa.metrics: SI-SDR exactness, PESQ/STOI/composite sanity and monotonicity, NaN + reason."""

from __future__ import annotations

import math

import numpy as np
import pytest
import soundfile as sf

from qsa.data.readers import Pair
from qsa.data.synth import espeak
from qsa.metrics import batch_metrics, compute_metrics, si_sdr
from qsa.metrics.composite import composite_from_terms, llr, seg_snr, wss


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    """About 3 s of espeak-ng speech at 16 kHz, with short pauses at both ends."""
    s = espeak("The quick brown fox jumped over the lazy dog near the river bank.",
               "en-gb", "m3", 160, 50)
    pad = np.zeros(3200, np.float32)
    return np.concatenate([pad, 0.3 * s / np.max(np.abs(s)), pad]).astype(np.float64)


def add_noise(x: np.ndarray, snr_db: float, seed: int = 0) -> np.ndarray:
    n = np.random.default_rng(seed).standard_normal(len(x))
    n *= np.sqrt(np.mean(x**2) / np.mean(n**2)) / 10 ** (snr_db / 20)
    return x + n


def test_si_sdr_exact():
    rng = np.random.default_rng(0)
    s = rng.standard_normal(16000)
    s -= s.mean()
    e = rng.standard_normal(16000)
    e -= e.mean()
    e -= (e @ s) / (s @ s) * s  # orthogonal to s, zero mean
    for a in (0.3, 1.0, 2.5):
        expected = 10 * np.log10(a**2 * (s @ s) / (e @ e))
        assert si_sdr(s, a * s + e) == pytest.approx(expected, abs=1e-9)
        assert si_sdr(s, 7.0 * (a * s + e) + 0.5) == pytest.approx(expected, abs=1e-9)
    assert si_sdr(s, s + 1e-3 * e) > 55
    with pytest.raises(ValueError, match="reference is silent"):
        si_sdr(np.zeros(10), s[:10])


def test_pesq_self_and_noise(speech):
    self_m = compute_metrics(speech, speech, metrics=("pesq_wb", "pesq_nb", "stoi"))
    assert self_m["pesq_wb"] > 4.4 and self_m["pesq_nb"] > 4.4
    assert self_m["stoi"] > 0.999 and self_m["errors"] == {}
    noisy = compute_metrics(speech, add_noise(speech, -5), metrics=("pesq_wb", "pesq_nb"))
    assert noisy["pesq_wb"] < 1.3 and noisy["pesq_nb"] < 2.0


def test_composite_of_identical_signals(speech):
    m = compute_metrics(speech, speech)
    assert m["llr"] == pytest.approx(0.0, abs=1e-9) and m["wss"] == pytest.approx(0.0, abs=1e-9)
    assert m["segsnr"] > 20
    assert m["csig"] == 5.0 and m["covl"] == 5.0 and m["cbak"] == 5.0  # clipped at 5


def test_metrics_monotone_in_snr(speech):
    names = ("pesq_wb", "pesq_nb", "stoi", "estoi", "si_sdr", "csig", "cbak", "covl",
             "segsnr")
    rows = [compute_metrics(speech, add_noise(speech, snr, seed=1)) for snr in (-5, 5, 15, 30)]
    for name in names:
        values = [r[name] for r in rows]
        assert all(np.diff(values) > 0), (name, values)
    for name in ("llr", "wss"):
        values = [r[name] for r in rows]
        assert all(np.diff(values) < 0), (name, values)
    for r in rows:
        # the composite scores are Hu & Loizou's regressions of this row's own terms and its
        # PESQ-WB (a wrong term or PESQ variant wired in changes them), inside the clip range
        # (a clipped 5.0 would hide a broken term: the best row here scores 3.8)
        want = composite_from_terms(r["llr"], r["wss"], r["segsnr"], r["pesq_wb"])
        for name in ("csig", "cbak", "covl"):
            assert r[name] == pytest.approx(want[name], abs=1e-9), name
            assert r[name] < 5.0, (name, r[name])  # below the clip: the regression shows


def test_composite_regressions():
    # Hu & Loizou 2008 coefficients, before clipping to [1, 5]
    got = composite_from_terms(0.5, 30.0, 5.0, 2.5)
    assert got["csig"] == pytest.approx(3.093 - 1.029 * 0.5 + 0.603 * 2.5 - 0.009 * 30)
    assert got["cbak"] == pytest.approx(1.634 + 0.478 * 2.5 - 0.007 * 30 + 0.063 * 5)
    assert got["covl"] == pytest.approx(1.594 + 0.805 * 2.5 - 0.512 * 0.5 - 0.007 * 30)
    assert composite_from_terms(3.0, 200.0, -10.0, 1.0)["csig"] == 1.0
    # the worked example shipped with Loizou's composite.m (sp09 vs enhanced_logmmse)
    ex = composite_from_terms(0.681368, 49.671978, 3.991727, 2.255732)
    assert (round(ex["csig"], 4), round(ex["cbak"], 3), round(ex["covl"], 4)) == (
        3.3050, 2.616, 2.7133)


def test_distances_on_short_input():
    x = np.random.default_rng(0).standard_normal(100)
    for fn in (llr, wss, seg_snr):
        with pytest.raises(ValueError, match="shorter than one 30 ms frame"):
            fn(x, x)


def test_silent_and_bad_input_give_nan_and_reason(speech):
    silent_ref = compute_metrics(np.zeros(32000), speech[:32000])
    assert all(math.isnan(silent_ref[m]) for m in ("pesq_wb", "stoi", "si_sdr", "csig"))
    assert "silent" in silent_ref["errors"]["pesq_wb"]
    silent_deg = compute_metrics(speech, np.zeros_like(speech))
    assert math.isnan(silent_deg["pesq_wb"]) and math.isnan(silent_deg["csig"])
    assert "silent" in silent_deg["errors"]["pesq_wb"]
    assert "pesq_wb" in silent_deg["errors"]["csig"]
    assert "silent" in silent_deg["errors"]["si_sdr"]
    short = compute_metrics(speech[4000:5000], speech[4000:5000])
    assert math.isnan(short["pesq_wb"]) and "1/4 of a second" in short["errors"]["pesq_wb"]
    bad = speech.copy()
    bad[5] = np.nan
    assert compute_metrics(speech, bad)["errors"]["stoi"] == "NaN/Inf samples"
    with pytest.raises(ValueError, match="unknown metric"):
        compute_metrics(speech, speech, metrics=("mos",))


def test_batch_never_crashes(speech, tmp_path):
    ref_path, deg_path = tmp_path / "ref.wav", tmp_path / "deg.wav"
    sf.write(str(ref_path), speech, 16000, subtype="FLOAT")
    sf.write(str(deg_path), add_noise(speech, 10), 16000, subtype="FLOAT")
    items = [
        ("good", speech, add_noise(speech, 10)),
        ("silent", np.zeros(32000), np.zeros(32000)),
        ("files", ref_path, deg_path),
        ("missing", tmp_path / "nope.wav", deg_path),
        Pair("pair", deg_path, ref_path),
        Pair("noisy-only", deg_path, None),
    ]
    res = batch_metrics(items, workers=2, metrics=("pesq_wb", "si_sdr", "csig"),
                        progress=False)
    by = {r["name"]: r for r in res.items}
    assert [r["name"] for r in res.items] == ["good", "silent", "files", "missing", "pair",
                                              "noisy-only"]
    assert by["good"]["pesq_wb"] == pytest.approx(by["files"]["pesq_wb"], abs=1e-6)
    assert by["pair"]["pesq_wb"] == pytest.approx(by["files"]["pesq_wb"], abs=1e-6)
    assert math.isnan(by["silent"]["pesq_wb"]) and "silent" in by["silent"]["errors"]["pesq_wb"]
    assert "no such file" in by["missing"]["errors"]["pesq_wb"]
    assert "no clean reference" in by["noisy-only"]["errors"]["si_sdr"]
    assert res.counts == {"pesq_wb": 3, "si_sdr": 3, "csig": 3}
    assert res.means["pesq_wb"] == pytest.approx(by["good"]["pesq_wb"], abs=1e-6)
    inproc = batch_metrics(items[:2], workers=0, metrics=("si_sdr",), progress=False)
    assert inproc.items[0]["si_sdr"] == pytest.approx(by["good"]["si_sdr"])


def test_batch_completes_when_a_worker_hangs(speech, tmp_path):
    """A worker stuck for good (here: reading a FIFO nobody writes) costs that item, not the
    batch: after ``stall_timeout`` its workers are killed and the item is NaN + reason."""
    import os

    fifo = tmp_path / "stuck.wav"
    os.mkfifo(fifo)
    items = [("good", speech, add_noise(speech, 10)), ("stuck", fifo, fifo)]
    res = batch_metrics(items, workers=2, metrics=("si_sdr",), progress=False, stall_timeout=5)
    by = {r["name"]: r for r in res.items}
    assert by["good"]["si_sdr"] > 5
    assert math.isnan(by["stuck"]["si_sdr"])
    assert "worker stalled" in by["stuck"]["errors"]["si_sdr"]
