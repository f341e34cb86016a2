"""Export every model x target x precision, verify it, and tabulate size and latency per hop.

    .venv/bin/python bench/export_latency.py --models toy qcgan-35k --out bench_out/export
    .venv/bin/python bench/export_latency.py --models qcgan-0.89m-causal --untrained

``--untrained``: presets without shipped weights are built from their config with seeded
random weights. Size, memory, MACs and latency per hop do not depend on the weight values
(the export still verifies each artifact against PyTorch); quality numbers of such a model
mean nothing, and int8 ranges are calibrated on its untrained activations.

Writes OUT/<model>/<target>-<precision>/ (artifact + report.json), OUT/results.json (every
report, or the error of a failed export) and OUT/results.md (the table). One thread: latency
is per hop on one core of this CPU, median and p99 over 200 hops (host, not the device).
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
import warnings
from pathlib import Path


def build(name: str, untrained: bool = False):
    import torch

    if name == "toy":
        from qsa.export.toy import ToyStep, ToyStreamingQNet

        torch.manual_seed(0)
        return ToyStep(ToyStreamingQNet().eval())
    from qsa.hub import load, shipped_weights

    if untrained and shipped_weights(name) is None:
        from qsa.models.registry import build_model, preset_config

        torch.manual_seed(0)
        return build_model(preset_config(name)).eval()
    return load(name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["toy", "qcgan-35k"])
    ap.add_argument("--targets", nargs="+", default=["onnx", "executorch", "litert", "tflm"])
    ap.add_argument("--precisions", nargs="+", default=["fp32", "int8"])
    ap.add_argument("--out", default="bench_out/export")
    ap.add_argument("--untrained", action="store_true",
                    help="build presets without shipped weights with random weights (size, "
                    "memory and latency only)")
    args = ap.parse_args(argv)

    import torch

    from qsa.export import export_model
    from qsa.export.report import markdown_table

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    out = Path(args.out)
    rows, failures = [], []
    for name in args.models:
        model = build(name, args.untrained)
        for target in args.targets:
            for precision in args.precisions:
                d = out / name / f"{target}-{precision}"
                t0 = time.perf_counter()
                try:
                    r = export_model(model, target, precision, d, model_name=name, force=True)
                    rows.append(r.report)
                    status = "ok"
                except Exception as e:  # record and continue: the table shows every cell
                    failures.append(
                        {
                            "model": name,
                            "target": target,
                            "precision": precision,
                            "error": f"{type(e).__name__}: {e}",
                            "trace": traceback.format_exc()[-3000:],
                        }
                    )
                    status = f"FAILED ({type(e).__name__}: {str(e)[:160]})"
                print(
                    f"{name} {target} {precision}: {status} " f"[{time.perf_counter() - t0:.0f} s]",
                    flush=True,
                )
                out.mkdir(parents=True, exist_ok=True)
                (out / "results.json").write_text(
                    json.dumps({"reports": rows, "failures": failures}, indent=2) + "\n"
                )
    table = markdown_table(rows)
    if failures:
        table += (
            "\nFailed exports:\n\n"
            + "\n".join(
                f"- {f['model']} {f['target']} {f['precision']}: {f['error'][:300]}"
                for f in failures
            )
            + "\n"
        )
    (out / "results.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
