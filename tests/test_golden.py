"""Golden metrics: the shipped models' PESQ-WB on fixed small subsets, within the golden
file's tolerance (0.02): 4 synthetic demo items and 4 real-voice test items (one per noise
category, rebuilt from (seed, "test", index) by qsa.data.real; written by
scripts/ship_weights.py)."""

import json
import sys
from functools import cache
from pathlib import Path

import pytest

import qsa
from qsa.data.real import NOISE_CATEGORIES, missing_packages, sample_item
from qsa.hub import shipped_weights

WEIGHTS = Path(qsa.__file__).parent / "weights"
SHIPPED = sorted(p.name[: -len(".golden.json")] for p in WEIGHTS.glob("*.golden.json"))
MISSING = missing_packages()
needs_packages = pytest.mark.skipif(
    bool(MISSING), reason=f"the real golden items need the Debian packages {MISSING} (speech "
    "and noise recordings; `make setup` installs them as root)")
RESHIP = "re-ship the model with scripts/ship_weights.py, which writes both golden sets"


def _ship_weights():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import ship_weights

    return ship_weights


def _golden(name: str) -> dict:
    return json.loads((WEIGHTS / f"{name}.golden.json").read_text())


@cache
def _real_items(seed: int, indices: tuple[int, ...]) -> list[dict]:
    return _ship_weights().real_golden_items(seed, indices)


def test_qcgan_35k_ships_with_golden_metrics():
    assert "qcgan-35k" in SHIPPED
    assert shipped_weights("qcgan-35k") is not None
    assert (WEIGHTS / "qcgan-35k.md").is_file()  # the model card


@pytest.mark.parametrize("name", SHIPPED)
def test_golden_file_holds_both_sets(name):
    golden = _golden(name)
    for key in ("pesq_wb_fp32", "pesq_wb_int8"):
        assert len(golden[key]) == golden["items"], (name, key)
    spec = golden.get("real_items")
    assert spec is not None, f"{name}.golden.json has no real-voice golden set; {RESHIP}"
    assert spec["split"] == "test"
    n = len(spec["indices"])
    assert n == len(spec["names"]) >= 4
    for key in ("real_pesq_wb_fp32", "real_pesq_wb_int8"):
        assert len(golden[key]) == n, (name, key)


@needs_packages
def test_real_golden_items_cover_every_noise_category_and_both_test_speakers():
    sw = _ship_weights()
    params = [sample_item(sw.REAL_GOLDEN_SEED, "test", i, 0.0) for i in sw.REAL_GOLDEN_INDICES]
    assert sorted(p["noise"]["category"] for p in params) == sorted(NOISE_CATEGORIES)
    assert {p["speaker"] for p in params} == {"june", "carlo"}
    for name in SHIPPED:  # every golden file uses the set ship_weights.py writes today
        spec = _golden(name)["real_items"]
        assert (spec["seed"], tuple(spec["indices"])) == (
            sw.REAL_GOLDEN_SEED, tuple(sw.REAL_GOLDEN_INDICES)), (name, RESHIP)
        assert spec["names"] == [p["name"] for p in params], (name, RESHIP)


@pytest.mark.slow
@pytest.mark.parametrize("name", SHIPPED)
def test_golden_pesq(name):
    golden_pesq = _ship_weights().golden_pesq
    golden = _golden(name)
    tol = golden["tolerance"]
    for precision, file in (("fp32", f"{name}.qsa"), ("int8", f"{name}.int8.qsa")):
        got = golden_pesq(qsa.load(WEIGHTS / file))
        want = golden[f"pesq_wb_{precision}"]
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert abs(g - w) <= tol, (name, precision, got, want)


@pytest.mark.slow
@needs_packages
@pytest.mark.parametrize("name", SHIPPED)
def test_golden_real_pesq(name):
    golden = _golden(name)
    spec = golden.get("real_items")
    assert spec is not None, f"{name}.golden.json has no real-voice golden set; {RESHIP}"
    items = _real_items(int(spec["seed"]), tuple(spec["indices"]))
    got_names = [it["name"] for it in items]
    assert got_names == spec["names"], (
        f"the real test items rebuilt as {got_names}, the golden file names {spec['names']}: "
        f"the corpus builder (qsa.data.real) changed; {RESHIP}")
    tol = golden["tolerance"]
    golden_real_pesq = _ship_weights().golden_real_pesq
    for precision, file in (("fp32", f"{name}.qsa"), ("int8", f"{name}.int8.qsa")):
        got = golden_real_pesq(qsa.load(WEIGHTS / file), items)
        want = golden[f"real_pesq_wb_{precision}"]
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert abs(g - w) <= tol, (name, precision, got_names, got, want)
