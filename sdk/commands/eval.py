"""`qsa eval MODEL --data SPEC`: PESQ-WB/NB, STOI, SI-SDR, CSIG/CBAK/COVL of a model."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("eval", help="score a model (or the noisy input) on a paired data set")
    p.add_argument("model", help="qcgan-35k | qcgan-0.89m | a packed model file | a qsa train run "
                   "folder or checkpoint | noisy")
    p.add_argument("--data", required=True, help="synth:DIR | voicebank:DIR | dns:DIR")
    p.add_argument("--split", default="test")
    p.add_argument("--limit", type=int, default=0, help="score only the first N items")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", default=None, help="write the JSON results here")
    p.add_argument("--force", action="store_true")
    p.add_argument("--threads", type=int, default=0)
    p.set_defaults(func=run)


def evaluate(model, pairs, workers: int = 2, progress: bool = True) -> dict:
    """Enhance each pair with ``model`` (None: score the noisy input) and score it."""
    import numpy as np
    import torch
    from tqdm import tqdm

    from qsa.errors import QsaError
    from qsa.metrics.batch import batch_metrics

    items = []
    for p in tqdm(list(pairs), desc="enhance", disable=not progress):
        noisy, clean = p.load()
        if clean is None:
            raise QsaError(f"{p.name}: no clean reference; eval needs a paired set")
        if model is None:
            y = noisy
        else:
            with torch.no_grad():
                y = model(torch.from_numpy(noisy)[None])[0].numpy()
        items.append((p.name, clean, y.astype(np.float32)))
    return batch_metrics(items, workers=workers, progress=progress).to_dict()


def run(args) -> int:
    import json
    from pathlib import Path

    import torch

    from qsa.data.readers import parse_data_spec
    from qsa.errors import QsaError
    from qsa.fileio import atomic_write_text
    from qsa.hub import load

    if args.out and Path(args.out).exists() and not args.force:
        raise QsaError(f"{args.out} already exists; pass --force to overwrite it")
    if args.threads:
        torch.set_num_threads(args.threads)
    pairs = parse_data_spec(args.data, split=args.split)
    if args.limit:
        pairs = list(pairs)[: args.limit]
    model = None if args.model == "noisy" else load(args.model, allow_untrained=False)
    res = evaluate(model, pairs, args.workers)
    summary = {"model": args.model, "data": args.data, "split": args.split, **res}
    for k, v in res["means"].items():
        print(f"{k:>10}: {v:.3f}  (n={res['counts'][k]})")
    if args.out:
        atomic_write_text(args.out, json.dumps(summary, indent=1, default=float))
    return 0
