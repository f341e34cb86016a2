"""qsa's own enhancers as peers: a shipped model (``qsa.load``) in fp32 and int8 on each
runtime ``qsa.export.runtimes`` offers, behind the same ``enhance`` interface.

* ``torch`` fp32: the offline ``forward(wave (1, N)) -> (1, N)`` of the dequantised model;
* ``torch`` int8: the packed-int8 reference, streamed step by step;
* ``onnx`` / ``executorch`` / ``litert`` / ``tflm``: the artifact ``qsa.export.export_model``
  writes (verified against PyTorch when it is made), streamed step by step.

The output delay of each entrant is measured once on espeak-ng speech (cross-correlation) and
removed like the peers' delays. Entrants that cannot be built come back as skip lines that the
report prints, never silently dropped.
"""

from __future__ import annotations

import contextlib
import importlib
from pathlib import Path

import numpy as np

from .base import Peer, fit_length, measure_delay

SR = 16000
RUNTIMES = ("torch", "onnx", "executorch", "litert", "tflm")


def _model_info(model) -> dict:
    """params, MAC/s, latency and delay the model states about itself (QC-GAN's properties
    and cost functions), with where each figure comes from."""
    cfg = getattr(model, "config", None)
    causal = bool(getattr(cfg, "causal", True))
    sr = int(getattr(cfg, "sample_rate", SR))
    info = {"causal": causal, "params": sum(p.numel() for p in model.parameters())}
    lat = getattr(model, "algorithmic_latency_samples", None)
    info["latency_ms"] = lat / sr * 1000 if causal and isinstance(lat, int) else None
    info["delay"] = getattr(model, "delay_samples", None)
    try:
        from qsa.models import qcgan

        fn = qcgan.streaming_macs_per_second if causal else qcgan.offline_macs_per_second
        info["macs"] = float(fn(model))
        info["macs_source"] = f"qsa.models.qcgan.{fn.__name__} (FlopCounterMode / 2)"
    except Exception:
        info.update(_macs_from_step(model))
    return info


class QsaEntrant(Peer):
    """One qsa model on one runtime at one precision."""

    native_sr = SR

    def __init__(
        self,
        name: str,
        runner,
        params: int,
        artifact_bytes: int,
        macs_per_second: float | None,
        latency_ms: float | None,
        sources: dict,
    ):
        self.name = name
        self._runner = runner
        self.params = int(params)
        self.artifact_bytes = int(artifact_bytes)
        self.macs_per_second = macs_per_second if macs_per_second is not None else float("nan")
        self.algorithmic_latency_ms = latency_ms
        self.sources = sources
        self.delay_samples = 0

    def _process(self, x: np.ndarray, sr: int) -> np.ndarray:
        return fit_length(np.asarray(self._runner(x), np.float32).reshape(-1), len(x))

    def calibrate_delay(self, speech: np.ndarray, max_lag: int = 1600) -> int:
        """Measure and store this entrant's output delay (samples at 16 kHz) on ``speech``."""
        self.delay_samples = 0
        y = self._process(np.pad(speech, (0, max_lag)), SR)
        self.delay_samples = max(0, measure_delay(speech, y, max_lag))
        return self.delay_samples


