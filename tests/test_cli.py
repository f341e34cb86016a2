"""The `qsa` command, run as a user runs it (subprocess)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

QSA = [str(Path(sys.executable).with_name("qsa"))]


def qsa(*args, check=True):
    r = subprocess.run(
        QSA + list(args),
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    if check and r.returncode != 0:
        raise AssertionError(f"qsa {args} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return r


def test_help_and_version():
    r = qsa("--help")
    assert "usage: qsa" in r.stdout and "demo" in r.stdout
    from qsa import __version__

    assert qsa("--version").stdout.strip() == f"qsa {__version__}"


def test_help_does_not_import_torch():
    code = (
        "import sys; from qsa.cli import build_parser; build_parser(); "
        "print('torch' in sys.modules)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False"


def test_info_json():
    info = json.loads(qsa("info", "--json").stdout)
    assert any(m["name"] == "qtransformer-small" for m in info["models"])
    assert info["runtimes"]["torch"] is True


def test_pack_inspect_and_refuse_overwrite(tmp_path):
    out = tmp_path / "m.qsa"
    qsa("pack", "qtransformer-small", str(out), "--untrained")
    meta = json.loads(qsa("inspect", str(out), "--json").stdout)
    assert meta["precision"] == "int8" and meta["int8_weights"] > 0
    r = qsa("pack", "qtransformer-small", str(out), "--untrained", check=False)
    assert r.returncode == 2 and "--force" in r.stderr
    qsa("pack", "qtransformer-small", str(out), "--untrained", "--force", "--precision", "fp32")


@pytest.mark.parametrize("content", [b"", b"garbage" * 10])
def test_inspect_bad_file_is_a_clean_error(tmp_path, content):
    bad = tmp_path / "bad.qsa"
    bad.write_bytes(content)
    r = qsa("inspect", str(bad), check=False)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and str(bad) in r.stderr


def test_unknown_model_is_named():
    r = qsa("pack", "no-such-model", "/tmp/x.qsa", check=False)
    assert r.returncode == 2 and "no-such-model" in r.stderr


def test_demo_runs(tmp_path):
    r = qsa("demo", "--layers-only", "--out", str(tmp_path / "demo"))
    assert "SQNR" in r.stdout
    assert list((tmp_path / "demo").glob("*.qsa"))


@pytest.mark.parametrize(
    "args",
    [
        ("data", "synth", "{out}", "--hours", "0.001"),
        ("train", "qcgan-35k", "--data", "synth:{data}", "--out", "{out}", "--max-steps", "1"),
        ("demo", "--out", "{out}"),
        ("compare", "qcgan-35k", "--data", "{pairs}", "--runtimes", "torch", "--out", "{out}"),
        ("enhance", "{wav}", "{out}/enhanced.wav"),
        ("export", "qcgan-35k", "--target", "onnx", "-o", "{out}"),
    ],
    ids=lambda a: a[0],
)
def test_unwritable_output_is_a_clean_error(tmp_path, args):
    """An output path that cannot be a folder (a file stands in the way): exit 2 with the path,
    the reason and the fix, no traceback, nothing written; checked before any slow work."""
    import numpy as np
    import soundfile as sf

    pairs = tmp_path / "in"
    for sub in ("clean", "noisy"):
        (pairs / sub).mkdir(parents=True)
        sf.write(pairs / sub / "a.wav", np.zeros(16000, np.float32), 16000)
    out = tmp_path / "out"
    out.mkdir()
    blocker = out / "taken"
    blocker.write_text("a file, not a folder")
    fill = {"out": str(blocker / "sub"), "data": str(tmp_path / "no-corpus"),
            "wav": str(pairs / "noisy" / "a.wav"), "pairs": str(pairs)}
    r = qsa(*(a.format(**fill) for a in args), check=False)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    assert f"{blocker} is a file, not a folder" in r.stderr
    assert blocker.read_text() == "a file, not a folder"
    assert [p.name for p in out.iterdir()] == ["taken"]


def test_enhance_defaults_to_one_thread():
    """torch's default (a thread per core) ran `qsa enhance` 3-9x slower on a busy 2-core
    machine than one thread (bench/cli_startup.py measures it); the default is one."""
    from qsa.cli import build_parser

    assert build_parser().parse_args(["enhance", "in.wav", "out.wav"]).threads == 1
