"""`qsa demo`: what the SDK does, end to end, on this machine, in seconds."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("demo", help="run the end-to-end demo (what `make demo` runs)")
    p.add_argument("--out", default="demo_out", help="folder for the demo's files")
    p.add_argument("--model", default="qcgan-35k", help="model to enhance and export")
    p.add_argument("--targets", default="tflm,litert,executorch",
                   help="comma-separated export targets (int8)")
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
    """Enhance the demo set with the shipped model, export it int8 to the device targets,
    compare PESQ per runtime (streamed frame by frame) and print the cortex-m7 budget."""
    import json
    import time
    from pathlib import Path

    import numpy as np
    import torch
    from rich.console import Console
    from rich.table import Table

    from qsa.audio.io import write_audio
    from qsa.data.synth import make_demo_set
    from qsa.errors import QsaError
    from qsa.export import export_model, load_runtime
    from qsa.fileio import atomic_write_text
    from qsa.hub import load, shipped_weights
    from qsa.metrics.scores import pesq_score

    console = Console()
    out = Path(args.out)
    sr = 16000
    records = make_demo_set(out / "demo_set", n=args.items, force=True)
    names = [r["name"] for r in records]
    from qsa.audio.io import read_audio

    noisy = [read_audio(out / "demo_set" / "noisy" / f"{n}.wav")[0] for n in names]
    clean = [read_audio(out / "demo_set" / "clean" / f"{n}.wav")[0] for n in names]
    if shipped_weights(args.model) is None and not Path(args.model).is_file():
        console.print(f"[yellow]no shipped weights for {args.model}: using an untrained model")
    model = load(args.model).eval()
    console.rule(f"enhancing {len(names)} utterances with {args.model}")
    (out / "enhanced").mkdir(parents=True, exist_ok=True)
    (out / "spectrograms").mkdir(parents=True, exist_ok=True)
    enhanced = []
    with torch.no_grad():
        for n, x, c in zip(names, noisy, clean, strict=True):
            y = model(torch.from_numpy(x)[None])[0].numpy()
            enhanced.append(y)
            write_audio(out / "enhanced" / f"{n}.wav", y, sr, force=True)
            _spectrogram_png(out / "spectrograms" / f"{n}.png", x, y, c, sr, n)

    delay = int(getattr(model, "delay_samples", 0))

    def score(ys, streamed: bool):
        vals = []
        for y, c in zip(ys, clean, strict=True):
            if streamed and delay:  # streaming output lags by the STFT delay
                y = np.concatenate([y[delay:], np.zeros(delay, np.float32)])
            n = min(len(y), len(c))
            try:
                vals.append(pesq_score(c[:n], y[:n], sr, "wb"))
            except ValueError:  # pesq cannot score this pair (e.g. silence): skip it
                vals.append(float("nan"))
        v = np.array([p for p in vals if np.isfinite(p)])
        return float(v.mean()) if len(v) else float("nan")

    rows = [{"runtime": "noisy input", "precision": "-", "pesq_wb": score(noisy, False)}]
    ref = score(enhanced, False)
    rows.append({"runtime": "torch (offline)", "precision": "fp32", "pesq_wb": ref})
    failures = []
    reports = {}
    for target in [t for t in args.targets.split(",") if t]:
        res = None
        for precision in ("int8", "fp32"):
            console.rule(f"export {precision} -> {target}")
            t0 = time.perf_counter()
            try:
                res = export_model(
                    model, target, precision, out / "export" / f"{target}-{precision}",
                    calib=noisy[: max(2, len(noisy) // 2)], verify_wave=noisy[0],
                    profile="cortex-m7" if target == "tflm" else None,
                    model_name=args.model, force=True)
                break
            except QsaError as e:
                failures.append(f"{target} {precision}: {e}")
                console.print(f"[red]export {precision} to {target} failed:[/red] {e}")
                if precision == "fp32":
                    res = None
        if res is None:
            continue
        reports[target] = res.report
        rt = load_runtime(target, res.artifact)
        t1 = time.perf_counter()
        ys = [rt.run_utterance(x) for x in noisy]
        secs = time.perf_counter() - t1
        audio_s = sum(len(x) for x in noisy) / sr
        lat = res.report.get("latency_per_hop") or {}
        rows.append({
            "runtime": target, "precision": precision, "pesq_wb": score(ys, True),
            "bytes": res.report.get("bytes"), "rtf": secs / audio_s,
            "hop_ms_median": lat.get("median_ms"), "hop_ms_p99": lat.get("p99_ms"),
            "export_s": round(t1 - t0, 1),
        })
        console.print(f"{res.artifact} ({res.report.get('bytes'):,} bytes) in {t1 - t0:.0f} s")
    table = Table(title=f"{args.model} on the demo set (PESQ-WB, streamed frame by frame)")
    for col in ("runtime", "precision", "PESQ-WB", "dPESQ vs torch fp32", "bytes",
                "hop ms (median/p99)", "RTF"):
        table.add_column(col, justify="right")
    for r in rows:
        d = "" if r["runtime"] == "noisy input" else f"{r['pesq_wb'] - ref:+.3f}"
        hop = (f"{r['hop_ms_median']:.3f} / {r['hop_ms_p99']:.3f}"
               if r.get("hop_ms_median") is not None else "")
        table.add_row(r["runtime"], r["precision"], f"{r['pesq_wb']:.3f}", d,
                      f"{r['bytes']:,}" if r.get("bytes") else "", hop,
                      f"{r['rtf']:.3f}" if r.get("rtf") else "")
    console.print(table)
    prof = reports.get("tflm", {}).get("profile")
    if prof:
        console.rule(f"cortex-m7 budget (TFLite-Micro, {reports['tflm'].get('precision')})")
        for k, v in prof.items():
            console.print(f"  {k:>16}: {v}")
    atomic_write_text(out / "results.json", json.dumps({"rows": rows, "reports": reports,
                                                       "failures": failures}, indent=1,
                                                      default=str))
    console.print(f"report folder: {out}/ (enhanced/, spectrograms/, export/, results.json)")
    if failures:
        console.rule("[red]what did not export (the demo fell back to fp32 there)")
        for f in failures:
            console.print(f"[red]- {f}")
    exported = [r for r in rows if r["runtime"] not in ("noisy input", "torch (offline)")]
    return 0 if exported else 1