def _torch_forward(model):
    import torch

    def run(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return model(torch.from_numpy(np.ascontiguousarray(x))[None]).numpy()[0]

    return run


def _streamer(runtime):
    def run(x: np.ndarray) -> np.ndarray:
        hop = runtime.hop
        n = -(-len(x) // hop) * hop
        return runtime.run_utterance(np.pad(x, (0, n - len(x))))

    return run


def build_entrants(
    model_names,
    runtimes=("torch",),
    precisions=("fp32", "int8"),
    artifact_dir: str | Path = "bench/out/se_peers/artifacts",
    allow_untrained: bool = False,
    speech: np.ndarray | None = None,
):
    """(entrants, skip lines) for every model x runtime x precision that builds here."""
    entrants: list[QsaEntrant] = []
    skipped: list[str] = []
    try:
        import torch

        from qsa.hub import load, shipped_weights
    except ImportError as e:
        return [], [f"qsa models: skipped, cannot import qsa.hub ({e})"]
    torch.set_num_threads(1)
    with contextlib.suppress(ImportError):  # registers the QC-GAN presets if the registry
        importlib.import_module("qsa.models.qcgan")  # does not list the module yet
    for mname in model_names:
        try:
            model = load(mname, dequantize=True, allow_untrained=allow_untrained).eval()
        except Exception as e:  # not registered yet / no shipped weights
            skipped.append(f"{mname}: skipped, {type(e).__name__}: {e}")
            continue
        weights = Path(mname) if Path(mname).is_file() else shipped_weights(mname)
        packed_bytes = weights.stat().st_size if weights is not None else 0
        info = _model_info(model)
        trained = ("UNTRAINED preset (smoke test)" if weights is None
                   else f"packed file {mname}" if Path(mname).is_file() else "shipped weights")
        for rt in runtimes:
            for prec in precisions:
                label = f"{mname} {prec} ({rt})"
                if rt != "torch" and not info["causal"]:
                    skipped.append(
                        f"{label}: skipped, offline (non-causal) model: no streaming " "export"
                    )
                    continue
                try:
                    runner, nbytes, src, streaming = _runner(
                        mname, model, rt, prec, artifact_dir, packed_bytes, info["causal"]
                    )
                except Exception as e:
                    skipped.append(f"{label}: skipped, {type(e).__name__}: {e}"[:400])
                    continue
                e = QsaEntrant(
                    label,
                    runner,
                    info["params"],
                    nbytes,
                    info.get("macs"),
                    info["latency_ms"],
                    {
                        "weights": trained,
                        "params": "sum of the model's parameter tensors",
                        "macs_per_second": info.get("macs_source", "?"),
                        "algorithmic_latency_ms": "model.algorithmic_latency_samples (n_fft)"
                        if info["causal"]
                        else "offline: full-utterance look-ahead",
                        "artifact_bytes": src,
                    },
                )
                if streaming and isinstance(info["delay"], int):
                    e.delay_samples = info["delay"]  # declared by the model (n_fft - hop)
                elif streaming and speech is not None:
                    e.calibrate_delay(speech)
                entrants.append(e)
    return entrants, skipped


def _macs_from_step(model) -> dict:
    try:
        from qsa.export import as_step_module
        from qsa.export.report import macs_per_step

        step = as_step_module(model)
        macs = macs_per_step(step) * SR / step.hop
        return {
            "macs": float(macs),
            "macs_source": "torch flop counter on one streaming step x steps/s",
        }
    except Exception:
        return {}


def artifact_folder(mname) -> str:
    """The cache folder of a model: a packed file by its stem, a model name as it is
    ("qcgan-0.89m-causal" has no suffix: ``Path.stem`` would cut it to "qcgan-0", the folder
    of "qcgan-0.89m" too)."""
    p = Path(str(mname))
    return p.stem if p.is_file() else str(mname)


def _runner(mname, model, rt: str, prec: str, artifact_dir, packed_bytes: int, causal: bool):
    """(callable x -> y, artifact bytes, where the bytes come from, streams?)."""
    import copy

    if rt == "torch" and (prec == "fp32" or not causal):
        m = model
        if prec == "int8":  # offline model: the packed-int8 layers in the offline forward
            from qsa.quantize import Int8Config, quantize_

            m = quantize_(copy.deepcopy(model), Int8Config()).eval()
        return _torch_forward(m), packed_bytes, "packed .qsa file", False
    from qsa.export.runtimes import TorchRuntime, load_runtime

    if rt == "torch":  # causal int8: the packed-int8 reference, streamed hop by hop
        rt_obj = TorchRuntime(model, precision=prec)
        return _streamer(rt_obj), packed_bytes, "packed .qsa file", True
    from qsa.apps.compare import build_artifact

    # cached per model weights + config, export code, runtime and precision (the same cache
    # as `qsa compare`): new weights or an edited exporter never reuse an old artifact
    out = Path(artifact_dir) / artifact_folder(mname) / f"{rt}-{prec}"
    artifact, _, _, _ = build_artifact(model, str(mname), rt, prec, out)
    runtime = load_runtime(rt, artifact)
    return _streamer(runtime), artifact.stat().st_size, f"{artifact.name} from qsa.export", True
