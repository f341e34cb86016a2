"""Fuzz the exported-artifact loaders: 300 mutants (bit flips, byte overwrites, truncations,
splices within the file and from another format's file, header corruption) of a real .onnx,
.pte, .tflite (LiteRT) and int8 .tflite (TFLite-Micro) each, every one loaded with
``load_runtime`` and run one step in a worker subprocess (fuzzlib.fuzz_in_workers: a crash
or hang is recorded and the remaining cases go to a fresh worker).

* with the exporter's report.json next to the mutant (its sha256): every mutant is refused
  with ExportError before a native runtime sees it;
* without it: no signal, no hang, no foreign exception: a mutant is an ExportError, or it
  loads and runs giving finite output of the right shape (a flipped weight bit can be
  harmless; only the checksum can tell).

bench/fuzz_artifacts.py runs thousands of cases per format (``--cases``).
"""

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from fuzzlib import fuzz_in_workers

HOP, STATES = 64, [(1, 32, 2), (1, 32, 2)]  # the toy's streaming step (qsa.export.toy)
TFLM_ARENA = 64 << 10
# format -> (export target, precision, runtime kind, artifact name)
FORMATS = {
    "onnx": ("onnx", "fp32", "onnx", "model.onnx"),
    "pte": ("executorch", "fp32", "executorch", "model.pte"),
    "tflite-litert": ("litert", "fp32", "litert", "model.tflite"),
    "tflite-tflm": ("tflm", "int8", "tflm", "model.tflite"),
}
DONOR = {"onnx": "pte", "pte": "tflite-litert", "tflite-litert": "onnx", "tflite-tflm": "pte"}
CASES = 300


# -- loaders run in the fuzz workers (module-level, heavy imports inside) ------------------


def _preload(kind: str):
    def load():
        import qsa.export.runtimes  # noqa: F401

        if kind == "onnx":
            import onnx  # noqa: F401
            import onnxruntime  # noqa: F401
        elif kind == "executorch":
            import executorch.runtime  # noqa: F401
        elif kind == "litert":
            import ai_edge_litert.interpreter  # noqa: F401
        else:
            import tflite_micro.python.tflite_micro.runtime  # noqa: F401

    return load


def load_and_step(kind: str, path: str) -> str:
    """Load ``path`` with load_runtime and run one step: "loaded" (finite output of the
    toy's shapes), "badshape" or "nonfinite"; ExportError propagates."""
    from qsa.export import load_runtime

    kw = {}
    if kind == "executorch":
        kw = {"hop": HOP, "state_shapes": STATES}
    elif kind == "tflm":
        kw = {"arena_size": TFLM_ARENA}
    rt = load_runtime(kind, path, **kw)
    frame = np.sin(np.arange(rt.hop, dtype=np.float32) * 0.3) * 0.5
    y, state = rt.step(frame, rt.init_state())
    if y.shape != (1, HOP) or [tuple(s.shape) for s in state] != STATES:
        return "badshape"
    if not (np.isfinite(y).all() and all(np.isfinite(s).all() for s in state)):
        return "nonfinite"
    return "loaded"


def _loader(kind: str):
    def fn(path: str) -> str:
        return load_and_step(kind, path)

    fn.preload = _preload(kind)
    return fn


load_onnx = _loader("onnx")
load_executorch = _loader("executorch")
load_litert = _loader("litert")
load_tflm = _loader("tflm")


# -- artifacts -----------------------------------------------------------------------------


def export_artifacts(out: Path) -> dict[str, Path]:
    """The toy model exported to every format (fast: ~10 s each); format -> artifact."""
    import torch

    from qsa.export import export_model
    from qsa.export.calib import synthetic_speech
    from qsa.export.toy import ToyStep, ToyStreamingQNet

    logging.getLogger("torch.__trace").propagate = False
    calib = [synthetic_speech(0.6, seed=k) for k in range(2)]
    verify = synthetic_speech(0.5, seed=99)
    paths = {}
    for fmt, (target, precision, _, _) in FORMATS.items():
        torch.manual_seed(0)
        res = export_model(ToyStep(ToyStreamingQNet().eval()), target, precision, out / fmt,
                           calib=calib, verify_wave=verify, model_name="toy")
        paths[fmt] = res.artifact
    return paths


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    return export_artifacts(tmp_path_factory.mktemp("artifacts"))


