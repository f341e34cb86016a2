"""QK:OV learning-rate ratios in the circuits setting: single-layer attention-only models,
collapsed vs factorised circuits at matched rank and the same RoPE placement, trained on a copy
task with known relevant keys plus text (qsa.lm.circuits_study) -> OUT/circuits.md, .json, .png.

    nice -n 15 .venv/bin/python bench/lm_circuits.py --out runs/lm_circuits \
        > runs/lm_circuits.log 2>&1 &       # 2 forms x 3 ratios x 3 seeds = 18 runs

Resumable: each finished run is OUT/runs/<form>-r<ratio>-s<seed>.json, written atomically; a
re-run skips the runs on disk and re-renders the table and plot (``--render-only`` only
renders). One run at a time, torch.set_num_threads(--threads) (default 1).

The comparison is made at equal loss: for copy-loss levels that every run reaches, the mass on
the relevant key where each run first gets there (interpolated between evaluations), mean +- std
over seeds per (form, ratio); the final mass and losses are listed as well.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from qsa.fileio import atomic_path, atomic_write_text
from qsa.lm.circuits_study import StudyConfig, loss_levels, mass_at_loss, train_run
from qsa.lm.data import load_corpus


def _ms(v: list[float]) -> str:
    if not v:
        return "-"
    if len(v) == 1:
        return f"{v[0]:.3f}"
    return f"{statistics.mean(v):.3f} +- {statistics.stdev(v):.3f}"


def render(out: Path, args) -> None:
    runs = [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*.json"))]
    if not runs:
        return
    levels = loss_levels(runs, n=4)
    c0 = runs[0]["config"]
    keys = sorted({(r["config"]["form"], r["config"]["ratio"]) for r in runs})
    lines = [
        "# QK:OV learning-rate ratio, single-layer attention (circuits study)", "",
        f"Data `{args.data}` (text half of every batch) + the copy task (P = {c0['prefix']} "
        f"random bytes repeated once; relevant key of query t = P + j is j + 1). Width "
        f"{c0['dim']}, {c0['heads']} heads, circuit rank {c0['rank'] or c0['dim']} (matched), "
        f"RoPE on the E-wide query and key in both forms, {c0['steps']} steps x batch "
        f"{c0['batch']} x ctx {2 * c0['prefix']}, AdamW lr {c0['lr']} (qk x sqrt(ratio), ov x "
        "1/sqrt(ratio); decay per step lr * wd in every group, not scaled by the multipliers). "
        f"Held-out: {c0['eval_batch']} copy sequences and {c0['eval_batch']} text windows of "
        "the val split, fixed per seed.", "",
        "Command: `python " + " ".join(sys.argv) + "`", "",
        "## Relevant-key mass at equal copy loss (best head; mean +- std over seeds)", "",
        "| form | QK:OV | seeds | " + " | ".join(f"mass @ {lv:.2f} bits" for lv in levels)
        + " | final mass | final copy bits | final text BPC |",
        "|---|---|---|" + "---|" * len(levels) + "---|---|---|",
    ]
    for form, ratio in keys:
        rs = [r for r in runs if (r["config"]["form"], r["config"]["ratio"]) == (form, ratio)]
        at = []
        for lv in levels:
            v = [m for r in rs if (m := mass_at_loss(r["curve"], lv)) is not None]
            at.append(_ms(v))
        lines.append(f"| {form} | {ratio:g} | {len(rs)} | " + " | ".join(at) + " | "
                     + _ms([r["final"]["mass_best_head"] for r in rs]) + " | "
                     + _ms([r["final"]["copy_bits"] for r in rs]) + " | "
                     + _ms([r["final"]["text_bpc"] for r in rs]) + " |")
    lines += ["", "## Runs", "", "| run | params (qk / ov / total) | final copy bits | "
              "final text BPC | final mass (best / mean head) | seconds |",
              "|---|---|---|---|---|---|"]
    for r in runs:
        f, p = r["final"], r["params"]
        lines.append(f"| {r['name']} | {p['qk']:,} / {p['ov']:,} / {p['total']:,} | "
                     f"{f['copy_bits']:.3f} | {f['text_bpc']:.3f} | {f['mass_best_head']:.3f} / "
                     f"{f['mass_mean']:.3f} | {r.get('seconds', 0):.0f} |")
    atomic_write_text(out / "circuits.md", "\n".join(lines) + "\n")
    atomic_write_text(out / "circuits.json", json.dumps({"levels": levels, "runs": runs},
                                                        indent=1) + "\n")
    _plot(runs, out / "circuits.png")


def _plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
    colours = {0.25: "tab:blue", 1.0: "tab:green", 4.0: "tab:red"}
    for r in runs:
        c = r["config"]
        style = "-" if c["form"] == "collapsed" else "--"
        col = colours.get(c["ratio"], "0.4")
        label = f"{c['form']} {c['ratio']:g}" if c["seed"] == 0 else None
        cu = r["curve"]
        ax[0].plot([x["copy_bits"] for x in cu], [x["mass_best_head"] for x in cu], style,
                   color=col, alpha=0.8, label=label)
        ax[1].plot([x["step"] for x in cu], [x["copy_bits"] for x in cu], style, color=col,
                   alpha=0.8, label=label)
    ax[0].invert_xaxis()
    ax[0].set_xlabel("copy-task loss (bits, held out) - decreasing to the right")
    ax[0].set_ylabel("attention mass on the relevant key (best head)")
    ax[0].set_title("mass at equal loss", fontsize=10)
    ax[1].set_xlabel("step")
    ax[1].set_ylabel("copy-task loss (bits)")
    ax[1].set_title("learning curves (solid collapsed, dashed factorised)", fontsize=10)
    for a in ax:
        a.legend(fontsize=7, title="form, QK:OV", title_fontsize=7)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--forms", nargs="+", default=["collapsed", "factorised"])
    ap.add_argument("--ratios", nargs="+", type=float, default=[0.25, 1.0, 4.0])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--data", default="linuxdoc", help="text corpus spec (qsa.lm.data)")
    ap.add_argument("--steps", type=int, default=StudyConfig.steps)
    ap.add_argument("--dim", type=int, default=StudyConfig.dim)
    ap.add_argument("--heads", type=int, default=StudyConfig.heads)
    ap.add_argument("--prefix", type=int, default=StudyConfig.prefix)
    ap.add_argument("--batch", type=int, default=StudyConfig.batch)
    ap.add_argument("--lr", type=float, default=StudyConfig.lr)
    ap.add_argument("--eval-every", type=int, default=StudyConfig.eval_every)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="runs/lm_circuits")
    ap.add_argument("--render-only", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    if args.render_only:
        render(out, args)
        return
    corpus = load_corpus(args.data)
    for seed in args.seeds:  # seed-major: a stopped job still has every arm at seed 0
        for form in args.forms:
            for ratio in args.ratios:
                cfg = StudyConfig(form=form, ratio=ratio, seed=seed, dim=args.dim,
                                  heads=args.heads, prefix=args.prefix, steps=args.steps,
                                  batch=args.batch, lr=args.lr, eval_every=args.eval_every)
                path = out / "runs" / f"{cfg.name}.json"
                if path.exists():
                    old = json.loads(path.read_text())["config"]
                    if old != dataclasses.asdict(cfg):
                        raise SystemExit(f"{path} was run with another config; use a new --out")
                    continue
                t0 = time.time()
                rec = train_run(cfg, corpus.train, corpus.val)
                rec["seconds"] = time.time() - t0
                rec["data"] = args.data
                rec["corpus_val_sha256"] = corpus.manifest["splits"]["val"]["sha256"]
                atomic_write_text(path, json.dumps(rec, indent=1) + "\n")
                f = rec["final"]
                print(f"{cfg.name}: copy {f['copy_bits']:.3f} bits, text {f['text_bpc']:.3f}, "
                      f"mass {f['mass_best_head']:.3f} ({rec['seconds']:.0f}s)", flush=True)
                render(out, args)


if __name__ == "__main__":
    main()
