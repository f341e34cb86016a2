"""`qsa pack` (write a packed int8/fp32 model file) and `qsa inspect` (verify a packed model
file, or show a `qsa train` checkpoint's run config, progress and history)."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("pack", help="write a model as a packed int8 (or fp32) model file")
    p.add_argument("model", help="a model name (see `qsa info`) or a packed model file")
    p.add_argument("output", help="output file (.qsa)")
    p.add_argument("--precision", choices=["int8", "fp32"], default="int8")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")
    p.add_argument("--untrained", action="store_true",
                   help="allow a model without shipped weights: packs fresh, untrained weights "
                   "(for training or testing, not for enhancing)")
    p.set_defaults(func=run_pack)

    q = sub.add_parser("inspect", help="verify a packed model file or a training checkpoint "
                       "and print its metadata")
    q.add_argument("file", help="a packed model file (.qsa), or a `qsa train` checkpoint "
                   "(RUN/checkpoint.safetensors, or the RUN folder): its TrainConfig, state "
                   "and validation history")
    q.add_argument("--json", action="store_true", help="print the metadata as JSON")
    q.set_defaults(func=run_inspect)


def run_pack(args) -> int:
    import sys
    import warnings
    from pathlib import Path

    from qsa.errors import ConfigError, QsaError
    from qsa.hub import load
    from qsa.quantize import save_packed

    out = Path(args.output)
    if out.is_dir():  # a folder: the file goes inside it, named after the model
        out = out / f"{Path(args.model).stem if Path(args.model).suffix else args.model}.qsa"
    if out.exists() and not args.force:
        raise QsaError(f"{out} already exists; pass --force to overwrite it")
    if out.is_dir():
        raise QsaError(f"{out} is a folder; give a file name for the output (e.g. model.qsa)")
    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            model = load(args.model, allow_untrained=args.untrained)
    except ConfigError as e:
        if "no shipped weights" not in str(e):
            raise
        raise ConfigError(f"{e}; or pass --untrained to pack it with fresh, untrained "
                          "weights") from None
    if any("untrained" in str(w.message) for w in said):
        print(f"note: {args.model}: packing fresh, untrained weights (--untrained)",
              file=sys.stderr)
    save_packed(model, out, precision=args.precision, force=True)
    print(f"wrote {out} ({out.stat().st_size:,d} bytes, {args.precision})")
    return 0


def run_inspect(args) -> int:
    import json

    from qsa.train.checkpoint import checkpoint_file

    ckpt = checkpoint_file(args.file)  # from the header's format alone
    if ckpt is not None:
        summary = checkpoint_summary(ckpt)
        if args.json:
            print(json.dumps(summary, indent=2))
        else:
            print_checkpoint(summary)
        return 0
    import torch

    from qsa.hub import check_packed
    from qsa.quantize import read_packed

    check_packed(args.file)
    tensors, meta = read_packed(args.file)
    n_int8 = sum(t.numel() for t in tensors.values() if t.dtype == torch.int8)
    summary = {
        "file": args.file,
        "format_version": meta["format_version"],
        "qsa_version": meta.get("qsa_version"),
        "model": meta["config"]["kind"],
        "precision": meta["precision"],
        "params": meta.get("params"),
        "int8_weights": n_int8,
        "quantized_layers": len(meta.get("quantized", {})),
        "payload_sha256": meta["payload_sha256"],
        "card": meta.get("card", {}),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for k, v in summary.items():
            print(f"{k:>18}: {v}")
        print("verified: header, metadata hash and payload sha256 all match")
    return 0


def checkpoint_summary(path) -> dict:
    """What a `qsa train` checkpoint holds: the run's TrainConfig, its state (epoch, steps,
    best validation epoch), the validation history and each module's size, after the same
    verification `--resume` does (``qsa.safefile.load``: header, metadata hash, payload
    sha256), so a corrupted file is an error here too."""
    from qsa import safefile
    from qsa.train.checkpoint import FORMAT

    tensors, meta = safefile.load(path, kind=FORMAT)
    extra = meta.get("extra") or {}
    modules = {}
    for name in meta.get("modules", []):
        own = [t for k, t in tensors.items() if k.startswith(f"module.{name}.")]
        modules[name] = {"tensors": len(own), "values": sum(int(t.numel()) for t in own)}
    summary = {
        "file": str(path),
        "format": meta.get("format"),
        "format_version": meta.get("format_version"),
        "model": (extra.get("config") or {}).get("model"),
        "modules": modules,
        "optimizers": meta.get("optimizers", []),
        "state": extra.get("state"),
        "config": extra.get("config"),
        "history": extra.get("history", []),
        "payload_sha256": meta.get("payload_sha256"),
    }
    if "averaged_from" in extra:
        summary["averaged_from"] = extra["averaged_from"]
    return summary


def _cell(v) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 100 else f"{v:.1f}"
    if isinstance(v, list) and v and all(isinstance(x, int | float) for x in v):
        return f"{min(v):+.1f}..{max(v):+.1f}"  # e.g. the per-band balance in dB
    return str(v)


def print_checkpoint(s: dict) -> None:
    """The checkpoint summary as text: the facts, the run config, one history line an epoch."""
    print(f"{'file':>12}: {s['file']}")
    print(f"{'format':>12}: {s['format']} v{s['format_version']} (a `qsa train` checkpoint: "
          "continue with `qsa train ... --resume`, or use the run as --model / --init)")
    print(f"{'model':>12}: {s['model']}")
    mods = ", ".join(f"{k} ({v['values']:,d} values in {v['tensors']} tensors)"
                     for k, v in s["modules"].items())
    print(f"{'modules':>12}: {mods}")
    print(f"{'optimizers':>12}: {', '.join(s['optimizers']) or 'none (weights only)'}")
    st = s["state"] or {}
    if st:
        print(f"{'state':>12}: epoch {st.get('epoch')}, step {st.get('step_in_epoch')} of the "
              f"epoch, global step {st.get('global_step')}")
        best = st.get("best_val")
        if best:
            scores = ", ".join(f"{k} {_cell(best[k])}" for k in ("val_pesq", "val_stoi", "score")
                               if best.get(k) is not None)
            print(f"{'best_val':>12}: epoch {best.get('epoch')} (global step "
                  f"{best.get('global_step')}): {scores} (select {best.get('select', 'pesq')})")
        else:
            print(f"{'best_val':>12}: none yet (no validated epoch)")
    if "averaged_from" in s:
        print(f"{'averaged':>12}: {', '.join(s['averaged_from'])}")
    if s["config"]:
        print("config (TrainConfig):")
        for k, v in s["config"].items():
            print(f"  {k:>16}: {v}")
    hist = s["history"]
    print(f"history ({len(hist)} validated epoch{'s' if len(hist) != 1 else ''}):")
    cols = list(dict.fromkeys(k for rec in hist for k in rec))
    if cols:
        rows = [[_cell(rec.get(c, "-")) for c in cols] for rec in hist]
        width = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
        print("  " + "  ".join(c.rjust(w) for c, w in zip(cols, width, strict=True)))
        for r in rows:
            print("  " + "  ".join(v.rjust(w) for v, w in zip(r, width, strict=True)))
    print(f"verified: header, metadata hash and payload sha256 all match (tensors not loaded; "
          f"payload {s['payload_sha256'][:16]}...)")
