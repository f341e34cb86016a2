"""Ship a trained run's packed model into the package, with a model card and golden metrics.

    .venv/bin/python scripts/ship_weights.py runs/qcgan-35k qcgan-35k [--eval-items 40]
        [--real-data real:data/real] [--real-items 40] [--dest sdk/weights]

Copies RUN/NAME.fp32.qsa -> DEST/NAME.qsa and RUN/NAME.int8.qsa -> DEST/NAME.int8.qsa (DEST:
sdk/weights unless ``--dest``), scores fp32 and int8 against the noisy input on the synthetic
test split (held-out voices and noise seeds) and on the real-voice test split (``qsa data
real``: held-out speakers and noise files; PESQ, STOI, SI-SDR and DNSMOS), and writes the model
card DEST/NAME.md (training data and its licences, recipe, both tables) and the golden metrics
DEST/NAME.golden.json that tests/test_golden.py re-checks: PESQ-WB of the fixed 4-item
synthetic demo subset and of the fixed real test items ``REAL_GOLDEN_INDICES`` (rebuilt from
``(seed, "test", index)`` by ``qsa.data.real.build_item``, no corpus folder needed).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
GOLDEN_ITEMS = 4
TOLERANCE = 0.02
# The real golden items: test-split items of corpus seed 0, one per noise category, both test
# speakers, 3.4-3.9 s each, SNR 0 / 5 / 10 dB, most capture-chain stages (low-pass, 44.1 and
# 48 kHz round trips, high-pass, AGC, reverberation):
#   2 carlo_samples_00002 (5 dB, low-pass 7.7 kHz, high-pass, AGC)
#   8 carlo_babble_00008 (0 dB, 44.1 kHz round trip, high-pass, AGC)
#   27 june_generated_00027 (10 dB, "music", 48 kHz round trip)
#   38 june_field_00038 (0 dB, openttd "Bad Year", reverberant, low-pass 5.5 kHz)
REAL_GOLDEN_SEED = 0
REAL_GOLDEN_INDICES = (2, 8, 27, 38)
REAL_METRICS = (("pesq_wb", "PESQ-WB"), ("pesq_nb", "PESQ-NB"), ("stoi", "STOI"),
                ("si_sdr", "SI-SDR"), ("dnsmos_sig", "DNSMOS SIG"),
                ("dnsmos_bak", "DNSMOS BAK"), ("dnsmos_ovrl", "DNSMOS OVRL"))


def _pesq_list(model, pairs) -> list[float]:
    """PESQ-WB (4 decimals) of ``model``'s offline output for each (clean, noisy) pair."""
    from qsa.metrics.scores import pesq_score

    out = []
    for clean, noisy in pairs:
        with torch.no_grad():
            y = model(torch.from_numpy(noisy)[None])[0].numpy()
        out.append(round(float(pesq_score(clean, y, 16000, "wb")), 4))
    return out


def with_config(src: Path, dst: Path, **changes) -> Path:
    """Copy the packed model ``src`` to ``dst`` with config fields changed (DSP settings such
    as ``gain_exponent``, which no weight depends on); the new config is validated."""
    from qsa import safefile
    from qsa.config import config_from_dict

    tensors, meta = safefile.load(src)
    cfg = dict(meta["config"])
    cfg["fields"] = {**cfg["fields"], **changes}
    config_from_dict(cfg)  # raises ConfigError on a bad value
    meta = {k: v for k, v in meta.items() if k != "payload_sha256"}
    meta["config"] = cfg
    safefile.save(dst, tensors, meta)
    return dst


def golden_pesq(model) -> list[float]:
    """PESQ-WB of ``model`` on the 4-item synthetic demo subset (``make_demo_set``)."""
    from qsa.audio.io import read_audio
    from qsa.data.synth import make_demo_set

    with tempfile.TemporaryDirectory() as d:
        recs = make_demo_set(Path(d) / "g", n=GOLDEN_ITEMS, force=True)
        pairs = [(read_audio(Path(d) / "g" / "clean" / f"{r['name']}.wav")[0],
                  read_audio(Path(d) / "g" / "noisy" / f"{r['name']}.wav")[0]) for r in recs]
        return _pesq_list(model, pairs)


