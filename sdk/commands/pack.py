"""`qsa pack` (write a packed int8/fp32 model file) and `qsa inspect` (verify one)."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("pack", help="write a model as a packed int8 (or fp32) model file")
    p.add_argument("model", help="a model name (see `qsa info`) or a packed model file")
    p.add_argument("output", help="output file (.qsa)")
    p.add_argument("--precision", choices=["int8", "fp32"], default="int8")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")
    p.set_defaults(func=run_pack)

    q = sub.add_parser("inspect", help="verify a packed model file and print its metadata")
    q.add_argument("file")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=run_inspect)


def run_pack(args) -> int:
    from pathlib import Path

    from qsa.errors import QsaError
    from qsa.hub import load
    from qsa.quantize import save_packed

    out = Path(args.output)
    if out.exists() and not args.force:
        raise QsaError(f"{out} already exists; pass --force to overwrite it")
    model = load(args.model)
    save_packed(model, out, precision=args.precision, force=True)
    print(f"wrote {out} ({out.stat().st_size:,d} bytes, {args.precision})")
    return 0


def run_inspect(args) -> int:
    import json

    import torch

    from qsa.quantize import read_packed

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
