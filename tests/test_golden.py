"""Golden metrics: the shipped models' PESQ on a fixed small subset, within 0.02."""

import json
from pathlib import Path

import pytest

import qsa
from qsa.hub import shipped_weights

WEIGHTS = Path(qsa.__file__).parent / "weights"
SHIPPED = sorted(p.name[: -len(".golden.json")] for p in WEIGHTS.glob("*.golden.json"))


def test_qcgan_35k_ships_with_golden_metrics():
    assert "qcgan-35k" in SHIPPED
    assert shipped_weights("qcgan-35k") is not None
    assert (WEIGHTS / "qcgan-35k.md").is_file()  # the model card


@pytest.mark.slow
@pytest.mark.parametrize("name", SHIPPED)
def test_golden_pesq(name):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from ship_weights import golden_pesq

    golden = json.loads((WEIGHTS / f"{name}.golden.json").read_text())
    tol = golden["tolerance"]
    for precision, file in (("fp32", f"{name}.qsa"), ("int8", f"{name}.int8.qsa")):
        got = golden_pesq(qsa.load(WEIGHTS / file))
        want = golden[f"pesq_wb_{precision}"]
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert abs(g - w) <= tol, (name, precision, got, want)
