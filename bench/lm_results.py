"""BPC of each LM mixer at an equal token budget, mean +- std over seeds -> OUT/lm_results.md.

The old-protocol table of docs/lm_results.md (one LR for all mixers); the comparison of the
current protocol is bench/lm_compare.py.

    nohup .venv/bin/python bench/lm_results.py --tokens 1000000 --seeds 0 1 2 \
        --out runs/lm_results > runs/lm_results.log 2>&1 &

Runs one training at a time (torch.set_num_threads(1) by default), writes each run's result
to OUT/<mixer>-<size>-s<seed>.json as soon as it ends and rewrites the markdown after every
run, so a stopped job keeps what it finished; a re-run skips the runs already on disk.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from qsa.fileio import atomic_write_text
from qsa.lm.data import load_corpus
from qsa.lm.train import VAL_BYTES, TrainConfig, save_model, train

PUBLISHED = {  # enwik8 test BPC reported for the Kuramoto-attention LM and its baseline
    ("1m", "kuramoto"): "1.637", ("1m", "transformer"): "1.616",
    ("5m", "kuramoto"): "1.448 (median)", ("5m", "transformer"): "1.452 (median)",
}
MIXERS = ("transformer", "kuramoto", "circuits", "quaternion")


def render(out: Path, args, md_path: Path) -> None:
    runs = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    lines = [
        "# LM mixers: BPC at equal token budget",
        "",
        f"Corpus `{args.data}` ("
        + {"text": "the embedded English default: stdlib docstrings + pydoc topics; ",
           "code": "the embedded code default: the Python standard library's source; "}.get(
            args.data, "")
        + "splits and sha256 in the manifest below). Each run: "
        f"{args.tokens:,} training tokens, batch {args.batch} x ctx {args.ctx}, AdamW lr "
        f"{args.lr} (cosine to 10%, warm-up {args.warmup} steps), weight decay 0.1, "
        + (f"{args.threads} CPU thread ({platform.processor() or platform.machine()}). "
           if args.device == "cpu" else f"device {args.device} "
           f"({torch.cuda.get_device_name() if torch.cuda.is_available() else '?'}). ")
        +
        "BPC = bits per byte on non-overlapping ctx-byte windows; val = "
        + (runs[0]["val_slice"] if runs and runs[0].get("val_slice") else "the val slice")
        + "; test = whole test split.",
        "",
        "Command: `" + " ".join(["python bench/lm_results.py",
                                  *([f"--data {args.data}"] if args.data != "text" else []),
                                  f"--tokens {args.tokens}",
                                  "--seeds", *map(str, args.seeds), f"--size {args.size}"])
        + "`",
        "",
        "## Summary (mean +- std over seeds)",
        "",
        "| mixer | size | params | seeds | val BPC | test BPC | train tok/s | "
        "published enwik8 BPC |",
        "|---|---|---|---|---|---|---|---|",
    ]
    summary = {}
    for mixer in MIXERS:
        rs = [r for r in runs if r["mixer"] == mixer and r["size"] == args.size]
        if not rs:
            continue

        def ms(key, rs=rs):
            v = [r[key] for r in rs if r.get(key) is not None]
            if not v:
                return "-", None
            if len(v) == 1:
                return f"{v[0]:.4f} (1 seed)", v[0]
            return f"{statistics.mean(v):.4f} +- {statistics.stdev(v):.4f}", statistics.mean(v)

        val, _ = ms("val_bpc")
        test, tmean = ms("test_bpc")
        summary[mixer] = tmean
        tps = statistics.mean(r["tokens_per_s"] for r in rs)
        lines.append(f"| {mixer} | {args.size} | {rs[0]['params']:,} | {len(rs)} | {val} | "
                     f"{test} | {tps:.0f} | {PUBLISHED.get((args.size, mixer), '-')} |")
    if summary.get("kuramoto") is not None and summary.get("transformer") is not None:
        d = summary["kuramoto"] - summary["transformer"]
        verdict = "within" if abs(d) <= 0.03 or d < 0 else "NOT within"
        lines += ["", f"Bar (Kuramoto within 0.03 BPC of the transformer): Kuramoto - "
                      f"transformer = {d:+.4f} test BPC -> {verdict} the bar (published enwik8 "
                      "gap at 1M: +0.021)."]
    lines += ["", "## Runs", "", "| mixer | seed | steps | tokens | val BPC | test BPC | "
              "tok/s | seconds |", "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        tb = f"{r['test_bpc']:.4f}" if r.get("test_bpc") is not None else "-"
        lines.append(f"| {r['mixer']}-{r['size']} | {r['seed']} | {r['steps']} | "
                     f"{r['tokens']:,} | {r['val_bpc']:.4f} | {tb} | {r['tokens_per_s']:.0f} | "
                     f"{r['train_seconds']:.0f} |")
    if runs:
        m = runs[0]["corpus_manifest"]
        lines += ["", "## Corpus manifest", "", "```json", json.dumps(m, indent=1), "```"]
    for extra in sorted(out.glob("extra-*.md")):  # other measurements, e.g. the benches
        lines += ["", extra.read_text().rstrip()]
    atomic_write_text(md_path, "\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mixers", nargs="+", default=list(MIXERS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--size", default="1m")
    ap.add_argument("--data", default="text")
    ap.add_argument("--tokens", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=25)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="runs/lm_results")
    ap.add_argument("--md", default=None, help="markdown file (default OUT/lm_results.md)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (the training device)")
    ap.add_argument("--save-models", action="store_true",
                    help="also write OUT/<mixer>-<size>-s<seed>.safetensors")
    ap.add_argument("--render-only", action="store_true",
                    help="rewrite the markdown from OUT (plus OUT/extra-*.md) and exit")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.md = args.md or str(out / "lm_results.md")
    if args.render_only:
        render(out, args, Path(args.md))
        return
    corpus = load_corpus(args.data)
    for seed in args.seeds:  # seed-major: a stopped job still has every mixer at seed 0
        for mixer in args.mixers:
            path = out / f"{mixer}-{args.size}-s{seed}.json"
            if path.exists():
                continue
            cfg = TrainConfig(mixer=mixer, size=args.size, data=args.data, tokens=args.tokens,
                              seed=seed, batch=args.batch, ctx=args.ctx, lr=args.lr,
                              warmup=args.warmup, eval_every=100, eval_bytes=VAL_BYTES)
            t0 = time.time()
            r = train(cfg, progress=False, corpus=corpus, device=args.device)
            model = r.pop("model")
            r["device"] = args.device
            if args.save_models:
                save_model(model.cpu(), out / f"{mixer}-{args.size}-s{seed}.safetensors")
            atomic_write_text(path, json.dumps(r, indent=1) + "\n")
            print(f"{mixer} seed {seed}: test {r.get('test_bpc')} ({time.time() - t0:.0f}s)",
                  flush=True)
            render(out, args, Path(args.md))


if __name__ == "__main__":
    main()
