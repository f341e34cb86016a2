"""Distillation from a teacher's outputs: scripts/make_teacher.py writes aligned teacher files
with a real peer runtime (RNNoise), the crop dataset serves them beside noisy / clean through
the same crop and capture chain, and `--distill-weight` adds the term against them."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

ROOT = Path(__file__).resolve().parents[1]
QSA = str(Path(sys.executable).with_name("qsa"))
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from qsa.data.synth import make_corpus

    out = tmp_path_factory.mktemp("distill") / "c"
    make_corpus(out, 0.01, seed=5, reverb=False, workers=0, progress=False)
    return out


def _clean_as_teacher(corpus: Path, tmp: Path, drop: int = 0) -> Path:
    """A copy of the corpus whose teacher files are the clean files (all but ``drop``)."""
    c = tmp / "c"
    shutil.copytree(corpus, c)
    (c / "train" / "teacher").mkdir()
    for f in sorted((c / "train" / "clean").glob("*.wav"))[drop:]:
        shutil.copy(f, c / "train" / "teacher" / f.name)
    return c


def test_make_teacher_writes_aligned_files_and_resumes(corpus, tmp_path):
    c = tmp_path / "c"
    shutil.copytree(corpus, c)
    cmd = [sys.executable, str(ROOT / "scripts" / "make_teacher.py"), str(c), "--teacher",
           "rnnoise", "--workers", "1"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    noisy = sorted((c / "train" / "noisy").glob("*.wav"))
    teach = c / "train" / "teacher"
    assert [p.name for p in sorted(teach.glob("*.wav"))] == [p.name for p in noisy]
    assert not list(teach.glob(".*.tmp"))
    for p in noisy[:3]:
        x, sr = sf.read(p, dtype="float32")
        y, sr2 = sf.read(teach / p.name, dtype="float32")
        assert sr2 == sr and len(y) == len(x)
        assert not np.array_equal(y, x) and np.abs(y).max() > 1e-3  # enhanced, not silent
    meta = json.loads((teach / "teacher.json").read_text())
    assert meta["teacher"] == "RNNoise" and meta["items"] == len(noisy)
    # a second run keeps what is there: nothing to do
    r2 = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)
    assert r2.returncode == 0 and "0 of" in r2.stdout, r2.stdout + r2.stderr[-1000:]
    bad = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_teacher.py"),
                          str(tmp_path / "nowhere")], capture_output=True, text=True, env=ENV)
    assert bad.returncode == 2 and "nowhere/train/noisy does not exist" in bad.stderr


def test_crops_carry_the_teacher_through_the_same_crop_and_chain(corpus, tmp_path):
    """Teacher = clean files: the teacher row equals the clean row in every crop, band-limited
    (both capture chains) and clean-share crops included; an item without a teacher file is
    served as zeros with has_teacher False (a clean-share crop's teacher is its clean
    speech: nothing to remove, whoever the teacher)."""
    from qsa.data.readers import CropDataset, parse_data_spec

    c = _clean_as_teacher(corpus, tmp_path, drop=1)
    pairs = parse_data_spec(f"synth:{c}", split="train")
    assert pairs[0].teacher is None and all(p.teacher is not None for p in pairs[1:])
    ds = CropDataset(pairs, 0.5, seed=1, band_limit=1.0, clean_share=0.3, teacher=True)
    plain = CropDataset(pairs, 0.5, seed=1, band_limit=1.0, clean_share=0.3)
    seen = set()
    for epoch in range(6):
        ds.set_epoch(epoch)
        plain.set_epoch(epoch)
        for i in range(len(ds)):
            noisy, clean, teacher, has = ds[i]
            n0, c0 = plain[i]
            assert torch.equal(noisy, n0) and torch.equal(clean, c0)  # unchanged pairs
            if i == 0:
                seen.add(ds.is_clean_crop(0))
            if i == 0 and not ds.is_clean_crop(0):
                assert not has and not teacher.any()
            else:
                assert has and torch.allclose(teacher, clean, atol=1e-6), (epoch, i)
    assert seen == {True, False}  # item 0 served both with and without its noise


def test_distill_term_uses_the_teacher_and_is_refused_without_one(corpus, tmp_path):
    from qsa.data.readers import CropDataset, parse_data_spec
    from qsa.errors import ConfigError, QsaError
    from qsa.models.discriminator import GeneratorLosses, LossConfig, MetricDiscriminator
    from qsa.models.registry import build_model, preset_config
    from qsa.train.se import TrainConfig, Trainer, _Batches

    with pytest.raises(ConfigError, match="distill_weight=-1"):
        TrainConfig(data=f"synth:{corpus}", out=str(tmp_path / "x"), distill_weight=-1)
    with pytest.raises(QsaError, match="make_teacher.py"):
        CropDataset(parse_data_spec(f"synth:{corpus}", split="train"), 0.5, teacher=True)
    r = subprocess.run([QSA, "train", "qcgan-35k", "--data", f"synth:{corpus}", "--out",
                        str(tmp_path / "r"), "--distill-weight", "2", "--max-steps", "1",
                        "--pesq-workers", "0", "--threads", "1", "--no-progress"],
                       capture_output=True, text=True, env=ENV, timeout=300)
    assert r.returncode == 2 and "make_teacher.py" in r.stderr and "Traceback" not in r.stderr

    c = _clean_as_teacher(corpus, tmp_path)
    cfg = TrainConfig(data=f"synth:{c}", out=str(tmp_path / "run"), batch_size=4,
                      segment_seconds=0.5, pesq_workers=0, metric_gan=False, distill_weight=1)
    ds = CropDataset(parse_data_spec(cfg.data, split="train"), 0.5, teacher=True)
    torch.manual_seed(0)
    trainer = Trainer(cfg, ds, [], build_model(preset_config("qcgan-35k")),
                      MetricDiscriminator(), GeneratorLosses(LossConfig()), progress=False)
    noisy, clean, teacher, has = _Batches(ds, 4, 0, 0, 1).batch(0, 0)
    assert has.all()
    parts = trainer.step(noisy, clean, teacher, has)
    # teacher == clean: the term is CMGAN's magnitude / complex blend against the clean crop
    assert parts["distill"] == pytest.approx(0.9 * parts["magnitude"] + 0.1 * parts["complex"],
                                             rel=1e-4)
    parts = trainer.step(noisy, clean, teacher, torch.zeros(4, dtype=torch.bool))
    assert "distill" not in parts  # no item with a teacher: no term
    trainer.close()
