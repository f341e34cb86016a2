"""`qsa data`: build the synthetic corpus or demo set, and inspect a --data set.

    qsa data synth OUT --hours 2 [--seed 0] [--reverb/--no-reverb] [--workers 2] [--force]
    qsa data real OUT --hours 4 [--seed 0] [--synth-share 0.2] [--workers 2] [--force]
    qsa data demo OUT [--n 8] [--force]
    qsa data info SPEC [--split test]     (SPEC: synth:DIR, real:DIR, voicebank:DIR, dns:DIR
                                           or DIR)
"""

from __future__ import annotations

import argparse


def register(sub) -> None:
    p = sub.add_parser("data", help="make the synthetic corpus / demo set, inspect datasets")
    dsub = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)

    s = dsub.add_parser("synth", help="build a seeded noisy-speech corpus (espeak-ng, no "
                        "downloads)")
    s.add_argument("out", help="output folder (empty, or a corpus to replace with --force)")
    s.add_argument("--hours", type=float, required=True, help="total audio, e.g. 2 or 0.02")
    s.add_argument("--seed", type=int, default=0, help="corpus seed (default 0)")
    s.add_argument("--reverb", action=argparse.BooleanOptionalAction, default=True,
                   help="put half of the items in simulated rooms (default: on)")
    s.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    s.add_argument("--force", action="store_true", help="replace a corpus already in OUT")
    s.set_defaults(func=run_synth)

    r = dsub.add_parser("real", help="build a seeded corpus of real human speech and recorded "
                        "noise from Debian packages (no downloads)",
                        description="Speech: asterisk-core-sounds-{en,es,fr,it}-g722, "
                        "fillets-ng-data-{cs,nl}, klettres-data, ktuberling-data; noise: "
                        "openttd-opensfx, sonic-pi-samples, real babble and the generated "
                        "noise bank; reverb and a capture chain. Split by speaker and by noise "
                        "file (read with --data real:OUT).")
    r.add_argument("out", help="output folder (empty, or a corpus to replace with --force)")
    r.add_argument("--hours", type=float, required=True, help="total audio, e.g. 4 or 0.05")
    r.add_argument("--seed", type=int, default=0, help="corpus seed (default 0)")
    r.add_argument("--synth-share", type=float, default=0.2, metavar="P",
                   help="share of train/val items with espeak-ng speech of the split's "
                   "synthetic voices (default 0.2; the test split is real speech only)")
    r.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    r.add_argument("--force", action="store_true", help="replace a corpus already in OUT")
    r.set_defaults(func=run_real)

    d = dsub.add_parser("demo", help="write the small fixed demo set (clean/ + noisy/)")
    d.add_argument("out", help="output folder")
    d.add_argument("--n", type=int, default=8, help="number of items (default 8)")
    d.add_argument("--force", action="store_true", help="replace a demo set already in OUT")
    d.set_defaults(func=run_demo)

    i = dsub.add_parser("info", help="count the items and hours of a --data set")
    i.add_argument("spec", help="synth:DIR, real:DIR, voicebank:DIR, dns:DIR or a folder of audio")
    i.add_argument("--split", default="test", choices=["train", "val", "test"])
    i.add_argument("--json", action="store_true", help="print JSON")
    i.set_defaults(func=run_info)


def run_synth(args) -> int:
    from qsa.data.synth import make_corpus

    s = make_corpus(args.out, args.hours, seed=args.seed, reverb=args.reverb,
                    workers=args.workers, force=args.force)
    for split, t in s["splits"].items():
        print(f"{split:<6} {t['items']:>6d} items  {t['hours']:.3f} h")
    print(f"wrote {args.out} in {s['build_seconds']:.1f} s "
          f"({s['build_seconds'] / max(args.hours, 1e-9) / 60:.1f} min per hour of audio)")
    return 0


def run_real(args) -> int:
    from qsa.data.real import make_real_corpus

    s = make_real_corpus(args.out, args.hours, seed=args.seed, synth_share=args.synth_share,
                         workers=args.workers, force=args.force)
    for split, t in s["splits"].items():
        print(f"{split:<6} {t['items']:>6d} items  {t['hours']:.3f} h")
    print(f"wrote {args.out} in {s['build_seconds']:.1f} s; read it with --data real:{args.out}")
    return 0


def run_demo(args) -> int:
    from qsa.data.synth import make_demo_set

    records = make_demo_set(args.out, n=args.n, force=args.force)
    print(f"wrote {len(records)} demo items to {args.out}/clean and {args.out}/noisy")
    return 0


def run_info(args) -> int:
    import json

    import soundfile as sf

    from qsa.data.readers import parse_data_spec

    ds = parse_data_spec(args.spec, args.split)
    seconds = 0.0
    for p in ds:
        info = sf.info(str(p.noisy))
        seconds += info.frames / info.samplerate
    summary = {"kind": ds.kind, "root": str(ds.root), "items": len(ds), "paired": ds.paired,
               "hours": round(seconds / 3600, 4), "description": ds.description}
    if args.json:
        print(json.dumps(summary))
    else:
        for k, v in summary.items():
            print(f"{k:<12} {v}")
    return 0
