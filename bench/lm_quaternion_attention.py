"""Shared-score vs hamilton (four-score) quaternion attention, one LM layer's mixer, on CPU.

    .venv/bin/python bench/lm_quaternion_attention.py [--threads 1] [--reps 20]

Times the quaternion mixer of the LM (QuaternionLinear q/k/v/out projections + RoPE +
attention) at equal width for both score forms: forward (inference) and forward + backward
(training), median ms over reps after warm-up; prints a markdown table with the speed-up and
whether it meets the 1.5x bar. Not a test: timings vary by machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from qsa.models.lm import lm_config
from qsa.models.lm.block import rope_angles
from qsa.models.lm.quaternion import QuaternionMixer


def median_ms(fn, reps: int) -> float:
    for _ in range(3):
        fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"threads {args.threads}, torch {torch.__version__}\n")
    print("| width | heads | batch x T | mode | shared ms | hamilton ms | speed-up | >= 1.5x |")
    print("|---|---|---|---|---|---|---|---|")
    for size, batch, t in (("1m", 1, 256), ("1m", 8, 256), ("5m", 1, 256), ("1m", 1, 1024)):
        cfg = {s: lm_config("quaternion", size, score=s, max_seq_len=t)
               for s in ("shared", "hamilton")}
        torch.manual_seed(0)
        mixers = {s: QuaternionMixer(c) for s, c in cfg.items()}
        mixers["hamilton"].load_state_dict(mixers["shared"].state_dict())  # same weights
        x = torch.randn(batch, t, cfg["shared"].dim)
        cos, sin = rope_angles(torch.arange(t), mixers["shared"].rope_dim, 10000.0)
        for mode in ("forward", "fwd+bwd"):
            ms = {}
            for s, m in mixers.items():
                if mode == "forward":
                    def fn(m=m, x=x, cos=cos, sin=sin):
                        with torch.no_grad():
                            m(x, cos, sin)
                else:
                    xr = x.clone().requires_grad_(True)

                    def fn(m=m, xr=xr, cos=cos, sin=sin):
                        m(xr, cos, sin).sum().backward()
                ms[s] = median_ms(fn, args.reps)
            sp = ms["hamilton"] / ms["shared"]
            print(f"| {cfg['shared'].dim} | {cfg['shared'].num_heads} | {batch} x {t} | {mode} "
                  f"| {ms['shared']:.2f} | {ms['hamilton']:.2f} | {sp:.2f}x | "
                  f"{'yes' if sp >= 1.5 else 'no'} |", flush=True)


if __name__ == "__main__":
    main()
