"""`qsa inspect` on a `qsa train` checkpoint (training/README.md points users at it): the run's
TrainConfig, state and validation history, as text and as JSON, from a real (tiny) run of the
training code; a corrupted checkpoint is a clean error. Run as a user runs it (subprocess)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

QSA = [str(Path(sys.executable).with_name("qsa"))]


def qsa(*args):
    return subprocess.run(QSA + [str(a) for a in args], capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One epoch of qcgan-35k MetricGAN training on a tiny synthetic corpus (the training
    code of `qsa train`, in process): a checkpoint with one validated epoch."""
    import torch

    from qsa.data.synth import make_corpus
    from qsa.train.se import TrainConfig, train_from_config

    root = tmp_path_factory.mktemp("inspect")
    make_corpus(root / "c", 0.01, seed=3, reverb=False, workers=0, progress=False)
    cfg = TrainConfig(model="qcgan-35k", data=f"synth:{root / 'c'}", out=str(root / "run"),
                      epochs=1, batch_size=4, segment_seconds=0.5, val_items=1,
                      pesq_workers=0, threads=1)
    threads = torch.get_num_threads()
    try:
        train_from_config(cfg, progress=False)
    finally:
        torch.set_num_threads(threads)
    return root / "run", cfg


def test_inspect_checkpoint_json(run):
    out, cfg = run
    r = qsa("inspect", out / "checkpoint.safetensors", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads(r.stdout)  # stdout is the JSON alone
    assert s["format"] == "qsa.checkpoint" and s["format_version"] == 1
    assert s["model"] == "qcgan-35k"
    assert s["config"] == json.loads(json.dumps(dataclasses.asdict(cfg)))  # the TrainConfig
    st = s["state"]
    assert st["epoch"] == 1 and st["step_in_epoch"] == 0 and st["global_step"] >= 1
    assert len(s["history"]) == 1
    rec = s["history"][0]
    assert rec["epoch"] == 0 and rec["global_step"] == st["global_step"]
    assert rec["val_items"] == 1 and 1.0 <= rec["val_pesq"] <= 4.7
    assert st["best_val"] is None or st["best_val"]["epoch"] == 0
    assert s["modules"]["generator"]["values"] == 34_662  # qcgan-35k's parameters
    assert set(s["modules"]) == set(s["optimizers"]) == {"generator", "discriminator"}
    assert len(s["payload_sha256"]) == 64


def test_inspect_run_folder_as_text(run):
    out, cfg = run
    r = qsa("inspect", out)  # the run folder names its checkpoint
    assert r.returncode == 0, r.stderr[-3000:]
    text = r.stdout
    assert "qsa.checkpoint v1" in text and "model: qcgan-35k" in text
    assert "config (TrainConfig):" in text and "batch_size: 4" in text
    assert "history (1 validated epoch):" in text and "val_pesq" in text
    assert "global step" in text and "verified:" in text


def test_corrupted_checkpoint_is_a_clean_error(run, tmp_path):
    out, _ = run
    data = bytearray((out / "checkpoint.safetensors").read_bytes())
    data[-10] ^= 0xFF  # a payload byte (the RNG state at the end)
    bad = tmp_path / "checkpoint.safetensors"
    bad.write_bytes(bytes(data))
    r = qsa("inspect", bad)
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
    assert "Traceback" not in r.stderr
    assert "payload sha256 mismatch" in r.stderr and str(bad) in r.stderr
