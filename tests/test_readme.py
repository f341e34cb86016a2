"""README.md runs as written: every command in its ```bash blocks and its ```python quick start.

Each shell command of a ```bash block (a line; ``\\`` continues it, ``#`` starts a comment) is
either run here, as written, in one shared temporary folder in README order (so `qsa data demo
demo_set` makes the files the later commands read), or listed below in EXCLUDED with the reason
it does not run in the suite (make demo runs it, it is the suite itself, it takes hours, it
needs a sound card), or in SMALLER: run here with a smaller size (e.g. `--hours 5` ->
`--hours 0.01`), the rest of the command as written. A README command in none of these that is
not a `qsa` command fails `test_every_readme_command_is_run_or_excused`, so a new command is
either run here or excused with its reason. The ```python blocks run afterwards in the same
folder; those with a PY_EXCLUDED text are only compiled. The commands depend on each other:
run the whole file, not one command alone.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BIN = Path(sys.executable).parent  # the venv's bin: `qsa` as the README calls it
MAX_LINES = 211  # issue 32: "at most ~200 lines"

# command (as it stands in the README, comments removed) -> why the suite does not run it
EXCLUDED = {
    "make demo": "the main job; it sets up and runs `qsa demo` (export, compare, enhance)",
    "make test": "the whole suite, this file included",
    "python3 -m venv .venv && source .venv/bin/activate": "the by-hand set-up `make setup` does",
    "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu":
        "network install; `make setup` installs torch==2.13.0",
    "pip install -e '.[audio]'": "`make setup` installs '.[all,dev]', a superset",
    "pip install -e '.[audio,tflm]'": "`make setup` installs '.[all,dev]', a superset",
    "pip install -e '.[audio,litert]'": "`make setup` installs '.[all,dev]', a superset",
    "pip install -e '.[audio,executorch]'": "`make setup` installs '.[all,dev]', a superset",
    "pip install -e '.[audio,onnx]'": "`make setup` installs '.[all,dev]', a superset",
    "pip install -e '.[all]'": "`make setup` installs '.[all,dev]', a superset",
    "qsa export qcgan-35k --target tflm --precision int8 -o export/tflm --profile cortex-m7":
        "an int8 export takes 1.5-3 min of CPU, over this file's ~60 s per command; make demo "
        "exports qcgan-35k int8 to tflm, litert and executorch, tests/test_export_cli.py runs "
        "`qsa export`, tests/test_export_qcgan_int8.py checks the tflm file and its bounds",
    "qsa compare qcgan-35k --data demo_set --runtimes torch,onnx --precisions int8 "
    "--out compare_demo":
        "exports and streams every row (minutes of CPU); make demo runs the same comparison "
        "(qsa.apps.compare) for its table, tests/test_compare.py runs `qsa compare`",
    "qsa live --precision int8":
        "needs a microphone and speaker; tests/test_live_audio.py runs `qsa live` through a "
        "PulseAudio loop-back (realtime tests)",
    "qsa live --input-file demo_set/noisy/demo01_pink_5dB.wav --record live.wav --duration 5":
        "needs an audio output device; tests/test_live_audio.py runs --input-file/--record "
        "through a PulseAudio null sink (realtime tests)",
    "qsa train qcgan-35k --data real:data/real --init qcgan-35k --out runs/my35k":
        "hours of training; tests/test_train_se.py trains, resumes and checkpoints for a few "
        "steps",
    "qsa eval runs/my35k --data real:data/real --dnsmos": "needs the training run above",
}

# command -> (text to replace, its replacement, why): run with a smaller size
SMALLER = {
    "qsa data real data/real --hours 5": (
        "--hours 5", "--hours 0.01", "5 hours take ~2.5 min of 2 cores; 0.01 h runs the same code"),
    "qsa data synth data/synth --hours 3 --seed 0": (
        "--hours 3", "--hours 0.01", "3 hours take ~80 s of 2 cores; 0.01 h runs the same code"),
}

# command -> (stderr text, why): where the machine lacks something, exit 2 with that message
# is the documented outcome (a clean error, no traceback), so it passes too
NO_DEVICE_OK = {
    "qsa live -l": ("no audio devices", "a machine without a sound card or audio server"),
}

# ```python blocks that hold this text are compiled, not run: why
PY_EXCLUDED = {
    "export_model(": "an int8 export takes 1.5-3 min of CPU; tests/test_export_targets.py runs "
    "export_model and load_runtime(...).step on every target",
}

# commands that read the real-voice corpus: skipped with it where its Debian packages are missing
NEEDS_REAL = "real:data/real"


def _blocks(lang: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    return re.findall(rf"^```{lang}\n(.*?)^```", text, flags=re.M | re.S)


def readme_commands() -> list[str]:
    """The shell commands of README.md's ```bash blocks, in order, without comments."""
    cmds = []
    for block in _blocks("bash"):
        block = re.sub(r"\\\n\s*", " ", block)  # continuation lines
        for line in block.splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line).strip()
            if line:
                cmds.append(re.sub(r"\s+", " ", line))
    return cmds


