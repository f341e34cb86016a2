"""`qsa demo`: what the SDK does, end to end, on this machine, in seconds."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("demo", help="run the end-to-end demo (what `make demo` runs)")
    p.add_argument("--out", default="demo_out", help="folder for the demo's files")
    p.set_defaults(func=run)


def run(args) -> int:
    import math
    import time
    from pathlib import Path

    import torch
    from rich.console import Console
    from rich.table import Table
    from torch import nn
    from torch.utils.flop_counter import FlopCounterMode

    from qsa.layers import (
        QuaternionConv1d,
        QuaternionConv2d,
        QuaternionLinear,
        QuaternionSelfAttention,
    )
    from qsa.models.qtransformer import QTransformer, QTransformerConfig
    from qsa.quantize import Int8Config, load_packed, quantize_, save_packed

    console = Console()
    torch.manual_seed(0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def sqnr(ref, test):
        return 10 * math.log10(ref.pow(2).mean().item() / (ref - test).pow(2).mean().item())

    t = Table(title="Quaternion layers: 1/4 of the weights, int8 packed with shared scales")
    for col in ("layer", "dense params", "quaternion params", "ratio", "int8 SQNR (dB)"):
        t.add_column(col, justify="right")
    cases = [
        ("Linear 256->256", QuaternionLinear(256, 256), nn.Linear(256, 256), (64, 256)),
        ("Conv1d 64->128 k5", QuaternionConv1d(64, 128, 5), nn.Conv1d(64, 128, 5), (4, 64, 100)),
        ("Conv2d 32->32 3x3", QuaternionConv2d(32, 32, 3), nn.Conv2d(32, 32, 3), (2, 32, 20, 20)),
        (
            "DWConv1d 64 k7",
            QuaternionConv1d(64, 64, 7, groups=16),
            nn.Conv1d(64, 64, 7, groups=16),
            (4, 64, 100),
        ),
    ]
    for name, q, d, shape in cases:
        x = torch.randn(shape)
        seq = nn.Sequential(q)
        with torch.no_grad():
            ref = seq(x)
            nq = sum(p.numel() for p in seq.parameters())
            quantize_(seq, Int8Config())
            s = sqnr(ref, seq(x))
        nd = sum(p.numel() for p in d.parameters())
        t.add_row(name, f"{nd:,d}", f"{nq:,d}", f"{nq / nd:.3f}", f"{s:.1f}")
    console.print(t)

    t2 = Table(title="Quaternion self-attention, 128 tokens, width 128, 4 heads")
    for col in ("score", "score MACs", "softmaxes/row", "ms per call"):
        t2.add_column(col, justify="right")
    x = torch.randn(1, 128, 128)
    for score in ("shared", "hamilton"):
        att = QuaternionSelfAttention(128, 4, score, causal=True)
        q, k, v = (att._heads(p(x)) for p in (att.q_proj, att.k_proj, att.v_proj))
        with FlopCounterMode(display=False) as fc:
            att.scores(q, k)
        with torch.no_grad():
            for _ in range(3):
                att(x)
            t0 = time.perf_counter()
            for _ in range(20):
                att(x)
            ms = (time.perf_counter() - t0) / 20 * 1e3
        t2.add_row(
            score, f"{fc.get_total_flops() // 2:,d}", "1" if score == "shared" else "4", f"{ms:.2f}"
        )
    console.print(t2)

    cfg = QTransformerConfig()
    model = QTransformer(cfg).eval()
    path = out / "qtransformer-small.int8.qsa"
    save_packed(model, path, precision="int8", card={"note": "demo, random weights"})
    loaded = load_packed(path)
    x = torch.randn(1, 32, cfg.in_features)
    with torch.no_grad():
        s = sqnr(model(x), loaded(x))
    n = sum(p.numel() for p in model.parameters())
    console.print(
        f"packed model file: {path} ({path.stat().st_size:,d} bytes for {n:,d} params), "
        f"verified on load; int8 vs fp32 output SQNR {s:.1f} dB"
    )
    return 0
