"""Checkpoints restore model, optimizer and RNG state exactly (no pickle)."""

import pytest
import torch
from torch import nn

from qsa.errors import FormatError
from qsa.layers import QuaternionLinear
from qsa.train.checkpoint import average_checkpoints, load_checkpoint, save_checkpoint


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


def test_average_checkpoints(tmp_path):
    """The average holds the element-wise mean of every module's float tensors (integer
    buffers from the last checkpoint), loads like any checkpoint, keeps the last run state
    and names its sources; checkpoints of different models are refused, nothing written."""
    paths, weights = [], []
    for i in range(3):
        m, opt, sched = make()
        train(m, opt, sched, 2 + i)
        bn = nn.BatchNorm1d(4)
        bn.num_batches_tracked += 10 * i
        paths.append(tmp_path / f"c{i}.safetensors")
        save_checkpoint(paths[-1], {"g": m, "bn": bn}, {"g": opt}, extra={"step": i})
        weights.append([p.detach().clone() for p in m.parameters()])
    out = average_checkpoints(paths, tmp_path / "avg.safetensors")
    m2, bn2 = make()[0], nn.BatchNorm1d(4)
    extra = load_checkpoint(out, {"g": m2, "bn": bn2}, restore_rng=False)
    assert extra["step"] == 2 and extra["averaged_from"] == [str(p) for p in paths]
    for got, *ws in zip(m2.parameters(), *weights, strict=True):
        torch.testing.assert_close(got, sum(ws) / 3, rtol=0, atol=1e-7)
        assert not torch.equal(got, ws[-1])
    assert int(bn2.num_batches_tracked) == 20

    other = tmp_path / "other.safetensors"
    save_checkpoint(other, {"g": nn.Sequential(QuaternionLinear(8, 32))})
    with pytest.raises(FormatError, match=r"does not match .*c0\.safetensors.*one model"):
        average_checkpoints([paths[0], other], tmp_path / "bad.safetensors")
    with pytest.raises(FormatError, match="not a qsa train checkpoint"):
        average_checkpoints([paths[0], tmp_path / "missing"], tmp_path / "bad.safetensors")
    with pytest.raises(FormatError, match="no checkpoint given"):
        average_checkpoints([], tmp_path / "bad.safetensors")
    assert not (tmp_path / "bad.safetensors").exists()
