"""Average the weights of qsa train checkpoints (one run's snapshots, or runs fine-tuned from
one start) into one checkpoint for --init, qsa eval or packing:

    .venv/bin/python scripts/average_checkpoints.py OUT.safetensors RUN1 RUN2/ckpt.safetensors
"""

from __future__ import annotations

import argparse
import sys

from qsa.errors import QsaError
from qsa.train.checkpoint import average_checkpoints


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("checkpoints", nargs="+")
    a = ap.parse_args()
    try:
        path = average_checkpoints(a.checkpoints, a.out)
    except QsaError as e:
        sys.exit(f"error: {e}")
    print(f"wrote {path}: the mean of {len(a.checkpoints)} checkpoints")


if __name__ == "__main__":
    main()
