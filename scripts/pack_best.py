"""Turn a run's best validation epoch into the pair of files scripts/ship_weights.py takes.

    .venv/bin/python scripts/pack_best.py runs/r089c2 qcgan-0.89m-causal /tmp/cand

Reads RUN/NAME.best.qsa (the fp32 generator `qsa train` keeps for the best validation epoch)
and writes OUT/NAME.fp32.qsa and OUT/NAME.int8.qsa with its model card, so the candidate is
scored and shipped exactly as a finished run's final weights are. OUT must not be RUN (the
run's own final files would be overwritten).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="run folder holding NAME.best.qsa")
    ap.add_argument("name", help="the model preset, e.g. qcgan-35k")
    ap.add_argument("out", help="folder for NAME.fp32.qsa and NAME.int8.qsa (not RUN)")
    args = ap.parse_args(argv)
    run, out = Path(args.run), Path(args.out)
    best = run / f"{args.name}.best.qsa"
    if not best.is_file():
        sys.exit(f"pack_best: {best} not found; expected a run folder of `qsa train "
                 f"{args.name}` after at least one validation epoch")
    if out.resolve() == run.resolve():
        sys.exit(f"pack_best: OUT {out} is the run folder; its final {args.name}.*.qsa would be "
                 "overwritten; give another folder")
    from qsa.quantize import load_packed, save_packed

    model = load_packed(best).eval()
    out.mkdir(parents=True, exist_ok=True)
    for prec in ("fp32", "int8"):
        f = save_packed(model, out / f"{args.name}.{prec}.qsa", precision=prec)
        print(f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
