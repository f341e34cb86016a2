"""`qsa demo`: what the SDK does, end to end, on this machine, in seconds."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("demo", help="run the end-to-end demo (what `make demo` runs)")
    p.add_argument("--out", default="demo_out", help="folder for the demo's files")
    p.add_argument("--model", default="qcgan-35k", help="model to enhance and export")
    p.add_argument("--targets", default="tflm,litert,executorch",
                   help="comma-separated export targets (each exported int8)")
    p.add_argument("--items", type=int, default=8, help="utterances in the demo set")
    p.add_argument("--layers-only", action="store_true",
                   help="only the quaternion layer / attention tables (seconds)")
    p.set_defaults(func=run)


def run(args) -> int:
    layers_demo(args)
    if args.layers_only:
        return 0
    return enhance_export_demo(args)


def layers_demo(args) -> int:
    import math
    import time
    from pathlib import Path

    import torch
    from rich.console import Console
    from rich.table import Table
    from torch import nn
    from torch.utils.flop_counter import FlopCounterMode

    from qsa.fileio import ensure_dir
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
    ensure_dir(out, "--out folder")

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


def _spectrogram_png(path, noisy, enhanced, clean, sr: int, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
    for ax, (name, x) in zip(axes, (("noisy", noisy), ("enhanced", enhanced), ("clean", clean)),
                             strict=True):
        ax.specgram(x + 1e-7, NFFT=512, Fs=sr, noverlap=384, cmap="magma", vmin=-130)
        ax.set_ylabel(f"{name}\nHz")
    axes[0].set_title(title)
    axes[-1].set_xlabel("s")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def enhance_export_demo(args) -> int:
    """Enhance the demo set with the shipped model, then ``qsa.apps.compare`` it: export to
    the device targets at int8 (a failing combination is recorded, not fatal),
    stream the set through every runtime frame by frame, score it, and print the cortex-m7
    budget of the TFLite-Micro artifact."""
    import json
    from pathlib import Path

    import torch
    from rich.console import Console

    from qsa.apps.compare import compare
    from qsa.audio.io import read_audio, write_audio
    from qsa.commands.compare import print_table
    from qsa.data.synth import make_demo_set
    from qsa.fileio import ensure_dir
    from qsa.hub import load, shipped_weights

    console = Console()
    out = ensure_dir(Path(args.out), "--out folder")
    sr = 16000
    records = make_demo_set(out / "demo_set", n=args.items, force=True)
    names = [r["name"] for r in records]
    noisy = [read_audio(out / "demo_set" / "noisy" / f"{n}.wav")[0] for n in names]
    clean = [read_audio(out / "demo_set" / "clean" / f"{n}.wav")[0] for n in names]
    if shipped_weights(args.model) is None and not Path(args.model).is_file():
        console.print(f"[yellow]no shipped weights for {args.model}: using an untrained model")
    model = load(args.model).eval()
    console.rule(f"enhancing {len(names)} utterances with {args.model}")
    (out / "enhanced").mkdir(parents=True, exist_ok=True)
    (out / "spectrograms").mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        for n, x, c in zip(names, noisy, clean, strict=True):
            y = model(torch.from_numpy(x)[None])[0].numpy()
            write_audio(out / "enhanced" / f"{n}.wav", y, sr, force=True)
            _spectrogram_png(out / "spectrograms" / f"{n}.png", x, y, c, sr, n)

    targets = [t for t in args.targets.split(",") if t]
    # int8 on the device targets (what ships), against the torch fp32 reference compare
    # always runs; `qsa compare ... --precisions fp32,int8` adds the fp32 artifacts
    console.rule(f"compare: torch fp32/int8 + {', '.join(targets)} int8, streamed")
    res = compare([args.model], f"synth:{out / 'demo_set'}", ["torch", *targets],
                  ["int8"], out / "compare", profiles={"tflm": "cortex-m7"},
                  allow_untrained=True, threads=1, log=console.print)
    print_table(res)
    label = next(iter(res.models))
    for prec in ("int8", "fp32"):  # the budget of the TFLM artifact that exported
        row = next((r for r in res.rows if (r.model, r.runtime, r.precision) ==
                    (label, "tflm", prec) and r.status == "ok"), None)
        report = out / "compare" / Path(row.artifact).parent / "report.json" if row else None
        if report is not None and report.is_file():
            prof = json.loads(report.read_text()).get("profile")
            if prof:
                console.rule(f"cortex-m7 budget (TFLite-Micro, {prec})")
                for k, v in prof.items():
                    console.print(f"  {k:>16}: {v}")
            break
    console.print(f"report folder: {out}/ (enhanced/, spectrograms/, compare/results.md, "
                  "compare/results.json, compare/pesq_wb.png, compare/artifacts/)")
    if res.failures:
        console.rule("[red]what did not export or run (recorded in compare/results.md)")
        for r in res.failures:
            console.print(f"[red]- {r.key}: {r.error}")
    exported = [r for r in res.rows if r.status == "ok" and r.runtime != "torch"]
    return 0 if exported else 1
