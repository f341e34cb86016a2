"""``--threads`` of every command (issue 32): `qsa eval` defaults to one thread as `qsa enhance`
does, and a count torch cannot take is a clean argparse error (exit 2), never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

QSA = [str(Path(sys.executable).with_name("qsa"))]


def test_eval_defaults_to_one_thread_like_enhance():
    """torch's default (a thread per core) ran these small models 3-9x slower on a busy
    2-core machine than one thread; `qsa eval` enhances like `qsa enhance` and defaults alike."""
    from qsa.cli import build_parser

    parser = build_parser()
    enhance = parser.parse_args(["enhance", "in.wav", "out.wav"]).threads
    assert enhance == 1
    assert parser.parse_args(["eval", "qcgan-35k", "--data", "synth:x"]).threads == enhance
    assert parser.parse_args(["eval", "noisy", "--data", "d", "--threads", "0"]).threads == 0


@pytest.mark.parametrize("argv, bad", [
    (["eval", "qcgan-35k", "--data", "synth:nowhere", "--threads", "-1"], "-1"),
    (["eval", "qcgan-35k", "--data", "synth:nowhere", "--threads", "two"], "'two'"),
    (["train", "qcgan-35k", "--data", "synth:nowhere", "--threads", "-2"], "-2"),
    (["lm", "train", "transformer", "--threads", "-1"], "-1"),
    (["lm", "sweep", "--out", "nowhere", "--threads", "-1"], "-1"),
    (["lm", "profile", "transformer", "--threads", "0"], "0"),  # profile always sets a count
], ids=["eval", "eval-word", "train", "lm-train", "lm-sweep", "lm-profile-0"])
def test_bad_thread_count_is_a_clean_error(tmp_path, argv, bad):
    r = subprocess.run(QSA + argv, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr, r.stderr
    assert f"argument --threads: {bad}: expected" in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []  # refused before anything was written
