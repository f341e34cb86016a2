"""`qsa compare`, run as a user runs it (subprocess), on three short espeak-ng + noise pairs."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

QSA = [str(Path(sys.executable).with_name("qsa"))]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# what the runtimes and converters print on their own (issue 32): off the terminal unless
# --verbose. Native log lines: glog/absl "W1206 21:43:35.29 ..." and "[cpuinfo_utils.cpp:71]".
CHATTER = ("_C_mxfp8", "Could not load this library", "absl", "oneDNN", "cpuinfo", "MLIR",
           "torchvision is not installed", "register_constant", "[torch.onnx]", "threadpool")
NATIVE_LOG = re.compile(r"^(?:[IWEF]\d{4} \d\d:\d\d:\d\d|\[[\w./-]+\.(?:c|cc|cpp|h):\d+\])",
                        re.M)


def assert_no_chatter(*outputs: str) -> None:
    for out in outputs:
        for marker in CHATTER:
            assert marker not in out, (marker, out[-3000:])
        assert not NATIVE_LOG.search(out), out[-3000:]


def qsa(*args, check=True):
    r = subprocess.run(QSA + [str(a) for a in args], capture_output=True, text=True,
                       timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if check and r.returncode != 0:
        raise AssertionError(f"qsa {args} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return r


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> Path:
    """Three noisy/clean pairs (held-out espeak-ng voices + noise, the demo set's first
    items) cut to 2 s so that streaming them through every runtime stays cheap."""
    import soundfile as sf

    from qsa.data.synth import make_demo_set

    root = tmp_path_factory.mktemp("pairs") / "set"
    make_demo_set(root, n=3)
    for wav in sorted(root.glob("*/*.wav")):
        x, sr = sf.read(wav, dtype="int16")
        sf.write(wav, x[: 2 * sr], sr, subtype="PCM_16")
    return root


@pytest.fixture(scope="module")
def compared(pairs, tmp_path_factory):
    """One real run: the shipped model on torch + onnx at fp32 and int8, plus a model that
    cannot stream (every one of its combinations fails and must be recorded, not fatal)."""
    out = tmp_path_factory.mktemp("cmp") / "out"
    offline = out.parent / "qcgan-0.89m.qsa"  # fixed (untrained) weights: a stable cache key
    qsa("pack", "qcgan-0.89m", offline, "--precision", "fp32")
    r = qsa("compare", "qcgan-35k", offline, "--data", f"synth:{pairs}",
            "--runtimes", "torch,onnx", "--precisions", "fp32,int8", "--out", out, "--quiet")
    return out, r, json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_every_row_and_fp32_parity(compared):
    out, r, res = compared
    rows = {(x["model"], x["runtime"], x["precision"]): x for x in res["rows"]}
    want = {(m, rt, p) for m in ("qcgan-35k", "qcgan-0.89m") for rt in ("torch", "onnx")
            for p in ("fp32", "int8")}
    assert set(rows) == want | {("(input)", "noisy", "-")}
    assert res["n_items"] == 3 and len(res["items"]) == 3
    ref = rows["qcgan-35k", "torch", "fp32"]
    assert ref["status"] == "ok" and ref["delta_pesq_wb"] == 0.0
    assert ref["counts"]["pesq_wb"] == 3 and 1.0 < ref["pesq_wb"] < 4.7
    # the acceptance: an fp32 runtime is within 0.01 PESQ-WB of torch fp32
    onnx = rows["qcgan-35k", "onnx", "fp32"]
    assert onnx["status"] == "ok" and abs(onnx["delta_pesq_wb"]) <= 0.01
    for key in (("qcgan-35k", "torch", "int8"), ("qcgan-35k", "onnx", "int8")):
        row = rows[key]
        assert row["status"] == "ok", row["error"]
        assert abs(row["delta_pesq_wb"]) < 0.3  # int8 PTQ: a small drop, not a broken model
    for row in (ref, onnx):
        assert row["bytes"] > 0 and row["rtf"] > 0
        assert 0 < row["hop_ms_median"] <= row["hop_ms_p99"]
        assert all(np.isfinite(row[m]) for m in ("pesq_wb", "pesq_nb", "stoi", "si_sdr"))
        assert (out / row["artifact"]).is_file()
    assert rows["(input)", "noisy", "-"]["pesq_wb"] < ref["pesq_wb"]  # the model helps
    enhanced = sorted((out / "enhanced" / "qcgan-35k" / "onnx-fp32").glob("*.wav"))
    assert len(enhanced) == 3


@pytest.mark.slow
def test_quiet_run_prints_no_third_party_chatter(compared):
    """The run above was `--quiet`: the exporters' and runtimes' own log lines stay off both
    streams (they are kept for an error's explanation; --verbose shows them)."""
    _, r, _ = compared
    assert_no_chatter(r.stdout, r.stderr)


def test_quiet_keeps_native_log_lines_that_come_through_sys_stderr():
    """ExecuTorch's pybindings log through Python's sys.stderr, a piece at a time ("[",
    "cpuinfo_utils.cpp", ":", "71", "] ", message, newline), which a file-descriptor redirect
    does not catch: the real call, and the same pieces written by hand, stay off the terminal
    while qsa's own progress and notes (even one in brackets) still reach it."""
    script = (
        "import sys\n"
        "from qsa.commands.quiet import third_party_quiet\n"
        "with third_party_quiet(False):\n"
        "    from executorch.extension.pybindings import portable_lib\n"
        "    portable_lib._unsafe_reset_threadpool(1)\n"
        "    for piece in ('[', 'threadpool.cpp', ':', '66', '] ', 'Resetting', '\\n'):\n"
        "        sys.stderr.write(piece)\n"
        "    sys.stderr.write('\\rrow torch-fp32:  50%|##   | 1/2 [00:01<00:01]')\n"
        "    print('[note] qsa keeps this', file=sys.stderr)\n"
        "print('done', file=sys.stderr)\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert_no_chatter(r.stdout, r.stderr)
    assert "1/2 [00:01<00:01]" in r.stderr and "[note] qsa keeps this\n" in r.stderr
    assert r.stderr.endswith("done\n"), r.stderr[-3000:]


@pytest.mark.slow
def test_failures_are_recorded_not_fatal(compared):
    out, r, res = compared
    bad = [x for x in res["rows"] if x["model"] == "qcgan-0.89m"]
    assert len(bad) == 4
    for row in bad:
        assert row["status"] == "failed" and "non-causal" in row["error"], row
        assert row["pesq_wb"] is None  # NaN in memory, null in JSON
    md = (out / "results.md").read_text()
    assert "failed: " in md and "non-causal" in md
    assert "qcgan-0.89m" in r.stdout and "failed" in r.stdout


@pytest.mark.slow
def test_table_and_plot(compared):
    out, r, res = compared
    md = (out / "results.md").read_text()
    head = next(line for line in md.splitlines() if line.startswith("| model"))
    for col in ("PESQ-WB", "PESQ-NB", "STOI", "SI-SDR", "ΔPESQ-WB vs torch fp32", "bytes",
                "median", "p99", "RTF", "status"):
        assert col in head
    table = [line for line in md.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + len(res["rows"])  # header + one line per row
    assert "| qcgan-35k | torch | fp32 |" in md and "+0.000" in md
    png = (out / "pesq_wb.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 5000
    from PIL import Image

    with Image.open(out / "pesq_wb.png") as im:
        im.verify()
    assert not list(out.rglob("*.tmp"))  # every write was atomic and completed


@pytest.mark.slow
def test_second_run_reuses_artifacts(compared, pairs):
    out, _, first = compared
    artifact = out / next(x["artifact"] for x in first["rows"]
                          if (x["model"], x["runtime"], x["precision"]) ==
                          ("qcgan-35k", "onnx", "fp32"))
    mtime = artifact.stat().st_mtime_ns
    qsa("compare", "qcgan-35k", out.parent / "qcgan-0.89m.qsa", "--data", pairs,  # plain DIR
        "--runtimes", "torch,onnx", "--precisions", "fp32", "--limit", "2", "--out", out,
        "--quiet")
    res = json.loads((out / "results.json").read_text())
    rows = {(x["runtime"], x["precision"]): x for x in res["rows"] if x["model"] == "qcgan-35k"}
    assert set(rows) == {("torch", "fp32"), ("onnx", "fp32")} and res["n_items"] == 2
    assert all(x["cached"] and x["status"] == "ok" for x in rows.values())
    assert artifact.stat().st_mtime_ns == mtime
    # a failed export is remembered too: not retried for minutes on every run
    failed = next(x for x in res["rows"] if (x["model"], x["runtime"]) == ("qcgan-0.89m", "onnx"))
    assert failed["status"] == "failed" and failed["cached"] and "non-causal" in failed["error"]


@pytest.mark.parametrize("args, needle", [
    (["no-such-model", "--runtimes", "torch"], "no-such-model"),
    (["qcgan-35k", "--runtimes", "torch,tpu"], "'tpu'"),
    (["qcgan-35k", "--precisions", "fp16"], "'fp16'"),
])
def test_bad_model_or_runtime_is_a_clean_error(pairs, tmp_path, args, needle):
    r = qsa("compare", *args, "--data", f"synth:{pairs}", "--out", tmp_path / "o", check=False)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr
    assert "expected" in r.stderr or "known models" in r.stderr
    assert "Traceback" not in r.stderr


def test_bad_data_is_a_clean_error(tmp_path):
    missing = tmp_path / "nowhere"
    r = qsa("compare", "qcgan-35k", "--data", f"synth:{missing}", "--out", tmp_path / "o",
            check=False)
    assert r.returncode == 2 and str(missing) in r.stderr and "Traceback" not in r.stderr
    empty = tmp_path / "empty"
    (empty / "clean").mkdir(parents=True)
    (empty / "noisy").mkdir()
    r = qsa("compare", "qcgan-35k", "--data", f"synth:{empty}", "--out", tmp_path / "o",
            check=False)
    assert r.returncode == 2 and str(empty) in r.stderr and "Traceback" not in r.stderr


@pytest.fixture(scope="module")
def compared_c(pairs, tmp_path_factory):
    """qcgan-35k on its generated C build (`c`, int8 only: no c-fp32 row is made even when
    fp32 is asked for), beside the torch fp32 reference."""
    from qsa.export.c_export import host_cc

    if host_cc() is None:
        from syspkgs import require

        require(["gcc"], "the c runtime's host build")
    out = tmp_path_factory.mktemp("cmp-c") / "out"
    r = qsa("compare", "qcgan-35k", "--data", f"synth:{pairs}", "--runtimes", "c",
            "--precisions", "fp32,int8", "--out", out, "--quiet")
    return out, r, json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_c_runtime_row(compared_c):
    """The C build is a row of its own (int8), streamed hop by hop and scored like the
    others (its PESQ-WB against TFLite-Micro's on 20 utterances: tests/test_export_c.py)."""
    out, r, res = compared_c
    assert_no_chatter(r.stdout, r.stderr)  # --quiet
    rows = {(x["runtime"], x["precision"]): x for x in res["rows"] if x["model"] == "qcgan-35k"}
    assert set(rows) == {("torch", "fp32"), ("c", "int8")}
    c = rows["c", "int8"]
    assert c["status"] == "ok", c["error"]
    assert c["counts"]["pesq_wb"] == 3 and abs(c["delta_pesq_wb"]) < 0.3  # int8, not broken
    assert c["artifact"].endswith("qsa_net.c") and (out / c["artifact"]).is_file()
    assert c["rtf"] > 0 and 0 < c["hop_ms_median"] <= c["hop_ms_p99"]
    assert "| qcgan-35k | c | int8 |" in (out / "results.md").read_text()


def test_c_runtime_needs_int8(pairs, tmp_path):
    r = qsa("compare", "qcgan-35k", "--data", f"synth:{pairs}", "--runtimes", "c",
            "--precisions", "fp32", "--out", tmp_path / "o", check=False)
    assert r.returncode == 2 and "'c' runs only int8" in r.stderr
    assert "Traceback" not in r.stderr
