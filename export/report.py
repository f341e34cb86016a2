"""Cost figures for export reports: MACs per streaming step (dense-equivalent), and a
markdown table over several report.json files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import nn


def macs_per_step(step: nn.Module) -> int:
    """Multiply-accumulates of one ``step`` call (torch's flop counter / 2) on the fp32
    module; quaternion layers count their real (dense-equivalent) MACs."""
    from torch.utils.flop_counter import FlopCounterMode

    from .step import example_inputs

    args = example_inputs(step)
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        step(*args)
    return int(fc.get_total_flops() // 2)


def load_reports(paths: list[str | os.PathLike]) -> list[dict]:
    return [json.loads(Path(p).read_text()) for p in paths]


def markdown_table(reports: list[dict]) -> str:
    rows = [
        "| model | target | precision | bytes | bytes/param | arena/planned | median ms/hop "
        "| p99 ms/hop | parity |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in reports:
        mem = r.get("memory", {})
        m = mem.get("arena_bytes") or mem.get("planned_bytes") or mem.get("activation_tensor_bytes")
        p = r["parity"]
        par = (
            f"step RMS {p['step_rms_error_max']:.1e}"
            if "step_rms_error_max" in p
            else f"SQNR {p['stream_sqnr_db_vs_torch_fp32']:.1f} dB"
        )
        lat = r["latency_per_hop"]
        rows.append(
            f"| {r['model']} | {r['target']} | {r['precision']} | {r['bytes']:,} | "
            f"{r['bytes_per_param']:.2f} | {m if m is not None else '-'} | "
            f"{lat['median_ms']:.3f} | {lat['p99_ms']:.3f} | {par} |"
        )
    return "\n".join(rows) + "\n"