def fuzz_format(fmt: str, paths: dict[str, Path], n: int, seed: int = 0, fork: bool = False):
    _, _, kind, name = FORMATS[fmt]
    art = paths[fmt]
    report = (art.parent / "report.json").read_bytes()
    assert json.loads(report)["sha256"]
    return fuzz_in_workers(
        f"test_fuzz_artifacts:load_{kind}",
        "qsa.export.errors:ExportError",
        art.read_bytes(),
        n,
        name,
        seed=seed,
        variants={"report": {"report.json": report}, "plain": {}},
        donor=paths[DONOR[fmt]].read_bytes(),
        fork=fork,
    )


def summary(outcomes) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (variant, outcome), c in sorted(outcomes.items()):
        out.setdefault(variant, {})[outcome] = c
    return out


def check_outcomes(outcomes, records, n: int) -> None:
    s = summary(outcomes)
    assert sum(s["report"].values()) == n and sum(s["plain"].values()) == n, s
    bad = [r for r in records if r["variant"] == "plain" and r["outcome"] not in
           ("error", "loaded")]
    assert not bad, (s, bad[:5])
    # with the report's sha256 every altered byte is refused before a runtime sees it
    assert s["report"] == {"error": n}, s


@pytest.mark.slow
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_fuzz_artifact(artifacts, fmt):
    _, _, kind, _ = FORMATS[fmt]
    kw = {"arena_size": TFLM_ARENA} if kind == "tflm" else {}
    from qsa.export import load_runtime

    load_runtime(kind, artifacts[fmt], **kw)  # the original loads (sha256 matches)
    outcomes, records = fuzz_format(fmt, artifacts, CASES, seed=0)
    check_outcomes(outcomes, records, CASES)
    # most mutants are caught by the structural checks alone, not just the checksum
    s = summary(outcomes)
    assert s["plain"].get("error", 0) >= CASES // 2, s


@pytest.mark.slow
def test_check_artifact_messages(artifacts, tmp_path):
    """Missing, empty, wrong-format and altered files: ExportError naming the file, what was
    expected and the fix; the report's sha256 is the artifact's."""
    from qsa.export import ExportError, load_runtime
    from qsa.export.validate import check_artifact, report_sha256, sha256_file

    for fmt, (_, _, kind, name) in FORMATS.items():
        art = artifacts[fmt]
        assert report_sha256(art) == sha256_file(art)
        with pytest.raises(ExportError, match=r"nope.*missing.*qsa export"):
            check_artifact(tmp_path / "nope", kind)
        empty = tmp_path / name
        empty.write_bytes(b"")
        with pytest.raises(ExportError, match=r"empty \(0 bytes\).*re-export"):
            load_runtime(kind, empty, **({"hop": HOP, "state_shapes": STATES}
                                         if kind == "executorch" else {}))
        other = artifacts[DONOR[fmt]].read_bytes()  # another format's bytes under this name
        empty.write_bytes(other)
        with pytest.raises(ExportError, match=rf"{name}: not a valid {kind} artifact"):
            check_artifact(empty, kind)
        # an altered copy next to the original report: refused by the checksum
        d = tmp_path / fmt
        d.mkdir()
        (d / "report.json").write_bytes((art.parent / "report.json").read_bytes())
        data = bytearray(art.read_bytes())
        data[len(data) // 2] ^= 1
        (d / name).write_bytes(bytes(data))
        with pytest.raises(ExportError, match=r"sha256 .* does not match .*report.json.*qsa "
                           "export"):
            load_runtime(kind, d / name, **({"hop": HOP, "state_shapes": STATES}
                                            if kind == "executorch" else {}))
