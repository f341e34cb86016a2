"""Attention diagnostics on known maps, on a model, and the QK/OV ratio sweep end to end."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from qsa.lm.diagnostics import attention_stats, diagnose, induction_batch, induction_mass
from qsa.models.lm import CausalLM, lm_config

QSA = str(Path(sys.executable).with_name("qsa"))


def _uniform(t):
    a = torch.tril(torch.ones(t, t))
    return (a / a.sum(-1, keepdim=True)).view(1, 1, t, t)


def test_stats_of_uniform_and_one_hot_maps():
    t = 16
    s = attention_stats(_uniform(t), skip=0)
    want = sum(math.log2(i + 1) for i in range(t)) / t
    assert s["entropy_bits"] == pytest.approx(want, rel=1e-5)
    assert attention_stats(_uniform(t))["concentration"] == pytest.approx(0.0, abs=1e-5)
    eye = torch.eye(t).view(1, 1, t, t)
    s = attention_stats(eye)
    assert s["entropy_bits"] == pytest.approx(0.0, abs=1e-6)
    assert s["top1_mass"] == pytest.approx(1.0) and s["concentration"] == pytest.approx(1.0)


def test_induction_mass_of_a_perfect_induction_head():
    p = 10
    x = induction_batch(2, p)
    assert torch.equal(x[:, :p], x[:, p:])
    a = torch.zeros(2, 2, 2 * p, 2 * p)
    a[:, :, :, 0] = 1.0
    for j in range(p - 1):  # head 0: induction, head 1: copy
        a[:, 0, p + j] = 0.0
        a[:, 0, p + j, j + 1] = 1.0
        a[:, 1, p + j] = 0.0
        a[:, 1, p + j, j] = 1.0
    m = induction_mass(a, p)
    assert m["induction"].tolist() == [1.0, 0.0] and m["copy"].tolist() == [0.0, 1.0]


@pytest.mark.parametrize("mixer", ["transformer", "kuramoto", "circuits", "quaternion"])
def test_diagnose_model(mixer):
    model = CausalLM(lm_config(mixer, "1m", dim=32, num_layers=2, num_heads=2, ff_hidden=48,
                               max_seq_len=32))
    d = diagnose(model, torch.randint(0, 256, (2, 32)), prefix=12)
    assert len(d["layers"]) == 2
    for layer in d["layers"]:
        assert 0.0 <= layer["induction_mass_mean"] <= 1.0
        assert layer["text_entropy_bits"] > 0
    assert d["induction_bpc"] > 0
    assert all(blk.mixer.last_attention is None for blk in model.blocks)


def test_sweep_cli_writes_table_json_and_plot(tmp_path):
    d = tmp_path / "corpus"
    d.mkdir()
    for i in range(40):
        (d / f"f{i}.txt").write_text(f"line {i} " * 40)
    args = [QSA, "lm", "sweep", "circuits", "--data", f"folder:{d}", "--tokens", "512",
            "--batch", "4", "--ctx", "32", "--warmup", "1", "--eval-every", "100",
            "--eval-bytes", "512", "--ratios", "0.25,4", "--out", str(tmp_path / "sw"),
            "--threads", "1"]
    for kv in ("dim=32", "num_layers=1", "ff_hidden=48"):
        args += ["--set", kv]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = json.loads((tmp_path / "sw" / "sweep.json").read_text())["rows"]
    assert [row["ratio"] for row in rows] == [0.25, 4.0]
    assert rows[1]["qk_lr_mult"] == pytest.approx(2.0) and rows[1]["ov_lr_mult"] == 0.5
    assert (tmp_path / "sw" / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "QK/OV ratio" in (tmp_path / "sw" / "sweep.md").read_text()