def real_golden_items(seed: int = REAL_GOLDEN_SEED,
                      indices=REAL_GOLDEN_INDICES) -> list[dict]:
    """The real golden items, rebuilt from ``(seed, "test", index)``: dicts with name,
    category, clean and noisy (float32 as a corpus file reads). Needs the Debian packages of
    ``qsa.data.real.missing_packages``."""
    from qsa.data.real import build_item, check_packages

    check_packages()
    items = []
    for i in indices:
        rec, clean, noisy = build_item((int(seed), "test", int(i), 0.0))
        items.append({"index": int(i), "name": rec["name"],
                      "category": rec["noise"]["category"], "snr_db": rec["snr_db"],
                      "clean": clean.astype(np.float32) / np.float32(32768.0),
                      "noisy": noisy.astype(np.float32) / np.float32(32768.0)})
    return items


def golden_real_pesq(model, items: list[dict] | None = None) -> list[float]:
    """PESQ-WB of ``model`` on the real golden items (``real_golden_items()`` by default)."""
    items = real_golden_items() if items is None else items
    return _pesq_list(model, [(it["clean"], it["noisy"]) for it in items])


def golden_record(fp32_model, int8_model) -> dict:
    """The golden JSON: synthetic demo subset and real test items, fp32 and int8."""
    real = real_golden_items()
    return {
        "items": GOLDEN_ITEMS, "pesq_wb_fp32": golden_pesq(fp32_model),
        "pesq_wb_int8": golden_pesq(int8_model), "tolerance": TOLERANCE,
        "real_items": {"seed": REAL_GOLDEN_SEED, "split": "test",
                       "indices": [it["index"] for it in real],
                       "names": [it["name"] for it in real]},
        "real_pesq_wb_fp32": golden_real_pesq(fp32_model, real),
        "real_pesq_wb_int8": golden_real_pesq(int8_model, real),
    }


# --------------------------------------------------------------------------- training data


SYNTH_LICENCES = {
    "espeak-ng": "GPL-3.0-or-later (synthetic speech, generated)",
    "generated noise (qsa.data.noise)": "no third-party recordings (seeded numpy noise)",
}


def _corpus_json(spec: str) -> dict | None:
    kind, _, path = spec.partition(":")
    f = Path(path) / "corpus.json"
    if not f.is_file() and not Path(path).is_absolute():
        f = ROOT / path / "corpus.json"  # a run's relative --data, from the repository root
    if kind in ("synth", "real") and f.is_file():
        try:
            return json.loads(f.read_text())
        except ValueError:
            return None
    return None


def training_data(spec: str) -> tuple[str, dict[str, str], list[str]]:
    """(one-line description, licences {source: licence}, notes) of a run's ``--data``."""
    from qsa.data.readers import _is_mixture

    if _is_mixture(spec):  # "real:DIR+synth:DIR": every corpus, items alternating
        parts = [training_data(p) for p in spec.split("+")]
        licences: dict[str, str] = {}
        for _, lic, _ in parts:
            licences.update(lic)
        return ("items alternating between " + "; and ".join(w for w, _, _ in parts),
                licences, [n for _, _, notes in parts for n in notes])
    kind, _, path = spec.partition(":")
    c = _corpus_json(spec)
    if kind == "synth":
        what = "synthetic corpus" + (
            f" from `qsa data synth --hours {c.get('hours_requested')} --seed {c.get('seed')}`"
            if c else "") + (": espeak-ng voices of the train split, generated noise bank, "
                             "SNR -5..20 dB")
        return what, dict(SYNTH_LICENCES), []
    if kind == "real":
        from qsa.data.real import LICENCES, SPEAKER_SPLITS

        notes = []
        if c and c.get("kind") == "real":
            sp = c.get("splits", {}).get("train", {})
            what = (f"real-voice corpus from `qsa data real --hours {c.get('hours_requested')} "
                    f"--seed {c.get('seed')}` (synth share {c.get('synth_share')}; train split "
                    f"{sp.get('hours')} h, {sp.get('items')} items: speakers "
                    f"{', '.join(c.get('speaker_splits', SPEAKER_SPLITS)['train'])}, "
                    "train-split noise files of openttd-opensfx and sonic-pi-samples, real "
                    "babble, generated noise; capture-chain augmentation)")
            licences = dict(c.get("licences") or LICENCES)
            if c.get("packages"):
                notes.append("Debian packages of the corpus: " + ", ".join(
                    f"{k} {v}" for k, v in sorted(c["packages"].items())) + ".")
            if not c.get("synth_share"):
                licences.pop("espeak-ng", None)
        else:
            what = (f"real-voice corpus (`qsa data real`; {path}/corpus.json was not readable "
                    "when shipping, so the licences are those of this qsa's corpus builder)")
            licences = dict(LICENCES)
        if "generated" in (c or {}).get("noise_categories", ["generated"]):
            licences.update(list(SYNTH_LICENCES.items())[1:])  # the generated noise bank
        notes.append("docs/data.md describes the corpus, its splits and sources.")
        return what, licences, notes
    return (f"`{spec}`", {}, [f"Data set `{spec}`: see its own licence terms (not recorded "
                              "by qsa)."])


