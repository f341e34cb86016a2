"""`qsa lm train|eval|sweep|export|profile`: the byte-level LM variants end to end."""

from __future__ import annotations

import argparse

from .threads import positive_thread_count, thread_count

MIXERS = ("transformer", "kuramoto", "circuits", "quaternion")


def _override(text: str):
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--set {text!r}: expected KEY=VALUE, e.g. dim=32")
    import json

    try:
        v = json.loads(value)
    except json.JSONDecodeError:
        v = value
    return key, v


def _train_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", choices=("1m", "5m"), default="1m")
    p.add_argument("--data", default="text",
                   help="text | code | enwik8:PATH | codeparrot:PATH | folder:PATH")
    p.add_argument("--tokens", type=int, default=1_000_000, help="training token budget")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=16, help="global batch (sequences per step)")
    p.add_argument("--ctx", type=int, default=256, help="context length in bytes")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=100, help="warm-up steps")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--qk-lr-mult", type=float, default=1.0, help="LR multiplier, QK circuit")
    p.add_argument("--ov-lr-mult", type=float, default=1.0, help="LR multiplier, OV circuit")
    p.add_argument("--eval-every", type=int, default=200, help="steps between val BPC")
    p.add_argument("--eval-bytes", type=int, default=1_048_576,
                   help="validation slice: the first N bytes of the val split (0: all); "
                        "default 1 MiB, named in every record")
    p.add_argument("--set", dest="overrides", type=_override, action="append", default=[],
                   metavar="KEY=VALUE", help="override a model config field (e.g. dim=32)")
    p.add_argument("--threads", type=thread_count, default=0,
                   help="torch threads (0: torch default)")


def register(subparsers) -> None:
    p = subparsers.add_parser("lm", help="byte-level LMs: train, eval, sweep, export, profile")
    sub = p.add_subparsers(dest="lm_command", metavar="ACTION", required=True)

    t = sub.add_parser("train", help="train a mixer on a byte corpus to a token budget")
    t.add_argument("mixer", choices=MIXERS)
    _train_args(t)
    t.add_argument("--out", default=None, help="folder for checkpoint/ and result.json")
    t.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.set_defaults(func=run_train)

    e = sub.add_parser("eval", help="BPC of a trained model on a corpus split")
    e.add_argument("model", help="model.safetensors or a checkpoint folder")
    e.add_argument("--data", default="text")
    e.add_argument("--split", choices=("train", "val", "test"), default="test")
    e.add_argument("--ctx", type=int, default=0, help="window (0: the model's max_seq_len)")
    e.add_argument("--bytes", type=int, default=0, help="evaluate the first N bytes (0: all)")
    e.add_argument("--phase-windows", type=int, default=8,
                   help="Kuramoto models: windows of the split for the phase diagnostics")
    e.add_argument("--json", default=None, help="also write the results to this JSON file")
    e.set_defaults(func=run_eval)

    s = sub.add_parser("sweep", help="sweep the QK/OV learning-rate ratio; table + plot")
    s.add_argument("mixer", choices=MIXERS, nargs="?", default="circuits")
    _train_args(s)
    s.add_argument("--ratios", default="0.25,0.5,1,2,4",
                   help="QK/OV LR ratios (qk mult = sqrt(r), ov mult = 1/sqrt(r))")
    s.add_argument("--out", required=True, help="folder for sweep.json, sweep.md, sweep.png")
    s.set_defaults(func=run_sweep)

    x = sub.add_parser("export", help="export prefill + decode with a static KV cache")
    x.add_argument("mixer", help="a mixer name (fresh weights) or a trained model file/folder")
    x.add_argument("--target", choices=("executorch", "litert"), required=True)
    x.add_argument("--precision", choices=("fp32", "int8"), default="fp32")
    x.add_argument("--size", choices=("1m", "5m"), default="1m")
    x.add_argument("--cache-len", type=int, default=256, help="KV-cache slots (max tokens)")
    x.add_argument("--prefill", type=int, default=64, help="static prefill length")
    x.add_argument("--set", dest="overrides", type=_override, action="append", default=[],
                   metavar="KEY=VALUE")
    x.add_argument("--out", required=True, help="output folder")
    x.add_argument("--verify-steps", type=int, default=64, help="greedy tokens to compare")
    x.set_defaults(func=run_export)

    r = sub.add_parser("profile", help="llama-bench-style pp/tg rows on a runtime")
    r.add_argument("artifact", help="an export folder, a model file/folder, or a mixer name")
    r.add_argument("--runtime", choices=("torch", "executorch", "litert"), default="torch")
    r.add_argument("--size", choices=("1m", "5m"), default="1m")
    r.add_argument("--pp", type=int, default=64, help="prompt tokens (row ppN)")
    r.add_argument("--tg", type=int, default=128, help="generated tokens (row tgN)")
    r.add_argument("--reps", type=int, default=5)
    r.add_argument("--threads", type=positive_thread_count, default=1)
    r.add_argument("--set", dest="overrides", type=_override, action="append", default=[],
                   metavar="KEY=VALUE")
    r.add_argument("--out", default=None, help="folder for profile.json and profile.md")
    r.set_defaults(func=run_profile)


