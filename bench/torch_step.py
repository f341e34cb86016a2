"""Eager PyTorch streaming step of a shipped model: the packed path against the dense path
with its cached expanded weights (what `qsa live --runtime torch` and TorchRuntime run).

    .venv/bin/python bench/torch_step.py [--model qcgan-35k] [--steps 500]

One thread, the same random frame each step, after 50 warm-up steps; prints median / p99 /
max ms per hop and the real-time factor (step time over the hop's audio time).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch


def time_steps(proc, steps: int) -> np.ndarray:
    x = (0.1 * np.random.default_rng(0).standard_normal(proc.hop)).astype(np.float32)
    y = np.empty_like(x)
    for _ in range(50):
        proc.process_hop(x, y)
    t = np.empty(steps)
    for i in range(steps):
        t0 = time.perf_counter()
        proc.process_hop(x, y)
        t[i] = time.perf_counter() - t0
    return t * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qcgan-35k")
    ap.add_argument("--steps", type=int, default=500)
    args = ap.parse_args()
    torch.set_num_threads(1)
    from qsa.apps.live import TorchStepProcessor, load_processor
    from qsa.layers import set_quaternion_path

    for precision in ("fp32", "int8"):
        fast = load_processor(args.model, "torch", precision)
        packed = TorchStepProcessor(fast.module, precision=precision)  # its own dense copy...
        set_quaternion_path(packed.module, "packed")  # ... put back on the packed path
        for name, proc in (("packed", packed), ("dense, cached weights", fast)):
            ms = time_steps(proc, args.steps)
            hop_ms = 1000 * proc.hop / proc.sample_rate
            print(f"{args.model} {precision} {name:>22}: median {np.median(ms):.3f} p99 "
                  f"{np.percentile(ms, 99):.3f} max {ms.max():.3f} ms per {hop_ms:.0f} ms hop, "
                  f"RTF {np.mean(ms) / hop_ms:.3f}")


if __name__ == "__main__":
    main()