def python_blocks() -> list[str]:
    return _blocks("python")


def _plan(cmd: str) -> tuple[str, str | None]:
    """(what to run, None) or (cmd, reason it is not run)."""
    if cmd in EXCLUDED:
        return cmd, EXCLUDED[cmd]
    if cmd in SMALLER:
        old, new, _ = SMALLER[cmd]
        return cmd.replace(old, new), None
    return cmd, None


def test_every_readme_command_is_run_or_excused():
    cmds = readme_commands()
    assert cmds, "README.md has no ```bash block"
    assert cmds[:2] == ["make demo", "make test"], (
        f"README.md must start with `make demo` and `make test`, found {cmds[:2]}")
    unknown = [c for c in cmds if c not in EXCLUDED and c not in SMALLER
               and not c.startswith("qsa ")]
    assert not unknown, (
        f"README commands {unknown} are not `qsa` commands (run here) and not in EXCLUDED or "
        "SMALLER of tests/test_readme.py: add each with the reason it does not run here")
    stale = [c for c in [*EXCLUDED, *SMALLER, *NO_DEVICE_OK] if c not in cmds]
    assert not stale, f"tests/test_readme.py lists commands the README no longer has: {stale}"
    for cmd, (old, _, _) in SMALLER.items():
        assert old in cmd, f"SMALLER[{cmd!r}] replaces {old!r}, which is not in the command"


def test_readme_is_short_and_its_links_exist():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, (
        f"README.md has {len(lines)} lines (issue 32: ~200); dated notes go to docs/history.md")
    text = "\n".join(lines)
    assert "<!-- RESULTS:SE -->" in text and "<!-- /RESULTS:SE -->" in text
    for link in sorted(set(re.findall(r"\]\(([^)#]+)\)", text))):
        if "://" not in link:
            assert (ROOT / link).exists(), f"README.md links {link}, which does not exist"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("readme")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _missing_real_packages() -> list[str]:
    from qsa.data import real

    return real.missing_packages()


def _run(args, cwd: Path, what: str, ok_error: str | None = None) -> None:
    p = subprocess.run(args, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=540)
    if ok_error and p.returncode == 2 and ok_error in p.stderr and "Traceback" not in p.stderr:
        return
    assert p.returncode == 0, (
        f"README {what} exited {p.returncode}\n--- stdout\n{p.stdout[-3000:]}\n"
        f"--- stderr\n{p.stderr[-3000:]}")


_RUN = [(i, c) for i, c in enumerate(readme_commands()) if _plan(c)[1] is None]


@pytest.mark.slow
@pytest.mark.parametrize(("index", "cmd"), _RUN, ids=[f"{i:02d}-{c[:60]}" for i, c in _RUN])
def test_readme_command_runs_as_written(index, cmd, workdir):
    if NEEDS_REAL in cmd or cmd.startswith("qsa data real "):
        from syspkgs import require

        require(_missing_real_packages(), "Debian packages")
    run, _ = _plan(cmd)
    ok_error = NO_DEVICE_OK.get(cmd, (None, ""))[0]
    _run(["bash", "-c", f"set -eo pipefail; {run}"], workdir, f"command `{run}`", ok_error)


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_readme_python_runs(index, workdir):
    code = python_blocks()[index]
    compile(code, f"README.md python block {index}", "exec")
    if any(text in code for text in PY_EXCLUDED):
        return  # compiled above (names and syntax), not run: PY_EXCLUDED says why
    _run([sys.executable, "-c", code], workdir, f"python block {index}:\n{code}")