def _config_from_args(args, mixer: str):
    from ..lm.train import TrainConfig

    return TrainConfig(
        mixer=mixer, size=args.size, data=args.data, tokens=args.tokens, seed=args.seed,
        batch=args.batch, ctx=args.ctx, lr=args.lr, warmup=args.warmup,
        weight_decay=args.weight_decay, qk_lr_mult=args.qk_lr_mult,
        ov_lr_mult=args.ov_lr_mult, eval_every=args.eval_every, eval_bytes=args.eval_bytes,
        model_overrides=tuple(args.overrides),
    )


def run_train(args) -> int:
    import torch

    from ..lm.train import train

    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = _config_from_args(args, args.mixer)
    res = train(cfg, out=args.out, resume=args.resume, progress=not args.quiet)
    if int(__import__("os").environ.get("RANK", "0")) == 0:
        test = res.get("test_bpc")
        print(f"{cfg.mixer}-{cfg.size} seed {cfg.seed}: {res['params']} params, "
              f"{res['tokens']} tokens, {res['tokens_per_s']:.0f} tok/s, "
              f"val_bpc {res['val_bpc']:.4f}" + (f", test_bpc {test:.4f}" if test else ""))
        if res.get("replica_weights_identical") is not None:
            print(f"replica weights identical: {res['replica_weights_identical']}")
    return 0


def run_eval(args) -> int:
    import json

    import numpy as np
    import torch

    from ..config import config_to_dict
    from ..fileio import atomic_write_text
    from ..lm.data import load_corpus
    from ..lm.diagnostics import phase_stats, phase_table
    from ..lm.train import eval_slice_name, evaluate_bpc, load_model

    model, _ = load_model(args.model)
    corpus = load_corpus(args.data)
    ctx = args.ctx or model.config.max_seq_len
    data = corpus.split(args.split)
    bpc = evaluate_bpc(model, data, ctx, args.bytes)
    name = eval_slice_name(args.split, data, ctx, args.bytes)
    print(f"{args.split} bpc {bpc:.4f} ({args.data}, {name})")
    out = {"model": str(args.model), "config": config_to_dict(model.config), "data": args.data,
           "split": args.split, "slice": name, "bpc": bpc,
           "split_sha256": corpus.manifest["splits"][args.split]["sha256"]}
    w = min(args.phase_windows, (data.size - 1) // ctx)
    if w > 0:
        text = torch.from_numpy(data[: w * ctx].astype(np.int64)).view(w, ctx)
        phases = phase_stats(model, text)
        if phases is not None:
            pname = f"{args.split}[0:{w * ctx}] ({args.data})"
            phases["slice"] = pname
            out["phases"] = phases
            print(phase_table(phases, pname))
    if args.json:
        atomic_write_text(args.json, json.dumps(out, indent=1) + "\n")
    return 0


def run_sweep(args) -> int:
    import torch

    from ..lm.sweep import sweep

    if args.threads:
        torch.set_num_threads(args.threads)
    ratios = [float(r) for r in args.ratios.split(",") if r]
    rows = sweep(_config_from_args(args, args.mixer), ratios, args.out)
    for r in rows:
        print(r)
    return 0


def run_export(args) -> int:
    from ..lm.export import export_cli

    return export_cli(args)


def run_profile(args) -> int:
    from ..lm.profile import profile_cli

    return profile_cli(args)
