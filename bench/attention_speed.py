"""Wall time of shared-score vs hamilton (four-score) quaternion attention on this CPU.

    .venv/bin/python bench/attention_speed.py [--threads 1] [--reps 30]

Prints a table (median and p90 ms per forward, speed-up) for several sequence lengths and
widths; numbers go into the README. Not a test: timings vary by machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from qsa.layers import QuaternionSelfAttention


def time_call(fn, reps: int) -> list[float]:
    for _ in range(3):
        fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"threads={args.threads} reps={args.reps}")
    print("| T | width | heads | shared ms (median) | hamilton ms (median) | speed-up |")
    print("|---|---|---|---|---|---|")
    for t, e, h in [(64, 64, 2), (128, 128, 4), (256, 128, 4), (512, 256, 4)]:
        x = torch.randn(1, t, e)
        res = {}
        for score in ("shared", "hamilton"):
            att = QuaternionSelfAttention(e, h, score, causal=True).eval()
            with torch.no_grad():
                res[score] = statistics.median(time_call(lambda a=att, x=x: a(x), args.reps))
        print(
            f"| {t} | {e} | {h} | {res['shared']:.3f} | {res['hamilton']:.3f} | "
            f"{res['hamilton'] / res['shared']:.2f}x |"
        )


if __name__ == "__main__":
    main()
