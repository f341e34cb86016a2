"""Streaming qcgan-35k for an hour on TFLite-Micro and LiteRT: flat memory, exact state.

    .venv/bin/python bench/long_run.py --seconds 3600 --out bench_out/long_run

Exports qcgan-35k int8 once per target (into OUT/<target>/, reused when present), then runs
``qsa.export.longrun.long_run``: RSS sampled every 10 s chunk (the bound: growth < 5 MB after
the first chunk) and the hop-by-hop stream equal, byte for byte, to a fresh runtime fed the
same audio chunk by chunk with the state carried across. Writes OUT/results.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3600.0)
    ap.add_argument("--targets", nargs="+", default=["tflm", "litert"])
    ap.add_argument("--precision", default="int8", choices=["int8", "fp32"])
    ap.add_argument("--out", default="bench_out/long_run")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    import torch

    import qsa
    from qsa.export import export_model, load_runtime
    from qsa.export.exporters import ARTIFACT_NAMES
    from qsa.export.longrun import long_run
    from qsa.fileio import atomic_write_text

    torch.set_num_threads(1)
    out = Path(args.out)
    results = {}
    for target in args.targets:
        d = out / f"{target}-{args.precision}"
        artifact = d / ARTIFACT_NAMES[target]
        if not artifact.is_file():
            export_model(qsa.load("qcgan-35k"), target, args.precision, d,
                         model_name="qcgan-35k", force=True)
        t0 = time.perf_counter()
        r = long_run(lambda a=artifact, t=target: load_runtime(t, a), args.seconds,
                     progress=True)
        r["wall_s"] = round(time.perf_counter() - t0, 1)
        r["ok"] = r["identical"] and r["rss_growth_bytes"] < 5 * 2**20
        results[target] = r
        print(f"{target}: {r['seconds']:.0f} s of audio, RSS growth "
              f"{r['rss_growth_bytes'] / 2**20:.2f} MB, identical {r['identical']}, "
              f"wall {r['wall_s']} s", flush=True)
    atomic_write_text(out / "results.json", json.dumps(results, indent=2) + "\n")
    return 0 if all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
