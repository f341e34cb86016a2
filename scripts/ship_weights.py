"""Ship a trained run's packed model into the package, with a model card and golden metrics.

    .venv/bin/python scripts/ship_weights.py runs/qcgan-35k qcgan-35k [--eval-items 40]

Copies RUN/NAME.fp32.qsa -> sdk/weights/NAME.qsa and RUN/NAME.int8.qsa ->
sdk/weights/NAME.int8.qsa, scores fp32 and int8 against the noisy input on the synthetic test
split (held-out voices and noise seeds), writes the model card sdk/weights/NAME.md and the
golden metrics sdk/weights/NAME.golden.json (PESQ on the fixed 4-item demo subset that
tests/test_golden.py re-checks).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

GOLDEN_ITEMS = 4


def golden_pesq(model) -> list[float]:
    from qsa.audio.io import read_audio
    from qsa.data.synth import make_demo_set
    from qsa.metrics.scores import pesq_score

    with tempfile.TemporaryDirectory() as d:
        recs = make_demo_set(Path(d) / "g", n=GOLDEN_ITEMS, force=True)
        out = []
        for r in recs:
            x = read_audio(Path(d) / "g" / "noisy" / f"{r['name']}.wav")[0]
            c = read_audio(Path(d) / "g" / "clean" / f"{r['name']}.wav")[0]
            with torch.no_grad():
                y = model(torch.from_numpy(x)[None])[0].numpy()
            out.append(round(float(pesq_score(c, y, 16000, "wb")), 4))
        return out


def _corpus_summary(spec: str) -> str:
    """'synthetic corpus, 3.0 h, seed 0' from a synth:DIR corpus.json, else the spec."""
    kind, _, path = spec.partition(":")
    f = Path(path) / "corpus.json"
    if kind != "synth" or not f.is_file():
        return spec
    c = json.loads(f.read_text())
    return (f"synthetic corpus from `qsa data synth --hours {c.get('hours_requested')} "
            f"--seed {c.get('seed')}`")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("name")
    ap.add_argument("--data", default="synth:data/synth")
    ap.add_argument("--eval-items", type=int, default=40)
    ap.add_argument("--note", default="", help="a paragraph for the model card")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from qsa.commands.eval import evaluate
    from qsa.data.readers import parse_data_spec
    from qsa.quantize import load_packed, read_packed

    run = Path(args.run)
    dst = Path(__file__).resolve().parents[1] / "sdk" / "weights"
    fp32, int8 = run / f"{args.name}.fp32.qsa", run / f"{args.name}.int8.qsa"
    _, meta = read_packed(fp32)
    pairs = list(parse_data_spec(args.data, split="test"))
    idx = np.linspace(0, len(pairs) - 1, min(args.eval_items, len(pairs))).round().astype(int)
    subset = [pairs[i] for i in sorted(set(idx.tolist()))]
    results = {"noisy": evaluate(None, subset, workers=2)["means"]}
    for prec, f in (("fp32", fp32), ("int8", int8)):
        results[prec] = evaluate(load_packed(f), subset, workers=2)["means"]
    shutil.copyfile(fp32, dst / f"{args.name}.qsa")
    shutil.copyfile(int8, dst / f"{args.name}.int8.qsa")
    golden = {"items": GOLDEN_ITEMS, "pesq_wb_fp32": golden_pesq(load_packed(fp32)),
              "pesq_wb_int8": golden_pesq(load_packed(int8)), "tolerance": 0.02}
    (dst / f"{args.name}.golden.json").write_text(json.dumps(golden, indent=1) + "\n")
    card = meta["card"]
    tc = card.get("train_config") or {}
    corpus = _corpus_summary(card.get("data", ""))
    recipe = " ".join(
        [f"qsa train {args.name} --data {card.get('data')}"]
        + [f"--{flag} {tc[key]}" for flag, key in (
            ("epochs", "epochs"), ("max-steps", "max_steps"), ("batch-size", "batch_size"),
            ("segment", "segment_seconds"),
            ("lr", "lr_g"), ("lr-d", "lr_d"), ("metric-start", "metric_start"),
            ("d-warmup", "d_warmup"), ("stoi-weight", "stoi_weight"),
            ("sisdr-weight", "sisdr_weight"), ("pesq-weight", "pesq_weight"),
            ("threads", "threads"), ("seed", "seed"),
            ("init", "init")) if tc.get(key)]
        + ([f"--select {tc['select']}"] if tc.get("select", "pesq") != "pesq" else []))
    lines = [
        f"# {args.name}: model card", "",
        f"- Architecture: QC-GAN generator, preset `{args.name}`; files `{args.name}.qsa` (fp32) "
        f"and `{args.name}.int8.qsa` (packed int8)",
        f"- Training data: `{card.get('data')}` ({corpus}: espeak-ng voices of the train split, "
        "generated noise bank, SNR -5..20 dB)",
        f"- Steps: {card.get('steps')} ({card.get('epochs')} full epochs, "
        f"batch {card.get('batch_size')} x {card.get('segment_seconds')} s crops), "
        f"seed {card.get('seed')}, CPU only",
        f"- Recipe: `{recipe}`",
    ]
    if card.get("init"):
        lines.append(f"- Started from the weights of `{card['init']}` (`--init`)")
    if args.note:
        lines += ["", args.note]
    lines += [
        "", f"## Synthetic test split ({len(subset)} utterances, held-out voices and noise seeds)",
        "", "| | PESQ-WB | PESQ-NB | STOI | SI-SDR | CSIG | CBAK | COVL |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for k, m in results.items():
        lines.append(f"| {k} | " + " | ".join(
            f"{m.get(x, float('nan')):.3f}" for x in
            ("pesq_wb", "pesq_nb", "stoi", "si_sdr", "csig", "cbak", "covl")) + " |")
    val = (f"Validation PESQ-WB during training: {card.get('val_pesq_wb')} "
           f"(noisy {card.get('val_pesq_wb_noisy')})")
    if card.get("val_stoi") is not None:
        val += f", STOI {card['val_stoi']} (noisy {card.get('val_stoi_noisy')})"
    lines += ["", val + ".", ""]
    (dst / f"{args.name}.md").write_text("\n".join(lines))
    print("\n".join(lines))
    print(json.dumps(golden))


if __name__ == "__main__":
    main()
