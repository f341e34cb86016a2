"""`qsa pack` (write a packed int8/fp32 model file) and `qsa inspect` (verify one)."""

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

    q = sub.add_parser("inspect", help="verify a packed model file and print its metadata")
    q.add_argument("file")
    q.add_argument("--json", action="store_true")
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
