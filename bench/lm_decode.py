"""Decode speed of every 1M LM: ExecuTorch XNNPACK vs torch eager (bar: >= 2x), tg128 rows.

    .venv/bin/python bench/lm_decode.py [--mixers ...] [--models DIR] [--threads 1] [--reps 5]

Each mixer is exported (fp32, verified against eager by the exporter) and profiled with
``qsa.lm.profile`` on both runtimes in the same process, one after the other: pp64 and tg128,
tokens/s mean +- std over reps after warm-up. ``--models DIR`` uses trained weights
DIR/<mixer>-1m-s0.safetensors where present (seeded fresh weights otherwise: decode speed does
not depend on the values). Prints a markdown table; ``--out FILE`` also writes it.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from qsa.fileio import atomic_write_text
from qsa.lm.profile import profile

MIXERS = ("transformer", "kuramoto", "circuits", "quaternion")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mixers", nargs="+", default=list(MIXERS))
    ap.add_argument("--models", default=None)
    ap.add_argument("--artifacts", default=None,
                    help="reuse DIR/lm-<mixer>-fp32.pte written by `qsa lm export MIXER` "
                         "(seeded fresh weights, the same the torch row uses)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    lines = ["| mixer | params | torch pp64 t/s | torch tg128 t/s | ExecuTorch pp64 t/s | "
             "ExecuTorch tg128 t/s | .pte bytes | decode speed-up | >= 2x |",
             "|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for mixer in args.mixers:
        src = mixer
        if args.models and (Path(args.models) / f"{mixer}-1m-s0.safetensors").exists():
            src = str(Path(args.models) / f"{mixer}-1m-s0.safetensors")
        art = Path(args.artifacts or "-") / f"lm-{mixer}-fp32.pte"
        with tempfile.TemporaryDirectory():
            et = profile(str(art) if art.exists() and src == mixer else src, "executorch",
                         "1m", 64, 128, args.reps, args.threads)
            pt = profile(src, "torch", "1m", 64, 128, args.reps, args.threads)
        row = {r["test"]: r for r in pt["rows"]}, {r["test"]: r for r in et["rows"]}

        def f(r):
            return f"{r['tokens_per_s']:.0f} +- {r['tokens_per_s_std']:.0f}"

        sp = row[1]["tg128"]["tokens_per_s"] / row[0]["tg128"]["tokens_per_s"]
        line = (f"| {mixer}{' (trained)' if src != mixer else ''} | {pt['params']:,} | "
                f"{f(row[0]['pp64'])} | {f(row[0]['tg128'])} | {f(row[1]['pp64'])} | "
                f"{f(row[1]['tg128'])} | {et['bytes']:,} | {sp:.2f}x | "
                f"{'yes' if sp >= 2 else 'no'} |")
        lines.append(line)
        print(line, flush=True)
    if args.out:
        atomic_write_text(args.out, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
