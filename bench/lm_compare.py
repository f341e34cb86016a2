"""The 1M-parameter comparison of docs/lm_results.md ("Protocol (written before the runs)"):
an LR sweep per arm, then each arm at its best LR over 3 seeds and 16M tokens, per corpus,
with checkpoints so every run resumes across sessions -> OUT/compare.md and OUT/compare.json.

    # stage 1, LR sweep (seed 0, 4M tokens, lr in {1.5, 3, 6}e-3), code corpus first
    nice -n 15 .venv/bin/python bench/lm_compare.py sweep --data code --out runs/lm_compare
    # stage 2, each arm at its best sweep LR, seeds 0 1 2, 16M tokens, curves every ~1M tokens
    nice -n 15 .venv/bin/python bench/lm_compare.py final --data code --out runs/lm_compare
    # the same for the English corpus (Debian linux-doc-6.1), then the table only
    nice -n 15 .venv/bin/python bench/lm_compare.py sweep --data linuxdoc --out runs/lm_compare
    nice -n 15 .venv/bin/python bench/lm_compare.py final --data linuxdoc --out runs/lm_compare
    .venv/bin/python bench/lm_compare.py render --out runs/lm_compare

Arms: transformer (lm-transformer-1m), kuramoto (the paper form, lm-kuramoto-1m) and, if time
allows (``--arms``), kuramoto-lagged (lm-kuramoto-1m-lagged, the earlier form). Runs go one at a
time on --threads threads (default 1) in the order arm-major within a seed, seed-major across
seeds, so a stopped job leaves complete seeds. Each run lives in
OUT/<data>/<stage>/<arm>-lr<lr>-s<seed>/ (checkpoint/ written at every evaluation, result.json
when it ends); a run with a checkpoint but no result resumes from it (bit-identical to an
uninterrupted run, see tests/test_lm_train.py), a run with a result is skipped. ``--max-hours``
stops cleanly after the run in progress reaches its next checkpoint past that time.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

from qsa.fileio import atomic_write_text
from qsa.lm.data import load_corpus
from qsa.lm.train import VAL_BYTES, TrainConfig, train
from qsa.models.lm import KURAMOTO_LAGGED

ARMS = {
    "transformer": ("transformer", ()),
    "kuramoto": ("kuramoto", ()),
    "kuramoto-lagged": ("kuramoto", tuple(KURAMOTO_LAGGED.items())),
}
SWEEP_LRS = (1.5e-3, 3e-3, 6e-3)
SWEEP_TOKENS = 4_000_000
FINAL_TOKENS = 16_000_000
SEEDS = (0, 1, 2)
BATCH, CTX, WARMUP = 16, 256, 100
EVAL_EVERY = 244  # steps: 244 x 16 x 256 = 999,424 tokens between validation points
T95_2DOF = 4.303  # two-sided 95% t quantile, 2 degrees of freedom (3 paired seeds)


def run_config(arm: str, data: str, lr: float, seed: int, tokens: int) -> TrainConfig:
    mixer, overrides = ARMS[arm]
    return TrainConfig(mixer=mixer, size="1m", data=data, tokens=tokens, seed=seed,
                       batch=BATCH, ctx=CTX, lr=lr, warmup=WARMUP, eval_every=EVAL_EVERY,
                       eval_bytes=VAL_BYTES, model_overrides=overrides)


def run_dir(out: Path, data: str, stage: str, arm: str, lr: float, seed: int) -> Path:
    return out / data.replace(":", "_").replace("/", "_") / stage / f"{arm}-lr{lr:g}-s{seed}"


def run_one(cfg: TrainConfig, folder: Path, corpus, deadline: float | None) -> dict | None:
    """Train (or resume) one run; None when stopped by the deadline before its end."""
    done = _finished(folder)
    if done is not None:
        return done
    resume = (folder / "checkpoint" / "trainer.json").exists()
    while True:
        max_steps = None
        if deadline is not None:
            if time.time() > deadline:
                return None
            # train up to the next checkpoint, then look at the clock again
            state = folder / "checkpoint" / "trainer.json"
            step = json.loads(state.read_text())["step"] if state.exists() else 0
            max_steps = min(cfg.steps, step + cfg.eval_every)
        t0 = time.time()
        res = train(cfg, out=folder, resume=resume, progress=False, corpus=corpus,
                    max_steps=max_steps)
        res.pop("model")
        resume = True
        print(f"  {folder.name}: step {res['steps']}/{cfg.steps} val {res['val_bpc']:.4f} "
              f"({time.time() - t0:.0f}s)", flush=True)
        if res["steps"] == cfg.steps:
            return res


def _finished(folder: Path) -> dict | None:
    """The run's result if it reached its budget (train() also writes result.json after a
    partial --max-hours chunk; those have no test BPC)."""
    p = folder / "result.json"
    if p.exists():
        r = json.loads(p.read_text())
        if r.get("test_bpc") is not None:
            return r
    return None


def best_lr(out: Path, data: str, arm: str, lrs=SWEEP_LRS) -> float | None:
    """The sweep LR with the lowest final val BPC (ties within 0.005: the smaller LR); None
    until every LR of the grid has finished."""
    rows = []
    for lr in lrs:
        r = _finished(run_dir(out, data, "sweep", arm, lr, 0))
        if r is not None:
            rows.append((r["val_bpc"], lr))
    if len(rows) < len(lrs):
        return None
    best = min(v for v, _ in rows)
    return min(lr for v, lr in rows if v <= best + 0.005)


def _results(out: Path, data: str, stage: str) -> list[dict]:
    base = run_dir(out, data, stage, "x", 0, 0).parent
    res = []
    for p in sorted(base.glob("*/result.json")) if base.exists() else []:
        r = _finished(p.parent)
        if r is None:
            continue
        r["run"] = p.parent.name
        r["arm"] = p.parent.name.split("-lr")[0]
        r["lr"] = TrainConfig.from_json(json.loads(
            (p.parent / "checkpoint" / "trainer.json").read_text())["train_config"]).lr
        res.append(r)
    return res


def _ms(v: list[float]) -> str:
    if not v:
        return "-"
    return f"{v[0]:.4f} (1 seed)" if len(v) == 1 else \
        f"{statistics.mean(v):.4f} +- {statistics.stdev(v):.4f} ({len(v)} seeds)"


def verdict(diffs: list[float], bar: float = 0.03) -> str:
    """The protocol's decision on the paired per-seed gaps (Kuramoto - transformer)."""
    if len(diffs) < 3:
        return f"incomplete ({len(diffs)} of 3 seeds)"
    m, s = statistics.mean(diffs), statistics.stdev(diffs)
    half = T95_2DOF * s / math.sqrt(len(diffs))
    if m <= bar:
        return f"within the {bar} bar (mean gap {m:+.4f}, 95% CI +-{half:.4f})"
    if m - half > bar:
        return f"behind: the whole 95% CI [{m - half:+.4f}, {m + half:+.4f}] is above +{bar}"
    return f"inconclusive: mean gap {m:+.4f} > +{bar} but the 95% CI reaches {m - half:+.4f}"


