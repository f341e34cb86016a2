"""qsa.data: the synthetic corpus (CLI, determinism, disjoint splits), the readers, crops."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from qsa.audio.io import read_audio
from qsa.data.readers import (
    CropDataset,
    Pair,
    parse_data_spec,
    read_dns,
    read_folder,
    read_synth,
    read_voicebank,
)
from qsa.data.synth import (
    SPLITS,
    VOICE_SPLITS,
    check_voices,
    make_corpus,
    make_demo_set,
    noise_seed,
    rebuild_item,
)
from qsa.errors import QsaError

QSA = [sys.executable, "-m", "qsa.cli"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A 0.02 h corpus made by the real command with 2 worker processes."""
    out = tmp_path_factory.mktemp("corpus") / "c"
    r = subprocess.run([*QSA, "data", "synth", str(out), "--hours", "0.02", "--seed", "7"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stdout and "train" in r.stdout
    return out


def manifest(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]


# --------------------------------------------------------------------------- synth


def test_voice_table_is_disjoint_and_installed():
    check_voices()
    for key in ("voices", "variants"):
        sets = [set(VOICE_SPLITS[s][key]) for s in SPLITS]
        assert not (sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2]), key
    seeds = {noise_seed(s, split, i) for s in (0, 1, 2) for split in SPLITS for i in (0, 1, 99)}
    assert len(seeds) == 3 * 3 * 3


def test_corpus_layout(corpus):
    items = manifest(corpus)
    summary = json.loads((corpus / "corpus.json").read_text())
    assert summary["seed"] == 7 and summary["reverb"] is True
    hours = {s: sum(r["duration"] for r in items if r["split"] == s) / 3600 for s in SPLITS}
    assert 0.02 <= sum(hours.values()) < 0.02 + 3 * 6 / 3600  # overshoot < one item per split
    assert hours["train"] > hours["val"] > 0 and hours["test"] > 0
    for split in SPLITS:
        clean = sorted(p.name for p in (corpus / split / "clean").iterdir())
        noisy = sorted(p.name for p in (corpus / split / "noisy").iterdir())
        assert clean == noisy and clean == sorted(
            Path(r["clean"]).name for r in items if r["split"] == split)
    for r in items:
        for key in ("voice", "variant", "rate", "pitch", "text", "noise", "snr_db",
                    "level_dbfs", "gain", "reverb", "lead_s", "tail_s"):
            assert key in r
        assert r["voice"] in VOICE_SPLITS[r["split"]]["voices"]
        assert r["variant"] in VOICE_SPLITS[r["split"]]["variants"]
        assert -5 <= r["snr_db"] <= 20 and 1.5 < r["duration"] < 6.5
        info = sf.info(str(corpus / r["noisy"]))
        assert info.samplerate == 16000 and info.channels == 1 and info.subtype == "PCM_16"
    assert len({r["text"] for r in items}) == len(items)  # varied sentences
    assert len({r["noise"]["kind"] for r in items}) >= 5


def test_rebuild_is_bit_exact(corpus):
    items = manifest(corpus)
    picked = [r for r in items if r["reverb"]][:2] + [r for r in items if not r["reverb"]][:2]
    picked += [r for r in items if r["noise"]["kind"] == "babble"][:1]
    lines = {r["name"]: line for r, line in
             zip(items, (corpus / "manifest.jsonl").read_text().splitlines(), strict=True)}
    for r in picked:
        clean, noisy = rebuild_item(lines[r["name"]])
        np.testing.assert_array_equal(clean, read_audio(corpus / r["clean"])[0])
        np.testing.assert_array_equal(noisy, read_audio(corpus / r["noisy"])[0])


def test_snr_is_as_recorded(corpus):
    for r in manifest(corpus):
        if r["reverb"]:
            continue
        clean = read_audio(corpus / r["clean"])[0].astype(np.float64)
        noisy = read_audio(corpus / r["noisy"])[0].astype(np.float64)
        snr = 10 * np.log10(np.sum(clean**2) / np.sum((noisy - clean) ** 2))
        assert abs(snr - r["snr_db"]) < 0.1, r["name"]
        assert np.max(np.abs(noisy)) <= 0.991


def test_corpus_refuses_to_overwrite(corpus, tmp_path):
    r = subprocess.run([*QSA, "data", "synth", str(corpus), "--hours", "0.01"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "not empty" in r.stderr and "--force" in r.stderr
    other = tmp_path / "mine"
    other.mkdir()
    (other / "thesis.txt").write_text("precious")
    with pytest.raises(QsaError, match="holds no qsa corpus"):
        make_corpus(other, 0.01, force=True, workers=0, progress=False)
    assert (other / "thesis.txt").read_text() == "precious"
    with pytest.raises(QsaError, match="must be > 0"):
        make_corpus(tmp_path / "x", 0.0)


def test_same_seed_same_corpus_in_process(corpus, tmp_path):
    """Workers=0 (in-process) gives the same first test items as the 2-worker CLI run."""
    out = tmp_path / "again"
    make_corpus(out, 0.004, seed=7, workers=0, progress=False)
    again = {r["name"]: r for r in manifest(out)}
    first = {r["name"]: r for r in manifest(corpus)}
    common = [n for n in again if n in first]
    assert common
    for name in common:
        assert again[name] == first[name]
        a = (out / again[name]["noisy"]).read_bytes()
        assert a == (corpus / first[name]["noisy"]).read_bytes()


def test_demo_set(tmp_path):
    recs = make_demo_set(tmp_path / "demo", n=3)
    assert [r["snr_db"] for r in recs] == [0.0, 5.0, 10.0]
    assert len({r["noise"]["kind"] for r in recs}) == 3
    ds = read_synth(tmp_path / "demo")
    assert len(ds) == 3 and ds.paired
    assert all(r["voice"] in VOICE_SPLITS["test"]["voices"] for r in recs)
    recs2 = make_demo_set(tmp_path / "demo2", n=1)
    name = recs2[0]["name"]
    assert (tmp_path / "demo2" / "noisy" / f"{name}.wav").read_bytes() == (
        tmp_path / "demo" / "noisy" / f"{name}.wav").read_bytes()


# --------------------------------------------------------------------------- readers


def _wav(path: Path, seconds: float, sr: int, seed: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    x = 0.1 * np.random.default_rng(seed).standard_normal(int(seconds * sr))
    sf.write(str(path), x.astype(np.float32), sr, subtype="PCM_16")


@pytest.fixture
def voicebank(tmp_path) -> Path:
    root = tmp_path / "vb"
    for split, names in (("testset", ["p232_001", "p232_002", "p257_001"]),
                         ("trainset_28spk", ["p226_001", "p230_001", "p230_002"]),
                         ("trainset_56spk", ["p234_001"])):
        for i, name in enumerate(names):
            _wav(root / "DS_10283_2791" / f"clean_{split}_wav" / f"{name}.wav", 0.5, 48000, i)
            _wav(root / "DS_10283_2791" / f"noisy_{split}_wav" / f"{name}.wav", 0.5, 48000, i)
    return root


def test_voicebank(voicebank):
    test = read_voicebank(voicebank, "test")
    assert [p.name for p in test] == ["p232_001", "p232_002", "p257_001"] and test.paired
    noisy, clean = test[0].load()
    assert len(noisy) == len(clean) == 8000  # 0.5 s at 48 kHz -> 16 kHz
    assert [p.name for p in read_voicebank(voicebank, "train")] == ["p230_001", "p230_002"]
    assert [p.name for p in read_voicebank(voicebank, "val")] == ["p226_001"]  # held out
    assert len(read_voicebank(voicebank, "train", speakers=56)) == 1
    with pytest.raises(QsaError, match="the val split .* is empty"):
        read_voicebank(voicebank, "val", speakers=56)
    assert len(parse_data_spec(f"voicebank:{voicebank}", "test")) == 3


def test_voicebank_errors(voicebank, tmp_path):
    with pytest.raises(QsaError, match="expected clean_testset_wav/ \\+ noisy_testset_wav/"):
        read_voicebank(tmp_path / "vb" / "DS_10283_2791" / "clean_testset_wav")
    (voicebank / "DS_10283_2791" / "noisy_testset_wav" / "p232_002.wav").unlink()
    with pytest.raises(QsaError, match="1 clean without noisy"):
        read_voicebank(voicebank)
    with pytest.raises(QsaError, match="is not a folder"):
        read_voicebank(tmp_path / "nowhere")


@pytest.fixture
def dns(tmp_path) -> Path:
    root = tmp_path / "DNS-Challenge" / "datasets"
    base = root / "test_set" / "synthetic" / "no_reverb"
    for i in (3, 10, 150):
        _wav(base / "clean" / f"clean_fileid_{i}.wav", 0.4, 16000, i)
        _wav(base / "noisy" / f"book_0{i}_chp_0001_reader_0_snr{i % 20}_fileid_{i}.wav",
             0.4, 16000, i)
    _wav(root / "blind_test_set" / "noreverb_fileid_0.wav", 0.3, 16000)
    _wav(root / "blind_test_set" / "reverb" / "ms_realrec_fileid_9.wav", 0.3, 16000)
    return root


def test_dns(dns):
    for where in (dns.parent, dns, dns / "test_set" / "synthetic" / "no_reverb"):
        ds = read_dns(where)
        assert [p.name for p in ds] == ["fileid_00003", "fileid_00010", "fileid_00150"]
        assert ds.paired
        assert ds[1].clean.name == "clean_fileid_10.wav" and "fileid_10." in ds[1].noisy.name
    blind = read_dns(dns / "blind_test_set")
    assert len(blind) == 2 and not blind.paired
    noisy, clean = blind[0].load()
    assert clean is None and len(noisy) == 4800


def test_dns_errors(dns, tmp_path):
    (dns / "test_set" / "synthetic" / "no_reverb" / "clean" / "clean_fileid_10.wav").unlink()
    with pytest.raises(QsaError, match="no clean partner .*fileid_10"):
        read_dns(dns)
    (tmp_path / "x").mkdir()
    with pytest.raises(QsaError, match="does not look like a DNS-Challenge test set"):
        read_dns(tmp_path / "x")


def test_folder_and_spec(tmp_path):
    _wav(tmp_path / "mine" / "a.wav", 0.2, 22050)
    _wav(tmp_path / "mine" / "sub" / "b.flac", 0.2, 16000)
    (tmp_path / "mine" / "readme.txt").write_text("x")
    ds = parse_data_spec(str(tmp_path / "mine"))
    assert [p.name for p in ds] == ["a", "sub/b"] and not ds.paired
    assert len(ds[0].load()[0]) == 3200
    assert len(read_folder(tmp_path / "mine" / "a.wav")) == 1
    (tmp_path / "void").mkdir()
    with pytest.raises(QsaError, match="no audio files"):
        read_folder(tmp_path / "void")
    with pytest.raises(QsaError, match="missing folder after 'synth:'"):
        parse_data_spec("synth:")
    with pytest.raises(QsaError, match="expected test/clean/"):
        parse_data_spec(f"synth:{tmp_path / 'mine'}")


def test_paired_folder_needs_a_kind(tmp_path):
    _wav(tmp_path / "p" / "clean" / "a.wav", 0.2, 16000)
    _wav(tmp_path / "p" / "noisy" / "a.wav", 0.2, 16000)
    with pytest.raises(QsaError, match="--data synth:"):
        parse_data_spec(str(tmp_path / "p"))
    assert parse_data_spec(f"synth:{tmp_path / 'p'}").paired


def test_info_command(corpus):
    r = subprocess.run([*QSA, "data", "info", f"synth:{corpus}", "--split", "train", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["kind"] == "synth" and info["paired"] and info["items"] > 3


# --------------------------------------------------------------------------- crops


def test_crop_dataset(corpus):
    import torch

    ds = read_synth(corpus, "train")
    crops = CropDataset(ds, seconds=1.0, seed=3)
    noisy, clean = crops[0]
    assert noisy.shape == clean.shape == (16000,) and noisy.dtype == torch.float32
    again = CropDataset(ds, seconds=1.0, seed=3)[0]
    assert torch.equal(again[0], noisy)
    offsets = {crops.crop_offset(0, 80000)}
    for e in range(1, 4):
        crops.set_epoch(e)
        offsets.add(crops.crop_offset(0, 80000))
    assert len(offsets) > 1
    full_noisy, full_clean = ds[0].load()
    start = crops.crop_offset(0, len(full_noisy))
    torch.testing.assert_close(crops[0][1], torch.from_numpy(full_clean[start : start + 16000]))
    long = CropDataset(ds, seconds=10.0)
    n, c = long[0]
    assert n.shape == (160000,) and float(c[-1000:].abs().sum()) == 0.0  # zero-padded
    loader = torch.utils.data.DataLoader(crops, batch_size=4)
    noisy_b, clean_b = next(iter(loader))
    assert noisy_b.shape == (4, 16000)


def test_crop_dataset_band_limit(tmp_path):
    """band_limit=1: every crop, noisy and clean alike, loses what a 48 kHz capture chain
    drops (the band above ~7.8 kHz), reproducibly per (seed, epoch, item), both the same
    linear filter; band_limit=0 leaves the crops bit-exact; a share outside 0..1 is refused."""
    import scipy.signal as ss

    rng = np.random.default_rng(0)
    for side in ("noisy", "clean"):
        (tmp_path / side).mkdir()
        for k in range(6):
            x = rng.standard_normal(32000).astype(np.float32) * 0.1
            sf.write(tmp_path / side / f"u{k}.wav", x, 16000, subtype="FLOAT")

    def pairs(noisy_side):
        return [Pair(f"u{k}", tmp_path / noisy_side / f"u{k}.wav", tmp_path / "clean" / f"u{k}.wav")
                for k in range(6)]

    ds = pairs("noisy")
    plain = CropDataset(ds, seconds=1.0, seed=5)
    limited = CropDataset(ds, seconds=1.0, seed=5, band_limit=1.0)

    def top_band_db(x, y):  # energy above 7.8 kHz of y relative to x, dB
        f, px = ss.welch(x, 16000, nperseg=512)
        _, py = ss.welch(y, 16000, nperseg=512)
        m = f >= 7800
        return 10 * np.log10(py[m].sum() / px[m].sum())

    for i in range(len(ds)):
        n0, c0 = (t.numpy() for t in plain[i])
        n1, c1 = (t.numpy() for t in limited[i])
        assert top_band_db(n0, n1) < -10 and top_band_db(c0, c1) < -10, i
        assert abs(10 * np.log10(np.mean(n1**2) / np.mean(n0**2))) < 3  # the band below stays
        again = CropDataset(ds, seconds=1.0, seed=5, band_limit=1.0)[i]
        np.testing.assert_array_equal(again[0].numpy(), n1)
    assert np.array_equal(CropDataset(ds, seconds=1.0, seed=5, band_limit=0.0)[0][0], plain[0][0])
    # the same filter on both sides: a noisy input equal to its clean reference stays equal
    same = pairs("clean")
    n, c = CropDataset(same, seconds=1.0, seed=5, band_limit=1.0)[2]
    np.testing.assert_allclose(n.numpy(), c.numpy(), atol=1e-6)
    with pytest.raises(QsaError, match="band_limit=1.5"):
        CropDataset(ds, band_limit=1.5)
    from qsa.train.se import TrainConfig

    with pytest.raises(QsaError, match="band_limit=-0.1"):
        TrainConfig(band_limit=-0.1)


def test_crop_dataset_needs_pairs(tmp_path):
    _wav(tmp_path / "n" / "a.wav", 0.2, 16000)
    with pytest.raises(QsaError, match="training needs clean references"):
        CropDataset(read_folder(tmp_path / "n"))
