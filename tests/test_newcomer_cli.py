"""The bugs a newcomer's first hour found (issue 32), each run as the user ran it: the real
`qsa` command in a subprocess, on small files. Every test failed before its fix."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

QSA = [str(Path(sys.executable).with_name("qsa"))]
ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}


def qsa(*args, timeout=300):
    return subprocess.run(QSA + [str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout, env=ENV)


def tone(path: Path, sr: int = 16000, seconds: float = 0.3, **kw) -> Path:
    t = np.arange(int(sr * seconds)) / sr
    sf.write(path, (0.1 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), sr, **kw)
    return path


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") or
                  p.name.endswith(".tmp"))


def clean_error(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    for n in needles:
        assert n in r.stderr, (n, r.stderr)


# 1: 384 kHz into .ogg crashed libvorbis (exit 139) and left a hidden .tmp
def test_enhance_refuses_an_ogg_rate_vorbis_cannot_hold(tmp_path):
    src = tone(tmp_path / "in384k.wav", sr=384000, seconds=0.05, subtype="PCM_16")
    r = qsa("enhance", src, tmp_path / "out.ogg")
    clean_error(r, "384000 Hz", "192000", ".wav")
    assert not (tmp_path / "out.ogg").exists() and leftovers(tmp_path) == []


# 4, 9, 5, 13 in one process start each: bad numbers, a header rate of 1 Hz, a sequence
# model and foreign files given as --model
def test_enhance_bad_threads_is_a_clean_error(tmp_path):
    src = tone(tmp_path / "in.wav")
    clean_error(qsa("enhance", src, tmp_path / "o.wav", "--threads", "-1"), "--threads -1")
    assert not (tmp_path / "o.wav").exists()


def test_enhance_refuses_a_1_hz_header(tmp_path):
    src = tmp_path / "rate1hz.wav"
    sf.write(src, np.zeros(50, np.float32), 1, subtype="PCM_16", format="WAV")
    r = qsa("enhance", src, tmp_path / "o.wav")
    clean_error(r, str(src), "sample rate 1")
    assert not (tmp_path / "o.wav").exists() and leftovers(tmp_path) == []


def test_enhance_with_a_sequence_model_says_what_it_is(tmp_path):
    import qsa as q
    from qsa.models.registry import build_model, preset_config
    from qsa.quantize import save_packed

    packed = tmp_path / "qt.qsa"
    save_packed(build_model(preset_config("qtransformer-small")).eval(), packed)
    src = tone(tmp_path / "in.wav")
    r = qsa("enhance", src, tmp_path / "o.wav", "--model", packed)
    clean_error(r, "qtransformer", "not a speech-enhancement model", "qcgan-35k")
    with pytest.raises(q.QsaError, match="not a speech-enhancement model"):
        q.enhance(np.zeros(1600, np.float32), 16000, model=str(packed))


@pytest.mark.parametrize("what", ["tflite", "wav"])
def test_foreign_files_as_models_say_what_they_are(tmp_path, what):
    if what == "wav":
        f = tone(tmp_path / "speech.wav")
        needle = "WAV"
    else:  # a TFLite flatbuffer: 4 bytes of root offset, then the identifier
        f = tmp_path / "model.tflite"
        f.write_bytes(b"\x1c\x00\x00\x00TFL3" + bytes(64))
        needle = "TFLite"
    for args in (("inspect", f), ("enhance", tone(tmp_path / "in.wav"), tmp_path / "o.wav",
                                  "--model", f)):
        r = qsa(*args)
        clean_error(r, str(f), needle, "not a packed qsa model file")
        assert "header length" not in r.stderr
    import qsa as q

    with pytest.raises(q.QsaError, match=needle):
        q.load(f)


# 10: SIGTERM left the hidden partial output (SIGINT cleaned up)
def test_sigterm_during_enhance_leaves_no_partial_file(tmp_path):
    src = tone(tmp_path / "long.wav", seconds=120.0, subtype="PCM_16")
    out = tmp_path / "out"
    out.mkdir()
    p = subprocess.Popen(QSA + ["enhance", str(src), str(out / "o.wav"), "--threads", "1"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        deadline = time.monotonic() + 120
        while not any(out.iterdir()) and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.05)  # until the temporary output exists: mid-write
        assert p.poll() is None and any(out.iterdir()), "enhance never started writing"
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 128 + signal.SIGTERM, err
    assert list(out.iterdir()) == [], "a partial file stayed behind"


# 15 (enhance): .mp3 in a folder, a truncated WAV; and the folder carries on past a bad file
def test_enhance_folder_reads_mp3_says_truncated_and_carries_on(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    tone(src / "a.wav")
    tone(src / "b.mp3", format="MP3", subtype="MPEG_LAYER_III")
    full = tone(tmp_path / "full.wav", seconds=1.0, subtype="PCM_16")
    data = full.read_bytes()
    (src / "c_short.wav").write_bytes(data[: len(data) - 8000])  # header says 16000 samples
    (src / "d_bad.wav").write_bytes(b"RIFF" + b"\x00" * 40)  # unreadable
    (src / "notes.txt").write_text("not audio")
    dst = tmp_path / "out"
    r = qsa("enhance", src, dst, "--threads", "1")
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert sorted(p.name for p in dst.iterdir()) == ["a.wav", "b.wav", "c_short.wav"]
    assert "header says 16000 samples but the file holds 12000" in r.stderr
    assert "d_bad.wav" in r.stderr and "1 of 4 file(s) failed" in r.stderr
    assert "skipped 1 file(s)" in r.stderr and ".txt" in r.stderr
    assert r.stdout.count(" -> ") == 3  # one line per finished file, as it finishes
    assert "%" in r.stderr  # progress on stderr
    # resuming: the finished outputs are left alone, only the failure is tried again
    r2 = qsa("enhance", src, dst, "--threads", "1", "--skip-existing", "--quiet")
    assert r2.returncode == 1 and r2.stdout.count(" -> ") == 0
    assert "skipped 3 file(s) whose output exists" in r2.stderr


# 2 and 15 (live --record): the input overwritten; an existing file overwritten without
# --force; a missing folder not created. Checked before any audio device opens.
def test_live_record_never_overwrites_the_input_or_an_existing_file(tmp_path):
    src = tone(tmp_path / "same.wav")
    before = src.read_bytes()
    r = qsa("live", "--input-file", src, "--record", src, "--model", "passthrough")
    clean_error(r, "--record", "is the --input-file")
    assert src.read_bytes() == before
    other = tone(tmp_path / "other.wav", seconds=0.1)
    r = qsa("live", "--input-file", src, "--record", other, "--model", "passthrough")
    clean_error(r, str(other), "--force")
    assert src.read_bytes() == before


def test_live_record_creates_its_folder(tmp_path):
    from qsa.apps.live.engine import Recorder

    rec = Recorder(str(tmp_path / "new" / "deeper" / "rec.wav"), 16000, with_mic=False)
    rec.push(np.zeros(160, np.float32), np.zeros(160, np.float32))
    rec.close()
    assert sf.info(str(tmp_path / "new" / "deeper" / "rec.wav")).frames == 160


# 3: NaN samples in --input-file were played and recorded (enhance refuses the same file)
def test_live_refuses_nan_input_file(tmp_path):
    x = np.zeros(16000, np.float32)
    x[5000:5010] = np.nan
    src = tmp_path / "nan.wav"
    sf.write(src, x, 16000, subtype="FLOAT")
    out = tmp_path / "out.wav"
    r = qsa("live", "--input-file", src, "--record", out, "--model", "passthrough")
    clean_error(r, str(src), "NaN", "first at 5000")
    assert not out.exists()


# 14: a garbage .pte asked for hop= and state_shapes= (Python arguments)
def test_live_garbage_pte_is_named_as_such(tmp_path):
    f = tmp_path / "model.pte"
    f.write_bytes(b"garbage" * 40)
    r = qsa("live", "--model", f, "--input-file", tone(tmp_path / "in.wav"))
    clean_error(r, str(f), "not a valid executorch artifact")
    assert "hop=" not in r.stderr and "state_shapes=" not in r.stderr


# 15 (live -l): no audio device printed an empty line
def test_live_list_without_devices_says_so():
    code = ("import sounddevice as sd; from qsa.apps.live.engine import list_devices\n"
            "sd.query_devices = lambda: sd.DeviceList([])\n"
            "from qsa.errors import QsaError\n"
            "try:\n    print(list_devices())\nexcept QsaError as e:\n    print('ERR', e)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV,
                       timeout=60)
    assert r.stdout.startswith("ERR no audio devices"), (r.stdout, r.stderr)


# 11, 12: pack wrote an untrained model with only a Python warning; a folder output failed
def test_pack_refuses_untrained_without_the_flag_and_writes_into_a_folder(tmp_path):
    r = qsa("pack", "qtransformer-small", tmp_path / "f.qsa")
    clean_error(r, "qtransformer-small", "no shipped weights", "--untrained")
    assert not (tmp_path / "f.qsa").exists()
    r = qsa("pack", "qtransformer-small", tmp_path / "f.qsa", "--untrained")
    assert r.returncode == 0 and "untrained" in r.stderr and "Warning" not in r.stderr
    d = tmp_path / "dir"
    d.mkdir()
    r = qsa("pack", "qcgan-35k", d)
    assert r.returncode == 0, r.stderr
    assert (d / "qcgan-35k.qsa").is_file()
    clean_error(qsa("pack", "qcgan-35k", d), "qcgan-35k.qsa", "--force")


# 7, 15 (--split): argument errors before any work
@pytest.mark.parametrize("args, needle", [
    (["--runtimes", ","], "--runtimes names nothing"),
    (["--precisions", ","], "--precisions names nothing"),
    (["--split", "bogus"], "invalid choice: 'bogus'"),
])
def test_compare_rejects_empty_lists_and_unknown_splits(tmp_path, args, needle):
    r = qsa("compare", "qcgan-35k", "--data", f"synth:{tmp_path}", "--out", tmp_path / "o",
            *args)
    clean_error(r, needle)
    assert not (tmp_path / "o").exists()


# 8: every row failed, exit 0
@pytest.mark.slow
def test_compare_where_every_combination_fails_exits_1(tmp_path):
    pairs = tmp_path / "pairs"
    for sub in ("clean", "noisy"):
        (pairs / sub).mkdir(parents=True)
        tone(pairs / sub / "a.wav", seconds=1.0, subtype="PCM_16")
    r = qsa("compare", "qcgan-0.89m", "--runtimes", "torch", "--precisions", "fp32",
            "--data", pairs, "--out", tmp_path / "o", "--quiet", "--workers", "0")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "every combination failed" in r.stderr and "non-causal" in r.stdout


# 6: --json printed the converter's progress lines before the JSON
@pytest.mark.slow
def test_export_json_stdout_is_only_the_report(tmp_path):
    r = qsa("export", "qcgan-35k", "--target", "litert", "--precision", "fp32", "-o",
            tmp_path, "--json", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout)  # the whole of stdout
    assert report["verified"] and report["target"] == "litert"
    assert report == json.loads((tmp_path / "report.json").read_text())
    # third-party chatter is off by default (--verbose shows it)
    for chatter in ("_C_mxfp8", "Could not load this library", "absl", "W0000", "I0000"):
        assert chatter not in r.stderr, r.stderr[-3000:]


# qsa info says which models have shipped weights
def test_info_says_which_models_have_shipped_weights():
    from qsa.hub import shipped_weights

    r = qsa("info", "--json")
    assert r.returncode == 0, r.stderr
    models = {m["name"]: m for m in json.loads(r.stdout)["models"]}
    assert models["qcgan-35k"]["weights"] == "shipped"
    assert models["qtransformer-small"]["weights"] == "untrained"
    for name, m in models.items():
        assert (m["weights"] == "shipped") == (shipped_weights(name) is not None)
    table = qsa("info").stdout
    assert any(line.split()[:1] == ["qcgan-35k"] and line.rstrip().endswith("shipped")
               for line in table.splitlines())


# qsa info answered in 4.2 s: it built every preset to count parameters. It now reads a
# table and imports no torch; the table must stay equal to what the presets build.
def test_info_param_table_is_every_preset_as_built():
    from qsa.commands.info import PRESET_PARAMS
    from qsa.models.registry import build_model, preset_config, preset_names

    assert sorted(PRESET_PARAMS) == preset_names(), "add the new preset to PRESET_PARAMS"
    built = {n: sum(p.numel() for p in build_model(preset_config(n)).parameters())
             for n in preset_names()}
    assert built == PRESET_PARAMS


HEAVY = ("torch", "torchao", "executorch", "ai_edge_litert", "litert_torch", "onnx",
         "onnxruntime", "tflite_micro", "scipy", "matplotlib", "pesq", "pystoi")


def imported_by(*argv) -> tuple[set[str], subprocess.CompletedProcess]:
    """The heavy top-level packages that `qsa ARGV` imports (run in a fresh interpreter)."""
    code = ("import json, sys\nfrom qsa.cli import main\nrc = main(sys.argv[1:])\n"
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})), "
            "file=sys.stderr)\nsys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code, *map(str, argv)], capture_output=True,
                       text=True, timeout=300, env=ENV)
    assert r.returncode == 0, r.stderr
    return set(json.loads(r.stderr.splitlines()[-1])) & set(HEAVY), r


# start-up: a plain torch enhance loads torch, not the export stack or the metrics
def test_info_and_enhance_import_only_what_they_use(tmp_path):
    mods, r = imported_by("info", "--json")
    assert mods == set(), mods  # find_spec looks for the runtimes without importing them
    assert json.loads(r.stdout)["runtimes"]["torch"] is True
    src = tmp_path / "one.wav"
    sf.write(src, np.zeros(1, np.float32), 16000)
    mods, r = imported_by("enhance", src, tmp_path / "o.wav", "--quiet")
    assert mods == {"torch"}, mods
    assert sf.info(str(tmp_path / "o.wav")).frames == 1


# progress: per file and for the folder on stderr (with ETA), one stdout line per finished
# file and nothing else there, the 100% line once per file; --quiet: stderr empty
def test_enhance_progress_on_stderr_results_on_stdout(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for name in ("a.wav", "b.wav"):
        tone(src / name, seconds=21.0, subtype="PCM_16")  # 10 s chunks: 3 progress calls
    r = qsa("enhance", src, tmp_path / "out", "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"{src / n} -> {tmp_path / 'out' / n} (21.0 s)"
                                     for n in ("a.wav", "b.wav")]
    err = r.stderr.splitlines()
    assert any("a.wav:" in ln and "ETA" in ln and "folder [1/2]" in ln for ln in err), err
    assert [ln.split(":")[0].strip() for ln in err if "100.0%" in ln] == ["a.wav", "b.wav"]
    assert any("b.wav: 100.0%" in ln and "folder [2/2] 100%" in ln for ln in err), err
    r = qsa("enhance", src / "a.wav", tmp_path / "a.wav", "--quiet")
    assert r.returncode == 0 and r.stderr == "" and r.stdout.count("\n") == 1, r
