"""Fuzz the exported-artifact loaders at scale (tests/test_fuzz_artifacts.py runs 300 cases
per format in CI; this runs as many as you ask).

    python bench/fuzz_artifacts.py --cases 5000                 # every format
    python bench/fuzz_artifacts.py --cases 2000 --formats tflite-tflm --fork --seed 3

Exports the toy model to .onnx / .pte / .tflite (LiteRT fp32) / .tflite (TFLM int8), then
loads and steps each mutant with and without the exporter's report.json (sha256) beside it.
Prints outcome counts per format and variant, writes every non-accepted case (and, with
``--save``, its mutant file) to ``--out``; exits 1 on any signal, hang or foreign exception,
or on a mutant accepted despite the report's sha256.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import fuzzlib  # noqa: E402
import test_fuzz_artifacts as tfa  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=5000, help="mutants per format")
    ap.add_argument("--formats", nargs="+", default=list(tfa.FORMATS), choices=list(tfa.FORMATS))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fork", action="store_true",
                    help="one forked process per case (slower; exact crash attribution)")
    ap.add_argument("--artifacts", type=Path, default=None,
                    help="reuse an export folder written by a previous run (one subfolder per "
                    "format)")
    ap.add_argument("--out", type=Path, default=Path("bench_out/fuzz_artifacts"))
    ap.add_argument("--save", action="store_true", help="save the mutants that failed")
    args = ap.parse_args(argv)

    args.out.mkdir(parents=True, exist_ok=True)
    if args.artifacts is None:
        args.artifacts = Path(tempfile.mkdtemp(prefix="qsa-fuzz-"))
        print(f"exporting the toy model to {args.artifacts} ...", flush=True)
        paths = tfa.export_artifacts(args.artifacts)
    else:
        paths = {f: args.artifacts / f / tfa.FORMATS[f][3] for f in tfa.FORMATS}
    failed = False
    results = {}
    for fmt in args.formats:
        t0 = time.perf_counter()
        outcomes, records = tfa.fuzz_format(fmt, paths, args.cases, seed=args.seed,
                                            fork=args.fork)
        s = tfa.summary(outcomes)
        secs = time.perf_counter() - t0
        results[fmt] = {"cases": args.cases, "seconds": round(secs, 1), "outcomes": s}
        bad = [r for r in records if (r["variant"] == "plain" and r["outcome"] not in
               ("error", "loaded")) or (r["variant"] == "report" and r["outcome"] != "error")]
        failed |= bool(bad)
        print(f"{fmt}: {args.cases} cases in {secs:.0f} s: {json.dumps(s)}", flush=True)
        if bad:
            (args.out / f"{fmt}-failures.json").write_text(json.dumps(bad, indent=1))
            print(f"  {len(bad)} failures -> {args.out / f'{fmt}-failures.json'}")
            if args.save:
                data = paths[fmt].read_bytes()
                donor = paths[tfa.DONOR[fmt]].read_bytes()
                want = {r["case"] for r in bad}
                for k, m in enumerate(fuzzlib.mutations(data, args.cases, args.seed, donor=donor)):
                    if k in want:
                        (args.out / f"{fmt}-case{k}{paths[fmt].suffix}").write_bytes(m)
    (args.out / "summary.json").write_text(json.dumps(results, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
