"""Sweep of the QK/OV learning-rate ratio: one training per ratio r, with qk_lr_mult =
sqrt(r) and ov_lr_mult = 1/sqrt(r) (the geometric mean LR stays the base LR), then BPC and
attention diagnostics of each trained model -> sweep.json, sweep.md, sweep.png.

"Comparable loss": the table marks the runs whose validation BPC is within ``tolerance`` of the
best run; concentration is only compared among those (a ratio that wrecks the loss trivially
changes the attention).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

import numpy as np
import torch

from ..fileio import atomic_path, atomic_write_text, ensure_dir
from .data import load_corpus
from .diagnostics import diagnose
from .train import TrainConfig, train


def sweep(base: TrainConfig, ratios: list[float], out: str | os.PathLike,
          tolerance: float = 0.05, progress: bool = False, corpus=None) -> list[dict]:
    out = Path(out)
    ensure_dir(out)
    corpus = corpus or load_corpus(base.data)
    rows = []
    for r in ratios:
        cfg = dataclasses.replace(base, qk_lr_mult=math.sqrt(r), ov_lr_mult=1 / math.sqrt(r))
        res = train(cfg, progress=progress, corpus=corpus)
        model = res.pop("model")
        n = min(corpus.val.size - 1, 8 * cfg.ctx)
        w = n // cfg.ctx
        text = torch.from_numpy(corpus.val[: w * cfg.ctx].astype(np.int64)).view(w, cfg.ctx)
        d = diagnose(model, text)
        rows.append({"ratio": r, "qk_lr_mult": cfg.qk_lr_mult, "ov_lr_mult": cfg.ov_lr_mult,
                     "val_bpc": res["val_bpc"], "val_slice": res["val_slice"],
                     "test_bpc": res.get("test_bpc"),
                     "text_entropy_bits": d["mean"].get("text_entropy_bits"),
                     "text_top1_mass": d["mean"].get("text_top1_mass"),
                     "text_concentration": d["mean"].get("text_concentration"),
                     "induction_mass": d["best_induction_mass"],
                     "induction_bpc": d["induction_bpc"], "layers": d["layers"]})
        atomic_write_text(out / "sweep.json", json.dumps(
            {"base": base.to_json(), "rows": rows}, indent=1) + "\n")
    best = min(r["val_bpc"] for r in rows)
    for r in rows:
        r["comparable_loss"] = r["val_bpc"] <= best + tolerance
    atomic_write_text(out / "sweep.json", json.dumps({"base": base.to_json(), "rows": rows},
                                                     indent=1) + "\n")
    lines = [f"# QK/OV learning-rate ratio sweep: {base.mixer}-{base.size}, {base.tokens:,} "
             f"tokens, data {base.data}, seed {base.seed}", "",
             f"val BPC on {rows[0]['val_slice']}; weight decay per step lr * wd in every "
             "group (not scaled by the circuit multipliers)", "",
             "| QK/OV ratio | qk mult | ov mult | val BPC | comparable loss | text entropy (bits)"
             " | text top-1 | text concentration | induction mass (best head) | induction BPC |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['ratio']:g} | {r['qk_lr_mult']:.3f} | {r['ov_lr_mult']:.3f} | "
                     f"{r['val_bpc']:.4f} | {'yes' if r['comparable_loss'] else 'no'} | "
                     f"{r['text_entropy_bits']:.3f} | {r['text_top1_mass']:.3f} | "
                     f"{r['text_concentration']:.3f} | {r['induction_mass']:.3f} | "
                     f"{r['induction_bpc']:.3f} |")
    atomic_write_text(out / "sweep.md", "\n".join(lines) + "\n")
    _plot(rows, out / "sweep.png", f"{base.mixer}-{base.size}, {base.tokens:,} tokens")
    return [{k: v for k, v in r.items() if k != "layers"} for r in rows]


def _plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r["ratio"] for r in rows]
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    for key, label in (("text_concentration", "text: concentration"),
                       ("text_top1_mass", "text: top-1 mass"),
                       ("induction_mass", "induction: mass on j+1 (best head)")):
        ax[0].plot(x, [r[key] for r in rows], marker="o", label=label)
    for r in rows:
        if not r["comparable_loss"]:
            ax[0].axvspan(r["ratio"] / 1.15, r["ratio"] * 1.15, color="0.9")
    ax[0].set_xscale("log", base=2)
    ax[0].set_xlabel("QK / OV learning-rate ratio")
    ax[0].set_ylabel("attention concentration")
    ax[0].legend(fontsize=8)
    ax[0].set_title("grey: loss not comparable", fontsize=9)
    ax[1].plot(x, [r["val_bpc"] for r in rows], marker="o")
    ax[1].set_xscale("log", base=2)
    ax[1].set_xlabel("QK / OV learning-rate ratio")
    ax[1].set_ylabel("validation BPC")
    fig.suptitle(title)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
