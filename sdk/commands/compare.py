"""`qsa compare MODEL... --data SPEC`: every model x runtime x precision on the same utterances,
streamed hop by hop; PESQ/STOI/SI-SDR, ΔPESQ vs torch fp32, bytes, latency, RTF."""

from __future__ import annotations

RUNTIME_CHOICES = ("torch", "onnx", "executorch", "litert", "tflm", "c")


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def register(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="compare models across runtimes and precisions (PESQ, STOI, latency, bytes)",
        description=(
            "Export every MODEL to every runtime at every precision (cached in "
            "OUT/artifacts/), stream the data set through each hop by hop as a device runs "
            "it, and score PESQ-WB/NB, STOI and SI-SDR against the clean speech. Writes "
            "OUT/results.json, OUT/results.md (the table) and OUT/pesq_wb.png. A combination "
            "that fails to export is recorded in its row; the others go on (exit 1 when "
            "every combination failed)."
        ),
    )
    p.add_argument("models", nargs="+", metavar="MODEL",
                   help="shipped model names or packed model files (.qsa), see `qsa info`")
    p.add_argument("--data", required=True,
                   help="synth:DIR | real:DIR (their --split) | voicebank:DIR | dns:DIR | "
                        "DIR with clean/ + noisy/")
    p.add_argument("--runtimes", type=_csv, default=None,
                   help=f"comma-separated, of {','.join(RUNTIME_CHOICES)} (default: every "
                        "runtime whose packages import; c: the generated C build, int8)")
    p.add_argument("--precisions", type=_csv, default=["fp32", "int8"],
                   help="comma-separated, of fp32,int8 (default: fp32,int8)")
    p.add_argument("--out", default="compare_out", help="output folder (default: compare_out)")
    p.add_argument("--split", default="test", choices=("train", "val", "test"),
                   help="split of synth/real/voicebank data (default: test)")
    p.add_argument("--limit", type=int, default=0, help="use only the first N utterances")
    p.add_argument("--workers", type=int, default=2, help="metric worker processes (2)")
    p.add_argument("--rebuild", action="store_true",
                   help="export again even where OUT/artifacts/ has a valid cached artifact")
    p.add_argument("--allow-untrained", action="store_true",
                   help="allow a preset without shipped weights (compared untrained)")
    p.add_argument("--dnsmos", action="store_true",
                   help="also score DNSMOS OVRL (P.835, no reference needed; ~0.5 s of CPU "
                        "per second of audio per row)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--verbose", action="store_true",
                   help="show the converters' and runtimes' own log lines (hidden by default)")
    p.set_defaults(func=run)


def run(args) -> int:
    import sys

    from qsa.apps.compare import available_runtimes, check_choices, compare
    from qsa.errors import ConfigError

    if args.limit < 0:
        raise ConfigError(f"--limit {args.limit}: expected 0 (all) or a positive count")
    if args.workers < 0:
        raise ConfigError(f"--workers {args.workers}: expected 0 (in process) or more")
    for flag, given, choices in (("--runtimes", args.runtimes, RUNTIME_CHOICES),
                                 ("--precisions", args.precisions, ("fp32", "int8"))):
        if given is not None and not given:  # "--runtimes ," or "--runtimes ''"
            raise ConfigError(f"{flag} names nothing; expected a comma-separated list of "
                              f"{','.join(choices)} (or leave {flag} out for the default)")
    check_choices(args.runtimes or available_runtimes(), args.precisions)  # before torch
    from qsa.commands.quiet import third_party_quiet

    with third_party_quiet(args.verbose):
        res = _compare(args, compare)
    print_table(res)
    print(f"wrote {res.out_dir}/results.json, results.md, pesq_wb.png "
          f"({len(res.names)} utterances, {res.seconds:.0f} s)")
    if res.failures:
        ran = [r for r in res.rows if r.status != "input"]
        print(f"{len(res.failures)} of {len(ran)} combination(s) failed (recorded in "
              "results.md):")
        for r in res.failures:
            print(f"  - {r.key}: {r.error}")
        if len(res.failures) == len(ran):  # nothing compared: a failed run (exit 1)
            print("qsa compare: error: every combination failed, nothing was compared; see "
                  "the errors above", file=sys.stderr)
            return 1
    return 0


def _compare(args, compare):
    return compare(
        args.models,
        args.data,
        runtimes=args.runtimes,
        precisions=args.precisions,
        out_dir=args.out,
        split=args.split,
        limit=args.limit,
        workers=args.workers,
        allow_untrained=args.allow_untrained,
        rebuild=args.rebuild,
        threads=1,  # one thread per runtime, as on a device
        progress=not args.quiet,
        dnsmos=args.dnsmos,
    )


def print_table(res) -> None:
    """The results as a rich table on the terminal (also used by `qsa demo`)."""
    from rich.console import Console
    from rich.table import Table

    from qsa.apps.compare import format_cell, metric_cells

    t = Table(title=f"{', '.join(res.models)} on {res.data} ({len(res.names)} utterances, "
                    "streamed)")
    dnsmos = getattr(res, "dnsmos", False)
    cols = ("model", "runtime", "precision", "PESQ-WB", "PESQ-NB", "STOI", "SI-SDR",
            *(("DNSMOS OVRL",) if dnsmos else ()), "ΔPESQ-WB", "bytes", "hop ms med/p99",
            "RTF", "status")
    for c in cols:
        t.add_column(c, justify="left" if c in ("model", "runtime", "status") else "right")
    for r in res.rows:
        hop = (f"{r.hop_ms_median:.3f} / {r.hop_ms_p99:.3f}"
               if r.hop_ms_median is not None else "-")
        status = {"ok": "ok (cached)" if r.cached else "ok", "failed": "[red]failed"}.get(
            r.status, r.status)
        t.add_row(r.model, r.runtime, r.precision, *metric_cells(r, dnsmos), hop,
                  format_cell(r.rtf, ".3f"), status)
    Console(width=160).print(t)
