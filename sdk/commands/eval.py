"""`qsa eval MODEL --data SPEC`: PESQ-WB/NB, STOI, SI-SDR, CSIG/CBAK/COVL and DNSMOS.

On a paired set (clean references) the intrusive metrics are computed, plus DNSMOS with
``--dnsmos``. On a noisy-only set (a folder of recordings, one audio file, a `qsa live
--record` file with ``--channel``) every file, or the model's output for it, is scored with
DNSMOS P.835 SIG / BAK / OVRL and P.808 MOS, which need no reference.
"""

from __future__ import annotations


def register(sub) -> None:
    from .threads import thread_count

    p = sub.add_parser("eval", help="score a model (or the noisy input) on a data set: "
                       "intrusive metrics on paired sets, DNSMOS on noisy-only recordings")
    p.add_argument("model", help="qcgan-35k | qcgan-0.89m | a packed model file | a qsa train run "
                   "folder or checkpoint | noisy (score the input itself)")
    p.add_argument("--data", required=True,
                   help="synth:DIR | voicebank:DIR | dns:DIR (paired) | DIR or FILE: audio "
                   "files without references, scored with DNSMOS")
    p.add_argument("--split", default="test")
    p.add_argument("--limit", type=int, default=0, help="score only the first N items")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--dnsmos", action="store_true",
                   help="on a paired set, add DNSMOS SIG/BAK/OVRL/P.808 means (always on for "
                   "noisy-only sets)")
    p.add_argument("--channel", type=int, default=None, metavar="C",
                   help="score channel C (0-based) of multi-channel files instead of their mean "
                   "(a `qsa live --record` file: 0 input, 1 enhanced output, 2 microphone)")
    p.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    p.add_argument("--out", default=None, help="write the JSON results here")
    p.add_argument("--force", action="store_true")
    p.add_argument("--threads", type=thread_count, default=1,
                   help="torch threads (default 1, as `qsa enhance`: the fastest for these "
                   "small models on a busy machine; 0: torch's default, a thread per core)")
    p.set_defaults(func=run)


def _load(pair, channel: int | None):
    """(noisy, clean or None) of a Pair; ``channel`` picks one channel of the noisy file."""
    if channel is None:
        return pair.load()
    import numpy as np
    import soundfile as sf

    from qsa.audio.resample import resample
    from qsa.errors import AudioError

    try:
        data, sr = sf.read(str(pair.noisy), dtype="float32", always_2d=True)  # (n, channels)
    except (sf.LibsndfileError, RuntimeError, OSError) as e:
        raise AudioError(f"{pair.noisy}: not a readable audio file ({e}); expected WAV, FLAC "
                         f"or OGG") from None
    if not 0 <= channel < data.shape[1]:
        raise AudioError(f"--channel {channel}: {pair.noisy} has {data.shape[1]} channel(s); "
                         f"pick one of 0..{data.shape[1] - 1}")
    if data.shape[0] == 0:
        raise AudioError(f"{pair.noisy}: the file has 0 samples; nothing to score")
    x = np.ascontiguousarray(data[:, channel])
    if not np.isfinite(x).all():
        raise AudioError(f"{pair.noisy}: channel {channel} has NaN or Inf samples; re-export "
                         f"the file from its source")
    x = resample(x, sr, pair.sr)
    if pair.clean is None:
        return x, None
    from qsa.audio.io import read_audio

    clean = read_audio(pair.clean, pair.sr)[0]
    n = min(len(x), len(clean))
    return x[:n], clean[:n]


