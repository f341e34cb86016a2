"""Quaternion self-attention: shared vs hamilton scores against a naive reference, cost
counts, masks, causality and streaming."""

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from qsa.layers import QuaternionSelfAttention, conjugate, hamilton_product


def naive_attention(att: QuaternionSelfAttention, x: torch.Tensor) -> torch.Tensor:
    """Token-by-token reference written from the definitions, with explicit loops."""
    b, t, e = x.shape
    h, d = att.num_heads, att.head_quaternions

    def heads(y):  # (B, T, E) -> (B, H, T, d, 4) quaternions
        return y.reshape(b, t, 4, h, d).permute(0, 3, 1, 4, 2)

    q, k, v = heads(att.q_proj(x)), heads(att.k_proj(x)), heads(att.v_proj(x))
    out = torch.zeros(b, h, t, d, 4)
    for bi in range(b):
        for hi in range(h):
            for ti in range(t):
                allowed = []
                for ui in range(t):
                    ok = (not att.causal or ui <= ti) and (
                        att.window is None or abs(ti - ui) < att.window
                    )
                    if ok:
                        allowed.append(ui)
                if att.score == "shared":
                    s = torch.stack(
                        [
                            sum(
                                hamilton_product(q[bi, hi, ti, di], conjugate(k[bi, hi, ui, di]))[0]
                                for di in range(d)
                            )
                            for ui in allowed
                        ]
                    ) / math.sqrt(4 * d)
                    a = torch.softmax(s, 0)
                    out[bi, hi, ti] = sum(a[n] * v[bi, hi, u] for n, u in enumerate(allowed))
                else:
                    s = torch.stack(
                        [
                            sum(
                                hamilton_product(q[bi, hi, ti, di], conjugate(k[bi, hi, ui, di]))
                                for di in range(d)
                            )
                            for ui in allowed
                        ]
                    ) / math.sqrt(4 * d)  # (U, 4)
                    a = torch.softmax(s, 0)  # per component
                    for di in range(d):
                        out[bi, hi, ti, di] = sum(
                            hamilton_product(a[n], v[bi, hi, u, di]) for n, u in enumerate(allowed)
                        )
    y = out.permute(0, 2, 4, 1, 3).reshape(b, t, e)  # (B, T, [4 x H x d])
    return att.out_proj(y)


@pytest.mark.parametrize("score", ["shared", "hamilton"])
@pytest.mark.parametrize("causal,window", [(False, None), (True, None), (True, 3), (False, 2)])
def test_matches_naive_reference(score, causal, window):
    torch.manual_seed(0)
    att = QuaternionSelfAttention(16, num_heads=2, score=score, causal=causal, window=window)
    x = torch.randn(2, 6, 16)
    with torch.no_grad():
        torch.testing.assert_close(att(x), naive_attention(att, x), rtol=1e-5, atol=1e-5)


class CountSoftmax(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.rows = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten._softmax.default:
            self.calls += 1
            self.rows += out.numel() // out.shape[-1]
        return out


def _heads(b=2, h=2, t=32, d=8):
    g = torch.Generator().manual_seed(1)
    return [torch.randn(b, h, t, 4, d, generator=g) for _ in range(3)]


def test_shared_score_costs_a_quarter_and_one_softmax():
    q, k, v = _heads()
    t = q.shape[2]
    flops, soft = {}, {}
    for score in ("shared", "hamilton"):
        att = QuaternionSelfAttention(64, 2, score)
        with FlopCounterMode(display=False) as fc:
            att.scores(q, k)
        flops[score] = fc.get_total_flops()
        mode = CountSoftmax()
        with mode:
            att.attend(q, k, v, att.mask(t, t))
        soft[score] = mode.rows
    assert flops["shared"] * 4 == flops["hamilton"]
    b, h, _, _, d = q.shape
    assert flops["shared"] == 2 * b * h * t * t * 4 * d  # 2 flops per multiply-add
    # one softmax per query row (shared) versus one per row and component (hamilton)
    assert soft["shared"] == b * h * t
    assert soft["hamilton"] == 4 * b * h * t


@pytest.mark.parametrize("score", ["shared", "hamilton"])
def test_causal_prefix_is_independent_of_the_suffix(score):
    torch.manual_seed(2)
    att = QuaternionSelfAttention(32, 2, score, causal=True)
    x = torch.randn(1, 12, 32)
    x2 = x.clone()
    x2[:, 7:] = torch.randn(1, 5, 32)
    with torch.no_grad():
        torch.testing.assert_close(att(x)[:, :7], att(x2)[:, :7])
        assert not torch.allclose(att(x)[:, 7:], att(x2)[:, 7:])


@pytest.mark.parametrize("score", ["shared", "hamilton"])
@pytest.mark.parametrize("window", [1, 4, 20])
def test_streaming_step_equals_offline(score, window):
    torch.manual_seed(3)
    att = QuaternionSelfAttention(32, 2, score, causal=True, window=window)
    x = torch.randn(2, 15, 32)
    state = att.init_state(2)
    shapes = [tuple(s.shape) for s in state]
    outs = []
    with torch.no_grad():
        for t in range(x.shape[1]):
            y, state = att.step(x[:, t : t + 1], state)
            assert [tuple(s.shape) for s in state] == shapes  # fixed-shape state
            outs.append(y)
        torch.testing.assert_close(torch.cat(outs, 1), att(x), rtol=1e-5, atol=1e-5)


def test_streaming_requires_a_window():
    with pytest.raises(ValueError, match="window"):
        QuaternionSelfAttention(16, 1, causal=True).init_state()


def test_bad_dims_are_explained():
    with pytest.raises(ValueError, match="divisible by 4 \\* num_heads"):
        QuaternionSelfAttention(24, num_heads=4)
    with pytest.raises(ValueError, match="score="):
        QuaternionSelfAttention(16, score="four")


@pytest.mark.parametrize("score", ["shared", "hamilton"])
@pytest.mark.parametrize("causal,window", [(True, 5), (False, 4), (True, 300)])
def test_long_sequences_take_the_banded_path_with_the_same_result(score, causal, window):
    """Past 2 blocks, a windowed layer attends block by block (bounded memory); the result
    equals the full-mask computation, and no (T, T) score tensor is ever built."""
    torch.manual_seed(0)
    att = QuaternionSelfAttention(16, 2, score=score, causal=causal, window=window).eval()
    t = 2 * att.block_size(window) + 77  # a ragged last block
    x = torch.randn(2, t, 16)
    with torch.no_grad():
        q, k, v = (att._heads(p(x)) for p in (att.q_proj, att.k_proj, att.v_proj))
        full = att.out_proj(att._merge(att.attend(q, k, v, att.mask(t, t))))

        class Widest(TorchDispatchMode):
            keys = 0  # the most keys any score / mask tensor held

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if isinstance(out, torch.Tensor) and out.ndim >= 2 and out.shape[-2] > 1:
                    Widest.keys = max(Widest.keys, out.shape[-1] * (out.shape[-2] == t))
                return out

        with Widest():
            banded = att(x)
    assert torch.allclose(banded, full, atol=1e-5, rtol=1e-5)
    assert Widest.keys < t, "a full (T, T) score or mask tensor was built"
