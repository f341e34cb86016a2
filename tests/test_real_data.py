"""The real-voice corpus (`qsa data real`): Debian-packaged human speech and recorded noise,
split by speaker and by noise file, reproducible from the manifest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from syspkgs import require

from qsa.data import real
from qsa.data.synth import _prepare_out
from qsa.errors import QsaError

MISSING = real.missing_packages()
needs_packages = pytest.mark.skipif(
    bool(MISSING) and os.geteuid() != 0,  # as root, make setup installed them: run and fail
    reason=f"Debian packages {MISSING} not installed (make setup installs them as root)")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    require(MISSING, "Debian packages")
    out = tmp_path_factory.mktemp("real")
    summary = real.make_real_corpus(out, hours=0.03, seed=3, workers=0, progress=False)
    return out, summary


def _manifest(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]


@needs_packages
def test_sources_are_found_and_split_by_speaker_and_noise_file():
    files = real.speech_files()
    for split, speakers in real.SPEAKER_SPLITS.items():
        for s in speakers:
            # KLettres: one voice's letters and syllables per language (28-521 files)
            # KTuberling: one voice's stamp names per language (71-192 wideband files)
            assert len(files[s]) > (20 if s.startswith(("klettres-", "ktuberling-")) else 100), (
                split, s)
    import soundfile as sf

    # the Danish letters whose headers claim 128 kHz are left out, the rest are kept
    assert 20 <= len(files["klettres-da"]) < 57
    assert all(sf.info(f).samplerate <= 48000 for f in files["klettres-da"])
    # KTuberling's narrowband (8 kHz) recordings are left out: fr keeps its 188 wideband files
    assert 150 < len(files["ktuberling-fr"]) < 210
    assert all(sf.info(f).samplerate >= real.MIN_SPEECH_RATE for f in files["ktuberling-fr"])
    train, val, test = (set(real.SPEAKER_SPLITS[s]) for s in real.SPLITS)
    assert not (train & test) and not (val & test) and not (train & val)
    # the same woman speaks en and es: one speaker, one split
    assert all("Allison" in f for f in files["allison"])
    noise = real.noise_files()
    for cat, splits in noise.items():
        owned = [set(splits[s]) for s in real.SPLITS]
        assert not (owned[0] & owned[2]) and not (owned[1] & owned[2]) and not (owned[0] & owned[1])
        assert all(splits[s] for s in real.SPLITS), cat
    entries = real.opensfx_entries()
    assert 60 <= len(entries) <= 71
    x = real.load_noise(noise["field"]["test"][0])
    assert x.dtype == np.float32 and x.ndim == 1 and len(x) > 1000 and np.all(np.isfinite(x))


@needs_packages
def test_corpus_items_keep_their_split_and_rebuild_exactly(corpus):
    out, summary = corpus
    rows = _manifest(out)
    assert summary["status"] == "complete" and summary["kind"] == "real"
    assert {r["split"] for r in rows} == set(real.SPLITS)
    noise = real.noise_files()
    for r in rows:
        if r["speaker"] != "espeak":
            assert r["speaker"] in real.SPEAKER_SPLITS[r["split"]]
            assert all(c.endswith((".g722", ".ogg", ".opus", ".wav"))
                       for c in r["speech"]["clips"])
        else:
            assert r["split"] != "test"  # the test split is real speech only
        nz = r["noise"]
        if "file" in nz:
            assert nz["file"] in noise[nz["category"]][r["split"]]
        for t in nz.get("talkers", []):
            assert t["speaker"] in real.SPEAKER_SPLITS[r["split"]]
            assert t["speaker"] != r["speaker"] or len(real.SPEAKER_SPLITS[r["split"]]) == 1
        assert r["speech_licence"] and nz["licence"]
        if r["split"] != "train":
            assert r["snr_db"] in real.EVAL_SNRS_DB
    # every item is a function of its manifest line: rebuilt bit-exactly
    import soundfile as sf

    for r in rows[:: max(1, len(rows) // 4)]:
        clean, noisy = real.rebuild_item(r)
        assert np.array_equal(clean, sf.read(out / r["clean"], dtype="float32")[0])
        assert np.array_equal(noisy, sf.read(out / r["noisy"], dtype="float32")[0])
    assert summary["licences"]["asterisk-core-sounds-*-g722"].startswith("CC-BY-SA-3.0")


@needs_packages
def test_the_same_seed_gives_the_same_items_and_another_seed_others():
    a = real.sample_item(5, "train", 11)
    assert a == real.sample_item(5, "train", 11)
    assert a != real.sample_item(6, "train", 11)
    c1, n1, _ = real.render_item(a)
    c2, n2, _ = real.render_item(json.loads(json.dumps(a)))  # through JSON, as the manifest
    assert np.array_equal(c1, c2) and np.array_equal(n1, n2)


@needs_packages
def test_capture_chain_acts_on_noisy_and_clean_alike():
    # find items with a 48 kHz round trip and with clipping among the first train items
    rt = clip = None
    for i in range(400):
        p = real.sample_item(0, "train", i, synth_share=0.0)
        band = p["chain"]["band"] or {}
        if rt is None and "round_trip_hz" in band and p["chain"]["clip_drive_db"] is None:
            rt = p
        if clip is None and p["chain"]["clip_drive_db"]:
            clip = p
        if rt and clip:
            break
    assert rt and clip
    clean, noisy, _ = real.render_item(rt)
    for x in (clean, noisy):
        spec = np.abs(np.fft.rfft(x.astype(np.float64)))
        f = np.fft.rfftfreq(len(x), 1 / real.SR)
        hi = np.sum(spec[f > 7700] ** 2) / np.sum(spec**2)
        assert hi < 1e-4, hi  # nothing above the device band, in input and target
    clean, noisy, info = real.render_item(clip)
    assert info["clipped_share"] > 0
    assert np.max(np.abs(noisy)) <= 32767 * 0.99 + 1
    assert np.max(np.abs(clean)) < 32767  # the target is not clipped


@needs_packages
def test_noise_augmentation_acts_on_training_items_only():
    # version 4: training field / samples noises are sped up or slowed, equalised and mixed
    train = [real.sample_item(0, "train", i, synth_share=0.0) for i in range(200)]
    file_items = [p for p in train if "file" in p["noise"]]
    augmented = [p for p in file_items if "aug" in p["noise"]]
    assert 0.5 < len(augmented) / len(file_items) < 0.9  # NOISE_AUG_PROB 0.7
    assert any("second" in p["noise"]["aug"] for p in augmented)
    for split in ("val", "test"):  # the evaluation items are those of version 1
        assert not any("aug" in real.sample_item(0, split, i)["noise"] for i in range(200))
    # the speed change scales the duration; a peaking filter has its gain at its centre
    x = np.random.default_rng(0).standard_normal(real.SR).astype(np.float32)
    assert abs(len(real._sped(x, 1.25)) - real.SR / 1.25) <= 2
    assert abs(len(real._sped(x, 0.8)) - real.SR / 0.8) <= 2
    import scipy.signal as ss

    sos = real._peaking_sos(1000.0, -9.0, 1.0)
    _, h = ss.sosfreqz(sos, worN=[1000.0, 100.0, 7000.0], fs=real.SR)
    assert abs(20 * np.log10(abs(h[0])) + 9.0) < 0.01
    assert abs(20 * np.log10(abs(h[1]))) < 1.0 and abs(20 * np.log10(abs(h[2]))) < 1.0
    # an augmented item renders, and its noise differs from the same item without augmentation
    p = augmented[0]
    clean, noisy, _ = real.render_item(p)
    plain = json.loads(json.dumps(p))
    del plain["noise"]["aug"]
    clean2, noisy2, _ = real.render_item(plain)
    assert not np.array_equal(noisy, noisy2)
    assert np.corrcoef(clean.astype(np.float64), clean2.astype(np.float64))[0, 1] > 0.999


def test_missing_packages_are_named_with_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setattr(real, "ASTERISK_ROOT", tmp_path / "none")
    monkeypatch.setattr(real, "OPENSFX_CAT", tmp_path / "none.cat")
    missing = real.missing_packages()
    assert "asterisk-core-sounds-it-g722" in missing and "openttd-opensfx" in missing
    with pytest.raises(QsaError, match="sudo apt-get install -y asterisk-core-sounds-en-g722"):
        real.check_packages()


def test_bad_arguments_are_refused(tmp_path):
    (tmp_path / "keep.txt").write_text("user data")
    with pytest.raises(QsaError, match="holds no qsa corpus"):
        _prepare_out(tmp_path, force=True)
    assert (tmp_path / "keep.txt").exists()
    with pytest.raises(QsaError, match="--hours"):
        real.make_real_corpus(tmp_path / "x", hours=0)
    with pytest.raises(QsaError, match="--synth-share"):
        real.make_real_corpus(tmp_path / "x", hours=1, synth_share=1.5)
    with pytest.raises(QsaError, match="unknown split"):
        real.sample_item(0, "dev", 0)


@needs_packages
def test_cli_reads_the_corpus_as_a_data_set(corpus):
    out, _ = corpus
    from qsa.data.readers import parse_data_spec

    ds = parse_data_spec(f"real:{out}", "test")
    assert ds.kind == "real" and ds.paired and len(ds) >= 1
    noisy, clean = ds[0].load()
    assert noisy.shape == clean.shape
    res = subprocess.run([sys.executable, "-m", "qsa.cli", "data", "info", f"real:{out}",
                          "--split", "train", "--json"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["kind"] == "real"
    res = subprocess.run([sys.executable, "-m", "qsa.cli", "data", "real", str(out),
                          "--hours", "0.01"], capture_output=True, text=True)
    assert res.returncode == 2 and "not empty" in res.stderr and "Traceback" not in res.stderr
