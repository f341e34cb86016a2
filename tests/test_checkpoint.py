"""Checkpoints restore model, optimizer and RNG state exactly (no pickle)."""

import pytest
import torch
from torch import nn

from qsa.errors import FormatError
from qsa.layers import QuaternionLinear
from qsa.train.checkpoint import load_checkpoint, save_checkpoint


def make():
    torch.manual_seed(0)
    m = nn.Sequential(QuaternionLinear(8, 16), nn.ReLU(), QuaternionLinear(16, 8))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 10)
    return m, opt, sched


def train(m, opt, sched, steps):
    for _ in range(steps):
        x = torch.randn(4, 8)
        loss = (m(x) - x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()


def test_resume_is_exact(tmp_path):
    m, opt, sched = make()
    train(m, opt, sched, 6)
    ref = [p.detach().clone() for p in m.parameters()]

    m, opt, sched = make()
    train(m, opt, sched, 3)
    ck = tmp_path / "ck.safetensors"
    save_checkpoint(ck, {"g": m}, {"g": opt}, extra={"step": 3}, schedulers={"g": sched})
    torch.manual_seed(123)  # disturb the RNG: the checkpoint must restore it
    m2, opt2, sched2 = make()
    extra = load_checkpoint(ck, {"g": m2}, {"g": opt2}, schedulers={"g": sched2})
    assert extra == {"step": 3}
    train(m2, opt2, sched2, 3)
    for a, b in zip(ref, m2.parameters(), strict=True):
        assert torch.equal(a, b)


def test_checkpoint_mismatch_and_corruption(tmp_path):
    m, opt, _ = make()
    ck = tmp_path / "ck.safetensors"
    save_checkpoint(ck, {"g": m}, {"g": opt})
    with pytest.raises(FormatError, match="does not fit"):
        load_checkpoint(ck, {"g": nn.Linear(3, 3)})
    data = bytearray(ck.read_bytes())
    data[-5] ^= 0x10
    ck.write_bytes(bytes(data))
    with pytest.raises(FormatError, match="sha256"):
        load_checkpoint(ck, {"g": m}, {"g": opt})
