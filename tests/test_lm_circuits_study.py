"""The circuits study: collapsed vs factorised one-layer attention at matched rank and the same
RoPE placement, decay decoupled from the LR multipliers, relevant-key mass, the resumable
bench script end to end on a tiny budget."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from qsa.errors import ConfigError
from qsa.lm.circuits_study import (
    OneLayerAttention,
    StudyConfig,
    build_optimizer,
    loss_levels,
    make_batch,
    mass_at_loss,
    relevant_mass,
    train_run,
)

ROOT = Path(__file__).resolve().parents[1]


def test_factorised_spans_the_collapsed_function_at_matched_rank():
    """At rank E, factorised W = P Q with P = W, Q = I is the collapsed model exactly: same
    RoPE placement, same scores, same outputs."""
    torch.manual_seed(0)
    col = OneLayerAttention(StudyConfig(form="collapsed", dim=16, heads=2, prefix=6))
    fac = OneLayerAttention(StudyConfig(form="factorised", dim=16, heads=2, prefix=6))
    assert fac.qk.p.shape == (2, 16, 16) and fac.qk.q.shape == (2, 16, 16)  # rank E
    with torch.no_grad():
        fac.embed.weight.copy_(col.embed.weight)
        for f, c in ((fac.qk, col.qk), (fac.ov, col.ov)):
            f.p.copy_(c.w)
            f.q.copy_(torch.eye(16).expand(2, 16, 16))
    x = torch.randint(0, 256, (3, 12))
    with torch.no_grad():
        torch.testing.assert_close(fac(x, keep_attention=True), col(x, keep_attention=True),
                                   atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fac.last_attention, col.last_attention, atol=1e-6, rtol=1e-5)
    # the initial circuit matrices have the same scale in both forms
    torch.manual_seed(1)
    big_c = OneLayerAttention(StudyConfig(form="collapsed", dim=64, heads=4))
    big_f = OneLayerAttention(StudyConfig(form="factorised", dim=64, heads=4))
    sc, sf = big_c.qk.matrix().std().item(), big_f.qk.matrix().std().item()
    assert abs(sc - sf) / sc < 0.1


def test_causal_and_relevant_mass():
    torch.manual_seed(0)
    model = OneLayerAttention(StudyConfig(dim=16, prefix=6)).eval()
    a = torch.randint(0, 256, (2, 12))
    b = a.clone()
    b[:, 7:] = torch.randint(0, 256, (2, 5))
    with torch.no_grad():
        torch.testing.assert_close(model(a)[:, :7], model(b)[:, :7])
    p = 5
    maps = torch.zeros(1, 2, 2 * p, 2 * p)
    maps[..., 0] = 1.0
    for j in range(p - 1):
        maps[0, 0, p + j] = 0.0
        maps[0, 0, p + j, j + 1] = 1.0  # head 0 attends to the byte to copy
    assert relevant_mass(maps, p).tolist() == [1.0, 0.0]


@pytest.mark.parametrize("form", ["collapsed", "factorised"])
def test_decay_is_not_scaled_by_the_lr_multipliers(form):
    cfg = StudyConfig(form=form, ratio=4.0, dim=16, lr=0.01, weight_decay=0.1)
    model = OneLayerAttention(cfg)
    opt = build_optimizer(model, cfg)
    mult = {g["name"]: g["lr_mult"] for g in opt.param_groups}
    assert mult["qk"] == pytest.approx(2.0) and mult["ov"] == pytest.approx(0.5)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for g in opt.param_groups:
        g["lr"] = cfg.lr * g["lr_mult"]
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    for n, p in model.named_parameters():
        want = before[n] if "norm" in n else before[n] * (1 - cfg.lr * cfg.weight_decay)
        torch.testing.assert_close(p.detach(), want, atol=1e-7, rtol=1e-6, msg=n)


def test_batches_reproducible_and_half_copy_task():
    cfg = StudyConfig(prefix=8, batch=6)
    text = np.frombuffer(b"some english text for the other half of the batch " * 20, np.uint8)
    x = make_batch(3, cfg, text)
    assert x.shape == (6, 16) and torch.equal(x, make_batch(3, cfg, text))
    assert torch.equal(x[:3, :8], x[:3, 8:])  # copy sequences
    with pytest.raises(ConfigError):
        StudyConfig(form="low-rank")


def test_mass_at_equal_loss_interpolates():
    curve = [{"copy_bits": 8.0, "mass_best_head": 0.0}, {"copy_bits": 4.0, "mass_best_head": 0.4},
             {"copy_bits": 2.0, "mass_best_head": 0.8}]
    assert mass_at_loss(curve, 6.0) == pytest.approx(0.2)
    assert mass_at_loss(curve, 3.0) == pytest.approx(0.6)
    assert mass_at_loss(curve, 1.0) is None
    other = [{"copy_bits": 7.5, "mass_best_head": 0.0}, {"copy_bits": 5.0, "mass_best_head": 0.1}]
    lv = loss_levels([{"curve": curve}, {"curve": other}], n=2)
    assert lv == pytest.approx([6.25, 5.0])


def test_train_run_records_a_curve():
    text = np.frombuffer(b"the quick brown fox jumps over the lazy dog. " * 50, np.uint8)
    cfg = StudyConfig(dim=16, prefix=6, steps=6, batch=4, eval_every=3, eval_batch=4, warmup=2)
    rec = train_run(cfg, text, text)
    assert [c["step"] for c in rec["curve"]] == [0, 3, 6]
    assert all(np.isfinite(c["copy_bits"]) and 0 <= c["mass_best_head"] <= 1
               for c in rec["curve"])
    assert rec["params"]["qk"] == rec["params"]["ov"] == 2 * 16 * 16


def test_bench_script_runs_resumes_and_plots(tmp_path):
    d = tmp_path / "corpus"
    d.mkdir()
    for i in range(40):
        (d / f"f{i}.txt").write_text(f"sentence number {i} about attention circuits. " * 20)
    args = [sys.executable, str(ROOT / "bench" / "lm_circuits.py"), "--data", f"folder:{d}",
            "--steps", "4", "--dim", "16", "--prefix", "6", "--batch", "4", "--eval-every",
            "2", "--ratios", "0.25", "4", "--seeds", "0", "--out", str(tmp_path / "out")]
    r = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    runs = sorted(p.name for p in (tmp_path / "out" / "runs").iterdir())
    assert runs == ["collapsed-r0.25-s0.json", "collapsed-r4-s0.json",
                    "factorised-r0.25-s0.json", "factorised-r4-s0.json"]
    assert (tmp_path / "out" / "circuits.png").read_bytes()[:4] == b"\x89PNG"
    md = (tmp_path / "out" / "circuits.md").read_text()
    assert "| factorised | 4 | 1 |" in md
    before = (tmp_path / "out" / "runs" / runs[0]).read_text()
    r = subprocess.run(args, capture_output=True, text=True, timeout=600)  # resumes: skips all
    assert r.returncode == 0 and r.stdout == "", r.stdout + r.stderr
    assert (tmp_path / "out" / "runs" / runs[0]).read_text() == before
    assert json.loads(before)["config"]["ratio"] == 0.25