def init_chain(init: str, limit: int = 8) -> list[tuple[str, str | None]]:
    """(source, its training data spec or None when unknown) along a run's ``--init`` chain:
    a run folder / checkpoint (its config), a packed file or a shipped model name (its
    card), followed while the files exist. Read from the headers only."""
    from qsa.hub import shipped_weights
    from qsa.safefile import peek_meta
    from qsa.train.checkpoint import checkpoint_file

    out: list[tuple[str, str | None]] = []
    seen: set[str] = set()
    while init and init not in seen and len(out) < limit:
        seen.add(init)
        data, nxt = None, ""
        ckpt = checkpoint_file(init)
        if ckpt is not None:
            cfg = ((peek_meta(ckpt) or {}).get("extra") or {}).get("config") or {}
            data, nxt = cfg.get("data"), cfg.get("init") or ""
        else:
            f = Path(init) if Path(init).is_file() else shipped_weights(init)
            card = ((peek_meta(f) or {}).get("card") or {}) if f else {}
            data = card.get("data")
            nxt = card.get("init") or (card.get("train_config") or {}).get("init") or ""
        out.append((init, data))
        init = nxt
    return out


def data_lines(data_spec: str, chain: list[tuple[str, str | None]]) -> list[str]:
    """Card lines: the --init chain's data and the licences of every data set the weights
    have seen (this run's and, where recorded, the runs they started from)."""
    lines = []
    specs = [data_spec] + [d for _, d in chain if d]
    for src, d in chain:
        lines.append(f"- Started from the weights of `{src}` (`--init`), " + (
            f"trained on `{d}`" if d else "whose training data is not recorded (the file is "
            "gone or names none)"))
    licences: dict[str, str] = {}
    notes: list[str] = []
    for spec in dict.fromkeys(specs):
        _, lic, nts = training_data(spec)
        licences.update(lic)
        notes += [n for n in nts if n not in notes]
    lines += ["", "## Training data licences", ""]
    if licences:
        lines += [f"The weights were trained on {', '.join(f'`{s}`' for s in dict.fromkeys(specs))}"
                  + (" (and earlier data not recorded)" if any(d is None for _, d in chain)
                     else "") + ", made from these sources:", "",
                  "| source | licence |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in licences.items()]
    for n in notes:
        lines += ["", n]
    return lines


# --------------------------------------------------------------------------- evaluation


def _subset(pairs, n: int) -> list:
    """``n`` items spread evenly over the (name-sorted) set; 0 or more than it: all."""
    pairs = list(pairs)
    if n <= 0 or n >= len(pairs):
        return pairs
    idx = np.linspace(0, len(pairs) - 1, n).round().astype(int)
    return [pairs[i] for i in sorted(set(idx.tolist()))]


def _category(name: str) -> str:
    """A real-corpus item's noise category (names are SPEAKER_CATEGORY_INDEX)."""
    parts = name.split("_")
    return parts[1] if len(parts) == 3 else "?"


def _fmt(v) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.3f}"