def evaluate(model, pairs, workers: int = 2, progress: bool = True, *, dnsmos: bool = False,
             dnsmos_threads: int = 1, channel: int | None = None) -> dict:
    """Enhance each pair with ``model`` (None: score the noisy input) and score it.

    A paired set gets the intrusive metrics of ``qsa.metrics.batch`` (and, with ``dnsmos``,
    the DNSMOS means next to them); a set with any item lacking a clean reference is scored
    with DNSMOS only. DNSMOS means are under ``dnsmos_sig/_bak/_ovrl/_p808``; an item DNSMOS
    cannot score (silent output, ...) is NaN with the reason in its ``errors``.
    """
    import numpy as np
    from tqdm import tqdm

    from qsa.metrics.batch import batch_metrics, summarize

    pairs = list(pairs)
    paired = bool(pairs) and all(p.clean is not None for p in pairs)
    use_dnsmos = dnsmos or not paired
    if use_dnsmos:
        from qsa.metrics.dnsmos import METRIC_KEYS, dnsmos_item, model_dir

        model_dir()  # a missing speechmos fails now, not after enhancing everything
    items, scores = [], []
    for p in tqdm(pairs, desc="enhance" if model is not None else "score",
                  disable=not progress):
        noisy, clean = _load(p, channel)
        if model is None:
            y = noisy
        else:
            import torch

            with torch.no_grad():
                y = model(torch.from_numpy(noisy)[None])[0].numpy()
        y = y.astype(np.float32)
        if use_dnsmos:
            label = str(p.noisy) if model is None else f"{p.name} (enhanced output)"
            scores.append(dnsmos_item(p.name, y, p.sr, dnsmos_threads, label))
        if paired:
            items.append((p.name, clean, y))
    if not paired:
        res = summarize(scores, METRIC_KEYS).to_dict()
        res["reference"] = False
        return res
    res = batch_metrics(items, workers=workers, progress=progress).to_dict()
    if use_dnsmos:
        for it, s in zip(res["items"], scores, strict=True):
            errs = s.pop("errors", None)
            s.pop("name")
            it.update(s)
            if errs:
                it.setdefault("errors", {}).update(errs)
        dn = summarize(res["items"], METRIC_KEYS)
        res["means"].update(dn.means)
        res["counts"].update(dn.counts)
    res["reference"] = True
    return res


def _finite(x):
    """NaN / Inf -> None, recursively, so the output is strict JSON."""
    import math

    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if hasattr(x, "item") and not isinstance(x, str):  # numpy scalars
        return _finite(x.item())
    return x


def _table(res: dict, out) -> None:
    rows = res["items"]
    w = max([4] + [len(str(it["name"])) for it in rows])
    print(f"{'file':<{w}}    SIG    BAK   OVRL   P808", file=out)
    for it in rows:
        vals = " ".join(f"{it[f'dnsmos_{k}']:6.3f}" for k in ("sig", "bak", "ovrl", "p808"))
        print(f"{it['name']:<{w}} {vals}", file=out)


def run(args) -> int:
    import contextlib
    import json
    import sys
    from pathlib import Path

    from qsa.data.readers import parse_data_spec
    from qsa.errors import QsaError
    from qsa.fileio import atomic_write_text

    if args.out and Path(args.out).exists() and not args.force:
        raise QsaError(f"{args.out} already exists; pass --force to overwrite it")
    if args.channel is not None and args.channel < 0:
        raise QsaError(f"--channel {args.channel}: expected a channel index 0, 1, 2, ...")
    if args.threads and args.model != "noisy":
        import torch

        torch.set_num_threads(args.threads)
    pairs = parse_data_spec(args.data, split=args.split)
    if args.limit:
        pairs = list(pairs)[: args.limit]
    # with --json, stdout carries the JSON alone: anything else printed goes to stderr
    quiet = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    with quiet:
        if args.channel is None:
            _note_channels(pairs)
        model = None
        if args.model != "noisy":
            from qsa.hub import load

            model = load(args.model, allow_untrained=False)
        res = evaluate(model, pairs, args.workers, progress=sys.stderr.isatty(),
                       dnsmos=args.dnsmos,
                       dnsmos_threads=max(1, args.threads), channel=args.channel)
    summary = _finite({"model": args.model, "data": args.data, "split": args.split,
                       "channel": args.channel, **res})
    if not res["reference"]:
        _check_scored(res)
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        if not res["reference"]:
            _table(res, sys.stdout)
        for k, v in res["means"].items():
            print(f"{k:>11}: {v:.3f}  (n={res['counts'][k]})")
    if args.out:
        atomic_write_text(args.out, json.dumps(summary, indent=1))
    return 0


def _note_channels(pairs) -> None:
    """One stderr note when a file has several channels (they are averaged to mono)."""
    import sys

    import soundfile as sf

    for p in list(pairs)[:50]:
        try:
            ch = sf.info(str(p.noisy)).channels
        except Exception:  # unreadable: loading it says why
            continue
        if ch > 1:
            print(f"qsa eval: note: {p.noisy} has {ch} channels, scored as their mean; pass "
                  f"--channel C to score one (a `qsa live --record` file: 0 input, 1 enhanced "
                  f"output, 2 microphone)", file=sys.stderr)
            return


def _check_scored(res: dict) -> None:
    """Warn about items DNSMOS could not score; fail (exit 2) when none could be."""
    import sys

    from qsa.errors import AudioError

    failed = [it for it in res["items"] if it.get("errors")]
    if failed and len(failed) == len(res["items"]):
        raise AudioError(next(iter(failed[0]["errors"].values())))
    for it in failed:
        why = next(iter(it["errors"].values()))
        print(f"qsa eval: warning: not scored (NaN): {why}", file=sys.stderr)
