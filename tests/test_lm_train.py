"""LM training: schedule, per-circuit groups, exact resume, checkpoints, CLI, torchrun DDP."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from qsa.errors import FormatError
from qsa.lm import data as lmdata
from qsa.lm.train import (
    TrainConfig,
    build_optimizer,
    load_model,
    lr_at,
    train,
    weights_sha,
)

TINY = (("dim", 32), ("num_layers", 2), ("num_heads", 2), ("ff_hidden", 48))
QSA = str(Path(sys.executable).with_name("qsa"))


@pytest.fixture(scope="module")
def text_folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    words = "the quick brown fox jumps over a lazy dog while bytes flow".split()
    for i in range(60):
        (d / f"doc{i:02d}.txt").write_text(" ".join(words[(i + j) % len(words)]
                                                    for j in range(80)) + "\n")
    return d


def cfg(**kw):
    base = dict(mixer="transformer", data="text", tokens=8 * 32 * 8, batch=8, ctx=32,
                warmup=2, eval_every=4, eval_bytes=2048, model_overrides=TINY)
    return TrainConfig(**{**base, **kw})


def test_lr_schedule_warmup_then_cosine():
    c = cfg(tokens=8 * 32 * 100, warmup=10, lr=1.0, min_lr_frac=0.1)
    lrs = [lr_at(s, c) for s in range(c.steps)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:], strict=False))
    assert lrs[-1] == pytest.approx(0.1, abs=0.01)


def test_circuit_groups_get_their_multipliers():
    from qsa.models.lm import CausalLM

    c = cfg(mixer="circuits", qk_lr_mult=4.0, ov_lr_mult=0.5)
    model = CausalLM(c.model_config())
    opt = build_optimizer(model, c)
    groups = {g["name"]: g for g in opt.param_groups}
    assert groups["qk"]["lr_mult"] == 4.0 and groups["ov"]["lr_mult"] == 0.5
    qk_ids = {id(p) for p in groups["qk"]["params"]}
    assert {id(model.blocks[0].mixer.qk_w.weight)} <= qk_ids
    assert groups["no_decay"]["weight_decay"] == 0.0
    n = sum(len(g["params"]) for g in opt.param_groups)
    assert n == len(list(model.parameters()))


@pytest.mark.parametrize("mixer", ["kuramoto", "quaternion", "circuits"])
def test_no_weight_decay_on_scalars_and_gains_and_decay_decoupled_from_lr_mult(mixer):
    """Weight decay is chosen by role: the weights of Linear / Embedding / QuaternionLinear maps
    decay, norm gains, biases and the Kuramoto step sizes (step_rho, (S, H, 1, 1): two
    non-singleton dims) do not. A circuit's LR multiplier does not scale its decay: one AdamW
    step with zero gradients shrinks every decayed weight by the same 1 - lr * wd."""
    from qsa.models.lm import CausalLM

    c = cfg(mixer=mixer, qk_lr_mult=4.0, ov_lr_mult=0.25, weight_decay=0.1, lr=0.01)
    model = CausalLM(c.model_config())
    opt = build_optimizer(model, c)
    names = {id(p): n for n, p in model.named_parameters()}
    groups = {g["name"]: g for g in opt.param_groups}
    no_decay = {names[id(p)] for p in groups["no_decay"]["params"]}
    for n, _ in model.named_parameters():
        role_free = n.endswith("step_rho") or "norm" in n or n.endswith("bias")
        assert (n in no_decay) == role_free, n
    if mixer == "kuramoto":
        assert any(n.endswith("step_rho") for n in no_decay)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for g in opt.param_groups:
        g["lr"] = c.lr * g["lr_mult"]
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    for n, p in model.named_parameters():
        want = before[n] if n in no_decay else before[n] * (1 - c.lr * c.weight_decay)
        torch.testing.assert_close(p.detach(), want, atol=1e-7, rtol=1e-6, msg=n)


@pytest.mark.parametrize("mixer", ["transformer", "kuramoto"])
def test_resume_gives_identical_weights(tmp_path, text_folder, mixer):
    corpus = lmdata.read_folder(text_folder)
    c = cfg(mixer=mixer)
    assert c.steps == 8
    full = train(c, out=tmp_path / "full", progress=False, corpus=corpus)
    half = train(c, out=tmp_path / "split", progress=False, corpus=corpus, max_steps=4)
    assert half["steps"] == 4 and "test_bpc" not in half
    resumed = train(c, out=tmp_path / "split", resume=True, progress=False, corpus=corpus)
    assert resumed["steps"] == 8
    assert weights_sha(full["model"]) == weights_sha(resumed["model"])
    assert full["test_bpc"] == resumed["test_bpc"]
    ck = tmp_path / "split" / "checkpoint"
    assert sorted(p.name for p in ck.iterdir()) == ["model.safetensors",
                                                     "optimizer.safetensors", "trainer.json"]
    model, meta = load_model(ck)
    assert weights_sha(model) == weights_sha(full["model"])
    # an altered optimizer file is caught before anything is loaded
    raw = bytearray((ck / "optimizer.safetensors").read_bytes())
    raw[-1] ^= 1
    (ck / "optimizer.safetensors").write_bytes(bytes(raw))
    with pytest.raises(FormatError):
        train(c, out=tmp_path / "split", resume=True, progress=False, corpus=corpus)


def test_training_lowers_bpc(text_folder):
    corpus = lmdata.read_folder(text_folder)
    r = train(cfg(tokens=8 * 32 * 40, eval_every=40, lr=1e-2), progress=False, corpus=corpus)
    assert r["val_bpc"] < 4.0 and r["test_bpc"] < 4.0  # 8 bits at init


def test_cli_train_and_eval(tmp_path, text_folder):
    args = [QSA, "lm", "train", "quaternion", "--data", f"folder:{text_folder}", "--tokens",
            "1024", "--batch", "4", "--ctx", "32", "--warmup", "1", "--eval-every", "4",
            "--eval-bytes", "1024", "--out", str(tmp_path / "run"), "--threads", "1"]
    for k, v in TINY:
        args += ["--set", f"{k}={v}"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "test_bpc" in r.stdout and "tok/s" in r.stderr  # tqdm progress bar on stderr
    res = json.loads((tmp_path / "run" / "result.json").read_text())
    assert res["steps"] == 8 and res["corpus_manifest"]["splits"]["test"]["sha256"]
    assert res["val_slice"].startswith("val[0:") and "ctx 32" in res["val_slice"]
    assert all(h["val_slice"] == res["val_slice"] for h in res["history"])
    assert res["test_slice"].startswith("test[0:") and res["val_bpc_whole_split"] > 0
    r = subprocess.run([QSA, "lm", "eval", str(tmp_path / "run" / "checkpoint"), "--data",
                        f"folder:{text_folder}"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"{res['test_bpc']:.4f}" in r.stdout
    bad = subprocess.run([QSA, "lm", "train", "transformer", "--data", "nowhere"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "not understood" in bad.stderr


@pytest.mark.slow
def test_torchrun_ddp_two_processes_identical_replicas(tmp_path, text_folder):
    args = [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc_per_node", "2", "-m", "qsa.cli", "lm", "train", "circuits", "--data",
            f"folder:{text_folder}", "--tokens", "1536", "--batch", "4", "--ctx", "32",
            "--warmup", "1", "--eval-every", "100", "--eval-bytes", "1024", "--quiet",
            "--qk-lr-mult", "2", "--out", str(tmp_path / "ddp"), "--threads", "1"]
    for k, v in TINY:
        args += ["--set", f"{k}={v}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((tmp_path / "ddp" / "result.json").read_text())
    assert res["world_size"] == 2 and res["steps"] == 12
    assert res["replica_weights_identical"] is True
    assert len(set(res["replica_weights_sha256"])) == 1
    model, _ = load_model(tmp_path / "ddp" / "checkpoint")
    assert weights_sha(model) == res["weights_sha256"]
    assert torch.isfinite(torch.tensor(res["test_bpc"]))