def render(out: Path) -> None:
    lines = ["# 1M comparison (protocol: docs/lm_results.md, written before the runs)", "",
             "Command: `python " + " ".join(sys.argv) + "`", ""]
    summary: dict = {}
    for data_dir in sorted(p for p in out.iterdir() if p.is_dir()):
        data = data_dir.name
        sweep, final = _results(out, data, "sweep"), _results(out, data, "final")
        if not sweep and not final:
            continue
        lines += [f"## Corpus `{data}`", ""]
        any_run = (sweep or final)[0]
        lines += [f"Validation: {any_run['val_slice']}; test: {any_run.get('test_slice', '-')}",
                  ""]
        if sweep:
            lines += ["### LR sweep (seed 0, 4M tokens)", "",
                      "| arm | lr | val BPC | val BPC, whole split | test BPC |",
                      "|---|---|---|---|---|"]
            for r in sorted(sweep, key=lambda r: (r["arm"], r["lr"])):
                lines.append(f"| {r['arm']} | {r['lr']:g} | {r['val_bpc']:.4f} | "
                             f"{r.get('val_bpc_whole_split', float('nan')):.4f} | "
                             f"{r.get('test_bpc', float('nan')):.4f} |")
            lines.append("")
        if final:
            lines += ["### Best LR, 16M tokens", "",
                      "| arm | lr | params | test BPC (whole split) | val BPC (slice) |",
                      "|---|---|---|---|---|"]
            arms = sorted({r["arm"] for r in final})
            for arm in arms:
                rs = [r for r in final if r["arm"] == arm]
                lines.append(f"| {arm} | {rs[0]['lr']:g} | {rs[0]['params']:,} | "
                             f"{_ms([r['test_bpc'] for r in rs])} | "
                             f"{_ms([r['val_bpc'] for r in rs])} |")
            by = {(r["arm"], r["seed"]): r for r in final}
            for arm in [a for a in arms if a != "transformer"]:
                diffs = [by[(arm, s)]["test_bpc"] - by[("transformer", s)]["test_bpc"]
                         for s in SEEDS if (arm, s) in by and ("transformer", s) in by]
                summary[(data, arm)] = diffs
                lines += ["", f"Decision, {arm} - transformer (paired by seed, test BPC): "
                          f"{verdict(diffs)}; per seed "
                          + ", ".join(f"{d:+.4f}" for d in diffs)]
            lines += ["", "Gap on the validation slice along training (mean over the seeds both "
                      "arms have; tokens in millions):", "",
                      "| tokens (M) | " + " | ".join(f"{a} - transformer" for a in arms
                                                     if a != "transformer") + " |",
                      "|---|" + "---|" * (len(arms) - 1)]
            curves: dict = {}
            for r in final:
                for h in r["history"]:
                    curves.setdefault((r["arm"], r["seed"]), {})[h["tokens"]] = h["val_bpc"]
            tok = sorted({t for c in curves.values() for t in c})
            for t in tok:
                cells = []
                for arm in [a for a in arms if a != "transformer"]:
                    d = [curves[(arm, s)][t] - curves[("transformer", s)][t] for s in SEEDS
                         if t in curves.get((arm, s), {}) and t in curves.get(("transformer",
                                                                              s), {})]
                    cells.append(f"{statistics.mean(d):+.4f}" if d else "-")
                lines.append(f"| {t / 1e6:.1f} | " + " | ".join(cells) + " |")
            lines.append("")
    atomic_write_text(out / "compare.md", "\n".join(lines) + "\n")
    atomic_write_text(out / "compare.json", json.dumps(
        {f"{d}/{a}": v for (d, a), v in summary.items()}, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stage", choices=("sweep", "final", "render"))
    ap.add_argument("--data", default="code", help="corpus spec: code | linuxdoc | ...")
    ap.add_argument("--arms", nargs="+", default=["transformer", "kuramoto"],
                    choices=sorted(ARMS))
    ap.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    ap.add_argument("--tokens", type=int, default=0,
                    help="override the stage's token budget (smoke runs only)")
    ap.add_argument("--lrs", nargs="+", type=float, default=list(SWEEP_LRS),
                    help="sweep LRs (the protocol's grid by default)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-hours", type=float, default=0.0,
                    help="stop at the first checkpoint after this many hours (0: no limit)")
    ap.add_argument("--out", default="runs/lm_compare")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.stage == "render":
        render(out)
        return
    torch.set_num_threads(args.threads)
    deadline = time.time() + 3600 * args.max_hours if args.max_hours else None
    corpus = load_corpus(args.data)
    jobs = []
    if args.stage == "sweep":
        for lr in args.lrs:
            for arm in args.arms:
                jobs.append((arm, lr, 0, args.tokens or SWEEP_TOKENS))
    else:
        lrs = {}
        for arm in args.arms:
            lrs[arm] = best_lr(out, args.data, arm, args.lrs)
            if lrs[arm] is None:
                raise SystemExit(f"the LR sweep of {arm} on {args.data} is not finished; run "
                                 f"`bench/lm_compare.py sweep --data {args.data}` first")
        for seed in args.seeds:
            for arm in args.arms:
                jobs.append((arm, lrs[arm], seed, args.tokens or FINAL_TOKENS))
    for arm, lr, seed, tokens in jobs:
        cfg = run_config(arm, args.data, lr, seed, tokens)
        folder = run_dir(out, args.data, args.stage, arm, lr, seed)
        print(f"{args.stage} {folder.name} ({tokens:,} tokens)", flush=True)
        if run_one(cfg, folder, corpus, deadline) is None:
            print("stopped at the --max-hours deadline; rerun the same command to go on")
            break
        render(out)
    render(out)


if __name__ == "__main__":
    main()