def real_tables(results: dict[str, dict], n: int, spec: str) -> list[str]:
    """Card lines for the real test split: means per row, then PESQ-WB / STOI per category."""
    from qsa.data.real import SPEAKER_SPLITS

    c = _corpus_json(spec) or {}
    test_speakers = (c.get("speaker_splits") or SPEAKER_SPLITS)["test"]
    lines = [
        "", f"## Real-voice test split ({n} utterances of `{spec}`: held-out speakers "
        f"{', '.join(test_speakers)}, held-out noise files, SNR 0 / 5 / 10 dB)", "",
        "Scored against the noisy input; PESQ, STOI and SI-SDR against the clean recording, "
        "DNSMOS (P.835, 1-5) from the audio alone.", "",
        "| | " + " | ".join(h for _, h in REAL_METRICS) + " |",
        "|---" * (len(REAL_METRICS) + 1) + "|",
    ]
    for k, res in results.items():
        m = res["means"]
        lines.append(f"| {k} | " + " | ".join(_fmt(m.get(x)) for x, _ in REAL_METRICS) + " |")
    first = [_category(it["name"]) for it in next(iter(results.values()))["items"]]
    cats = sorted(set(first))
    lines += ["", "PESQ-WB / STOI per noise category (items):", "",
              "| | " + " | ".join(f"{c} ({first.count(c)})" for c in cats) + " |",
              "|---" * (len(cats) + 1) + "|"]
    for k, res in results.items():
        cells = []
        for c in cats:
            its = [it for it in res["items"] if _category(it["name"]) == c]
            vals = []
            for m in ("pesq_wb", "stoi"):
                xs = [it.get(m) for it in its]
                xs = [x for x in xs if x is not None and math.isfinite(x)]
                vals.append(_fmt(float(np.mean(xs))) if xs else "-")
            cells.append(" / ".join(vals))
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    return lines


