"""MetricGAN training: a real (tiny) run through `qsa train`, exact resume after kill -9,
and data-parallel replicas under torchrun ending with identical weights."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

QSA = str(Path(sys.executable).with_name("qsa"))
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from qsa.data.synth import make_corpus

    out = tmp_path_factory.mktemp("synth") / "c"
    make_corpus(out, 0.01, seed=3, reverb=False, workers=0, progress=False)
    return out


def train_args(corpus, out, *extra):
    return [QSA, "train", "qcgan-35k", "--data", f"synth:{corpus}", "--out", str(out),
            "--epochs", "1", "--batch-size", "2", "--segment", "0.5", "--val-items", "2",
            "--pesq-workers", "0", "--threads", "1", "--no-progress", *extra]


def final_weights(out: Path):
    from qsa.quantize import read_packed

    tensors, meta = read_packed(out / "qcgan-35k.fp32.qsa")
    return tensors, meta


@pytest.mark.slow
def test_train_writes_packed_models_with_card(corpus, tmp_path):
    out = tmp_path / "run"
    r = subprocess.run(train_args(corpus, out, "--max-steps", "3", "--ckpt-every", "2"),
                       capture_output=True, text=True, env=ENV, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    tensors, meta = final_weights(out)
    assert meta["card"]["steps"] == 3 and meta["card"]["model"] == "qcgan-35k"
    import qsa

    m = qsa.load(out / "qcgan-35k.int8.qsa")
    y = m(torch.zeros(1, 1600))
    assert y.shape == (1, 1600) and torch.isfinite(y).all()
    # a second start without --resume/--force is refused with a clear message
    r2 = subprocess.run(train_args(corpus, out, "--max-steps", "3"), capture_output=True,
                        text=True, env=ENV, timeout=600)
    assert r2.returncode == 2 and "--resume" in r2.stderr
    # --init from the run (its checkpoint): a warm start takes the generator AND the trained
    # discriminator, not a fresh one that pulls the generator off for its first epochs
    from qsa.models.discriminator import MetricDiscriminator
    from qsa.models.registry import build_model, preset_config
    from qsa.train.checkpoint import load_checkpoint
    from qsa.train.se import init_weights

    g, d = build_model(preset_config("qcgan-35k")), MetricDiscriminator()
    assert init_weights(g, str(out), d) == "generator+discriminator"
    g2, d2 = build_model(preset_config("qcgan-35k")), MetricDiscriminator()
    load_checkpoint(out / "checkpoint.safetensors", {"generator": g2, "discriminator": d2},
                    restore_rng=False)
    for a, b in ((g, g2), (d, d2)):
        for (k, v), w in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
            assert torch.equal(v, w), k
    assert any(not torch.equal(v, w) for v, w in zip(
        d.state_dict().values(), MetricDiscriminator().state_dict().values(), strict=True))


@pytest.mark.slow
def test_resume_after_kill_matches_uninterrupted_run(corpus, tmp_path):
    steps = ["--max-steps", "4", "--ckpt-every", "1", "--metric-start", "1"]
    ref = tmp_path / "ref"
    subprocess.run(train_args(corpus, ref, *steps), check=True, env=ENV, timeout=600,
                   capture_output=True)
    killed = tmp_path / "killed"
    p = subprocess.Popen(train_args(corpus, killed, *steps), env=ENV,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ck = killed / "checkpoint.safetensors"
    t0 = time.time()
    while not ck.exists() and time.time() - t0 < 300:
        time.sleep(0.05)
    time.sleep(0.3)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert ck.exists()  # the last complete checkpoint (a kill mid-write leaves only a .tmp)
    from qsa import safefile
    from qsa.train.checkpoint import load_checkpoint  # noqa: F401  (it must stay loadable)

    safefile.load(ck, kind="qsa.checkpoint")
    r = subprocess.run(train_args(corpus, killed, *steps, "--resume"), env=ENV, timeout=600,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not list(killed.glob(".*.tmp"))  # resume cleared any temp file of the killed write
    a, ma = final_weights(ref)
    b, mb = final_weights(killed)
    assert ma["card"]["steps"] == mb["card"]["steps"] == 4
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.slow
def test_ddp_two_processes_end_with_identical_replicas(corpus, tmp_path):
    out = tmp_path / "ddp"
    cmd = [TORCHRUN, "--nproc-per-node", "2", "--master-port", "29517", "-m", "qsa.cli",
           *train_args(corpus, out, "--max-steps", "2")[1:]]
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    d0 = (out / "replica-0.sha256").read_text()
    d1 = (out / "replica-1.sha256").read_text()
    assert len(d0) == 64 and d0 == d1


def test_init_copies_shipped_weights_and_refuses_other_models(tmp_path):
    """--init (fine-tuning): the generator starts from the given weights exactly; weights of
    another model, or a file that is not a model, are refused with the reason."""
    import qsa
    from qsa.errors import ConfigError
    from qsa.models.registry import build_model, preset_config
    from qsa.train.se import init_weights

    gen = build_model(preset_config("qcgan-35k"))
    init_weights(gen, "qcgan-35k")
    ref = qsa.load("qcgan-35k", dequantize=True).state_dict()
    for k, v in gen.state_dict().items():
        assert torch.equal(v, ref[k]), k
    with pytest.raises(ConfigError, match="differs from the preset"):
        init_weights(build_model(preset_config("qcgan-0.89m-causal")), "qcgan-35k")
    bad = tmp_path / "not-a-model.qsa"
    bad.write_bytes(b"nonsense")
    with pytest.raises(Exception, match="not-a-model.qsa"):
        init_weights(gen, str(bad))
