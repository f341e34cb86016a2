"""bench/lm_compare.py end to end on a tiny corpus: sweep -> best LR -> final -> table with
the protocol's decision, resume from a checkpoint, and the decision rule itself."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "lm_compare.py"


def _module():
    spec = importlib.util.spec_from_file_location("lm_compare", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_decision_rule():
    v = _module().verdict
    assert v([0.01, 0.02]).startswith("incomplete")
    assert v([0.01, 0.03, 0.02]).startswith("within")
    assert v([0.20, 0.21, 0.19]).startswith("behind")
    assert v([0.01, 0.09, 0.05]).startswith("inconclusive")  # mean 0.05, wide interval


def test_sweep_final_render_on_a_tiny_corpus(tmp_path):
    d = tmp_path / "corpus"
    d.mkdir()
    for i in range(40):
        (d / f"doc{i:02d}.txt").write_text(f"document {i} says the phases couple. " * 30)
    out = tmp_path / "out"
    common = ["--data", f"folder:{d}", "--tokens", "4096", "--lrs", "0.003", "0.006",
              "--out", str(out)]
    run = [sys.executable, str(SCRIPT)]
    r = subprocess.run(run + ["final", "--seeds", "0", *common], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode != 0 and "sweep" in r.stderr  # no final before the sweep
    r = subprocess.run(run + ["sweep", *common], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(run + ["final", "--seeds", "0", *common], capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    base = out / f"folder_{str(d).replace('/', '_')}"
    finals = sorted(p.name for p in (base / "final").iterdir())
    assert len(finals) == 2 and finals[0].startswith("kuramoto-lr")
    res = json.loads((base / "final" / finals[0] / "result.json").read_text())
    assert res["val_slice"].startswith("val[0:") and res["test_slice"].startswith("test[0:")
    assert (base / "final" / finals[0] / "checkpoint" / "trainer.json").exists()
    md = (out / "compare.md").read_text()
    assert "### LR sweep" in md and "incomplete (1 of 3 seeds)" in md
    # a rerun skips every finished run
    r = subprocess.run(run + ["sweep", *common], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "step" not in r.stdout.replace("sweep ", ""), r.stdout


@pytest.mark.parametrize("arm", ["kuramoto", "kuramoto-lagged"])
def test_arms_are_the_presets(arm):
    from qsa.models.registry import preset_config

    cfg = _module().run_config(arm, "code", 3e-3, 0, 16_000_000)
    name = "lm-kuramoto-1m" + ("-lagged" if arm.endswith("lagged") else "")
    assert cfg.model_config() == preset_config(name)
    assert cfg.eval_every * cfg.batch * cfg.ctx == 999_424 and cfg.eval_bytes == 1_048_576