def _default_real() -> str:
    d = ROOT / "data" / "real"
    return f"real:{d}" if (d / "corpus.json").is_file() else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="run folder holding NAME.fp32.qsa and NAME.int8.qsa")
    ap.add_argument("name")
    ap.add_argument("--data", default="synth:data/synth",
                    help="synthetic corpus to score on (its test split)")
    ap.add_argument("--eval-items", type=int, default=40,
                    help="synthetic test items to score (0: all)")
    ap.add_argument("--real-data", default=_default_real(),
                    help="real-voice corpus (real:DIR) to score on, its test split (default: "
                         "real:data/real when it exists; '' skips it)")
    ap.add_argument("--real-items", type=int, default=40,
                    help="real test items to score (0: all)")
    ap.add_argument("--dest", default=str(ROOT / "sdk" / "weights"),
                    help="where the weights, card and golden file go (default: sdk/weights)")
    ap.add_argument("--workers", type=int, default=2, help="metric worker processes")
    ap.add_argument("--note", default="", help="a paragraph for the model card")
    ap.add_argument("--gain-exponent", type=float, default=None,
                    help="ship with this post-filter exponent in the config (QCGANConfig."
                         "gain_exponent, chosen on the validation split; default: the run's)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from qsa.commands.eval import evaluate
    from qsa.data.readers import parse_data_spec
    from qsa.errors import QsaError
    from qsa.quantize import load_packed, read_packed

    run = Path(args.run)
    dst = Path(args.dest)
    dst.mkdir(parents=True, exist_ok=True)
    fp32, int8 = run / f"{args.name}.fp32.qsa", run / f"{args.name}.int8.qsa"
    tmp = None
    if args.gain_exponent is not None:  # the same weights, the DSP setting in the config
        tmp = Path(tempfile.mkdtemp(prefix="ship_"))
        fp32, int8 = (with_config(p, tmp / p.name, gain_exponent=args.gain_exponent)
                      for p in (fp32, int8))  # fmt: skip
    _, meta = read_packed(fp32)
    read_packed(int8)
    models = {"fp32": load_packed(fp32), "int8": load_packed(int8)}
    subset = _subset(parse_data_spec(args.data, split="test"), args.eval_items)
    results = {"noisy": evaluate(None, subset, workers=args.workers)["means"]}
    for prec, model in models.items():
        results[prec] = evaluate(model, subset, workers=args.workers)["means"]
    real_results: dict[str, dict] = {}
    real_subset: list = []
    if args.real_data:
        if not args.real_data.startswith("real:"):
            raise QsaError(f"--real-data {args.real_data!r}: expected real:DIR (a `qsa data "
                           "real` corpus)")
        real_subset = _subset(parse_data_spec(args.real_data, split="test"), args.real_items)
        real_results["noisy"] = evaluate(None, real_subset, workers=args.workers, dnsmos=True)
        for prec, model in models.items():
            real_results[prec] = evaluate(model, real_subset, workers=args.workers,
                                          dnsmos=True)
    golden = golden_record(models["fp32"], models["int8"])
    card = meta["card"]
    chain = init_chain(card.get("init") or "")  # before a shipped --init name is replaced
    shutil.copyfile(fp32, dst / f"{args.name}.qsa")
    shutil.copyfile(int8, dst / f"{args.name}.int8.qsa")
    (dst / f"{args.name}.golden.json").write_text(json.dumps(golden, indent=1) + "\n")
    tc = card.get("train_config") or {}
    data_spec = str(card.get("data", ""))
    corpus = training_data(data_spec)[0]
    recipe = " ".join(
        [f"qsa train {args.name} --data {card.get('data')}"]
        + [f"--{flag} {tc[key]}" for flag, key in (
            ("epochs", "epochs"), ("max-steps", "max_steps"), ("batch-size", "batch_size"),
            ("segment", "segment_seconds"),
            ("lr", "lr_g"), ("lr-d", "lr_d"), ("metric-start", "metric_start"),
            ("d-warmup", "d_warmup"), ("stoi-weight", "stoi_weight"),
            ("sisdr-weight", "sisdr_weight"), ("pesq-weight", "pesq_weight"),
            ("balance-weight", "balance_weight"), ("max-balance-db", "max_balance_db"),
            ("band-limit", "band_limit"), ("threads", "threads"), ("seed", "seed"),
            ("init", "init")) if tc.get(key)]
        + ([f"--select {tc['select']}"] if tc.get("select", "pesq") != "pesq" else []))
    lines = [
        f"# {args.name}: model card", "",
        f"- Architecture: QC-GAN generator, preset `{args.name}`; files `{args.name}.qsa` (fp32) "
        f"and `{args.name}.int8.qsa` (packed int8)",
        f"- Training data: `{data_spec}`: {corpus}",
        f"- Steps: {card.get('steps')} ({card.get('epochs')} full epochs, "
        f"batch {card.get('batch_size')} x {card.get('segment_seconds')} s crops), "
        f"seed {card.get('seed')}, CPU only",
        f"- Recipe: `{recipe}`",
    ]
    dl = data_lines(data_spec, chain)
    cut = dl.index("")
    lines += dl[:cut]
    if args.note:
        lines += ["", args.note]
    lines += dl[cut:]
    lines += [
        "", f"## Synthetic test split ({len(subset)} utterances, held-out voices and noise seeds)",
        "", "| | PESQ-WB | PESQ-NB | STOI | SI-SDR | CSIG | CBAK | COVL |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for k, m in results.items():
        lines.append(f"| {k} | " + " | ".join(
            f"{m.get(x, float('nan')):.3f}" for x in
            ("pesq_wb", "pesq_nb", "stoi", "si_sdr", "csig", "cbak", "covl")) + " |")
    if real_results:
        lines += real_tables(real_results, len(real_subset), args.real_data)
    else:
        lines += ["", "Not scored on the real-voice test split (no `--real-data` corpus; build "
                  "one with `qsa data real data/real --hours 5`)."]
    if card.get("val_pesq_wb") is not None:
        def r3(v):
            return round(v, 3) if isinstance(v, float) else v

        val = (f"Validation PESQ-WB during training: {r3(card.get('val_pesq_wb'))} "
               f"(noisy {r3(card.get('val_pesq_wb_noisy'))})")
        if card.get("val_stoi") is not None:
            val += f", STOI {r3(card['val_stoi'])} (noisy {r3(card.get('val_stoi_noisy'))})"
        lines += ["", val + "."]
    lines += [""]
    (dst / f"{args.name}.md").write_text("\n".join(lines))
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n".join(lines))
    print(json.dumps(golden))


if __name__ == "__main__":
    main()
