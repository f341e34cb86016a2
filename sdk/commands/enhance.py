"""`qsa enhance IN OUT`: enhance a file or a folder with a shipped model or a model file."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("enhance", help="enhance speech in a file or folder")
    p.add_argument("input", help="audio file (wav/flac/ogg) or folder")
    p.add_argument("output", help="output file, or folder for a folder input")
    p.add_argument("--model", default="qcgan-35k",
                   help="qcgan-35k | qcgan-0.89m | a packed model file | a qsa train run "
                   "folder or checkpoint (default qcgan-35k)")
    p.add_argument("--force", action="store_true", help="overwrite existing outputs")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    p.set_defaults(func=run)


def run(args) -> int:
    import sys
    from pathlib import Path

    import torch

    from qsa.enhancement import enhance_path
    from qsa.hub import load

    if args.threads:
        torch.set_num_threads(args.threads)
    model = load(args.model, allow_untrained=False)
    results = enhance_path(model, Path(args.input), Path(args.output), force=args.force,
                           notice=lambda m: print(f"note: {m}", file=sys.stderr))
    for r in results:
        print(f"{r['input']} -> {r['output']} ({r['seconds']:.1f} s)")
    return 0
