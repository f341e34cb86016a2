"""The small interface the live pipeline runs, and adapters onto models and runtimes.

A ``Processor`` turns one hop of mono input at ``sample_rate`` into one hop of output,
keeping its streaming state between calls: ``process_hop(in_hop (hop,), out_hop (hop,))``
writes into the caller's preallocated ``out_hop``. ``algorithmic_latency_samples`` counts the
hop of frame collection plus the model's own delay (look-ahead, filter delay): the streamed
output is the enhanced input delayed by ``algorithmic_latency_samples - hop`` samples, and
that is the delay bypass applies so that toggling it does not shift the sound.

``AttenLimited`` wraps any processor with the strength control (``--atten-lim``): the input,
delayed to line up with the output, mixed back in at ``10 ** (-DB / 20)``; the limit may
change while the stream runs (a ramp, no step in the output).

Adapters: ``TorchStepProcessor`` (any torch module with ``init_state(batch)`` and
``step(frame, *state)`` / ``step(frame, state)``, or a step module ``forward(frame, *state)``),
``RuntimeProcessor`` (a ``qsa.export.runtimes.Runtime``: torch / onnx / executorch / litert /
tflm), ``PassThrough``. ``load_processor(model, runtime, precision)`` builds one from CLI
arguments.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from qsa.errors import ConfigError, QsaError

MODEL_SR = 16000
RUNTIMES = ("torch", "onnx", "executorch", "litert", "tflm")
RUNTIME_CHOICES = ("auto", *RUNTIMES)  # auto: see auto_runtimes
PRECISIONS = ("fp32", "int8")
ARTIFACT_RUNTIME = {".onnx": "onnx", ".pte": "executorch", ".tflite": "litert"}
PASSTHROUGH_NAME = "passthrough"
REFERENCE_NAME = "reference-lowpass"


class Processor:
    """Base class: subclasses set hop / sample_rate / algorithmic_latency_samples / name."""

    hop: int = 128
    sample_rate: int = MODEL_SR
    algorithmic_latency_samples: int = 128
    name: str = "processor"

    @property
    def signal_delay_samples(self) -> int:
        """Delay of the streamed output relative to its input, in model samples."""
        return max(0, int(self.algorithmic_latency_samples) - int(self.hop))

    def reset(self) -> None:
        """Forget the streaming state (start of a new stream)."""

    def process_hop(self, in_hop: np.ndarray, out_hop: np.ndarray) -> None:
        raise NotImplementedError

    def process_offline(self, wave: np.ndarray) -> np.ndarray:
        """Stream ``wave`` (T,) hop by hop from a fresh state -> (T // hop * hop,)."""
        self.reset()
        wave = np.asarray(wave, np.float32).reshape(-1)
        n = len(wave) // self.hop
        out = np.zeros(n * self.hop, np.float32)
        for t in range(n):
            s = slice(t * self.hop, (t + 1) * self.hop)
            self.process_hop(wave[s], out[s])
        self.reset()
        return out


class PassThrough(Processor):
    """Identity with a hop of framing: for latency checks and as a bypass reference."""

    def __init__(self, hop: int = 128, sample_rate: int = MODEL_SR):
        self.hop = int(hop)
        self.sample_rate = int(sample_rate)
        self.algorithmic_latency_samples = self.hop
        self.name = PASSTHROUGH_NAME

    def process_hop(self, in_hop, out_hop):
        out_hop[:] = in_hop


class AttenLimited(Processor):
    """``inner`` with the output mixed with its input: ``out = (1 - g) * enhanced + g * x``,
    ``x`` the input delayed by ``inner.signal_delay_samples`` (so it lines up with the
    enhanced hop) and ``g = 10 ** (-atten_lim_db / 20)`` (0 with no limit): the model removes
    at most ``atten_lim_db`` from any part of the signal, and 0 dB is the delayed input.

    ``atten_lim_db`` may be set while streaming (the terminal view's up / down keys): ``g``
    then moves linearly, sample by sample, at most from 0 to 1 in ``ramp_ms``, so a change
    is a short cross-fade between two time-aligned signals, never a step. ``process_hop``
    works in preallocated buffers."""

    def __init__(self, inner: Processor, atten_lim_db: float | None = None,
                 ramp_ms: float = 20.0):
        from qsa.enhancement import atten_lim_gain, check_atten_lim

        self._check, self._gain = check_atten_lim, atten_lim_gain
        self.inner = inner
        self.hop = int(inner.hop)
        self.sample_rate = int(inner.sample_rate)
        self.algorithmic_latency_samples = int(inner.algorithmic_latency_samples)
        self.name = inner.name
        d = inner.signal_delay_samples
        self._line = np.zeros(d + self.hop, np.float32)  # input delay line, newest hop last
        self._unit = (np.arange(1, self.hop + 1) / self.hop).astype(np.float32)  # (hop,)
        self._g_hop = np.zeros(self.hop, np.float32)  # the per-sample gain of this hop
        self._dry = np.zeros(self.hop, np.float32)  # g x of this hop
        self._max_step = min(1.0, self.hop / max(1e-3 * ramp_ms * self.sample_rate, 1.0))
        self.atten_lim_db = atten_lim_db
        self._g = self._target  # no ramp at the start

    @property
    def atten_lim_db(self) -> float | None:
        return self._atten_lim_db

    @atten_lim_db.setter
    def atten_lim_db(self, value) -> None:
        db = self._check(value, "--atten-lim")
        self._atten_lim_db = db
        self._target = self._gain(db)  # read by the worker at its next hop

    def reset(self) -> None:
        self.inner.reset()
        self._line[:] = 0.0
        self._g = self._target

    def process_hop(self, in_hop, out_hop):
        self.inner.process_hop(in_hop, out_hop)
        hop, line = self.hop, self._line
        d = len(line) - hop
        line[d:] = in_hop
        g0 = self._g
        g1 = g0 + min(max(self._target - g0, -self._max_step), self._max_step)
        if g0 != 0.0 or g1 != 0.0:
            g = self._g_hop
            np.multiply(self._unit, np.float32(g1 - g0), out=g)
            g += np.float32(g0)  # g0 -> g1 over the hop
            np.multiply(line[:hop], g, out=self._dry)
            np.subtract(np.float32(1.0), g, out=g)
            out_hop *= g
            out_hop += self._dry  # (1 - g) out + g x: exactly x at g = 1
        self._g = g1
        if d:
            line[:d] = line[hop:]


def _int_attr(objs, names) -> int | None:
    for obj in objs:
        if obj is None:
            continue
        for name in names:
            v = getattr(obj, name, None)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
    return None


class TorchStepProcessor(Processor):
    """Any streaming torch module: ``init_state(batch)`` plus ``step(frame, *state)`` (or
    ``step(frame, state)``, or ``forward(frame, *state)`` on a step module), batch 1.

    ``precision="int8"`` quantises the quaternion layers with ``qsa.quantize`` (a copy).
    Frames go in through a preallocated buffer (the worker thread, not the audio callback,
    runs this).
    """

    def __init__(self, module, precision: str = "fp32", name: str | None = None):
        import torch

        if precision not in PRECISIONS:
            raise ConfigError(f"precision={precision!r}; expected one of {PRECISIONS}")
        if not callable(getattr(module, "init_state", None)):
            raise ConfigError(
                f"{type(module).__name__} is not a streaming model: it needs init_state(batch) "
                "and step(frame, *state) -> (out, *state); pick a causal model (e.g. qcgan-35k)"
            )
        if precision == "int8":
            import copy

            from qsa.quantize import Int8Config, int8_layers, quantize_

            if not int8_layers(module):
                module = quantize_(copy.deepcopy(module), Int8Config())
        from qsa.layers import dense_inference_copy

        self._torch = torch
        # eager one-frame steps: the dense path with its weight expanded once (2x faster per
        # hop for qcgan-35k than the packed path's per-call recombination); a copy, so the
        # caller's module keeps its path
        self.module = dense_inference_copy(module).eval()
        self.precision = precision
        cfg = getattr(module, "config", None)
        hop = _int_attr((module, cfg), ("hop", "hop_length", "hop_size", "frame_size"))
        if hop is None:
            raise ConfigError(
                f"{type(module).__name__} has no integer `hop` (samples per streaming step)"
            )
        self.hop = hop
        self.sample_rate = _int_attr((module, cfg), ("sample_rate", "sr")) or MODEL_SR
        lat = _int_attr(
            (module, cfg), ("algorithmic_latency_samples", "latency_samples", "latency")
        )
        self.algorithmic_latency_samples = lat if lat is not None else hop
        self.name = name or type(module).__name__
        step = getattr(self.module, "step", None)
        self._fn = step if callable(step) else self.module
        self._in = np.zeros((1, hop), np.float32)  # (1, hop), shared with self._in_t
        self._in_t = torch.from_numpy(self._in)
        # step(frame, *state) spreads the state; step(frame, state) takes it as one tuple.
        self._tuple_state = False
        try:
            self.reset()
            with torch.inference_mode():
                try:
                    self._call(self._in_t, self.state)
                except TypeError:
                    self._tuple_state = True
                    self._call(self._in_t, self.state)
        except Exception as e:  # a model that cannot stream: say which and why
            raise ConfigError(
                f"{self.name} ({precision}) cannot run its streaming step on a zero frame of "
                f"{hop} samples: {type(e).__name__}: {e}"
            ) from e

    def reset(self) -> None:
        with self._torch.inference_mode():
            self.state = tuple(self.module.init_state(1))

    def _call(self, frame, state):
        if self._tuple_state:
            out = self._fn(frame, state)
        else:
            out = self._fn(frame, *state)
        if len(out) == 2 and isinstance(out[1], tuple | list):
            return out[0], tuple(out[1])
        return out[0], tuple(out[1:])

    def process_hop(self, in_hop, out_hop):
        self._in[0] = in_hop
        with self._torch.inference_mode():
            # a copy: a model may keep the frame itself in its state (e.g. a frame cache)
            y, self.state = self._call(self._in_t.clone(), self.state)
        out_hop[:] = y.reshape(-1).numpy()


class RuntimeProcessor(Processor):
    """A ``qsa.export.runtimes.Runtime`` (numpy ``step(frame (1, hop), state)``)."""

    def __init__(
        self,
        runtime,
        name: str | None = None,
        algorithmic_latency_samples: int | None = None,
        sample_rate: int = MODEL_SR,
    ):
        self.runtime = runtime
        self.hop = int(runtime.hop)
        self.sample_rate = int(sample_rate)
        self.algorithmic_latency_samples = int(algorithmic_latency_samples or self.hop)
        self.name = name or f"{getattr(runtime, 'kind', 'runtime')} runtime"
        self._in = np.zeros((1, self.hop), np.float32)  # (1, hop)
        self.reset()

    def reset(self) -> None:
        self.state = self.runtime.init_state()

    def process_hop(self, in_hop, out_hop):
        self._in[0] = in_hop
        y, self.state = self.runtime.step(self._in, self.state)
        out_hop[:] = np.asarray(y).reshape(-1)


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "qsa" / "live"


def _model_key(model: str, module) -> str:
    """Cache key of an export from the built module: the model's name plus a hash of what
    determines the artifact, the weights and config (the module's state), the qsa version and
    the source of the code that builds the graph. For models that no single file determines
    (a preset without shipped weights); the others use :func:`_file_key`, which needs no
    torch."""
    import qsa
    from qsa.export.codedigest import graph_code_digest

    h = hashlib.sha256(qsa.__version__.encode())
    h.update(graph_code_digest().encode())
    cfg = getattr(module, "config", None)
    h.update(repr(cfg).encode())
    for k, v in module.state_dict().items():
        h.update(k.encode())
        h.update(v.detach().cpu().contiguous().numpy().tobytes())
    return f"{_stem(model)}-{h.hexdigest()[:12]}"


def _stem(model: str) -> str:
    return Path(model).stem if Path(model).is_file() else model.replace("/", "_")


def _model_file(model: str) -> Path | None:
    """The one file that determines ``model`` as ``qsa.load`` builds it (weights and config
    both), found without loading it: a model file or a run folder's checkpoint, a shipped
    model's packed weights, the reference model's source; None when no file does (an
    untrained preset, a missing path: the module is built, and the error is ``qsa.load``'s)."""
    if model == REFERENCE_NAME:
        return Path(__file__).with_name("reference.py")  # the weights are computed in code
    p = Path(model)
    if p.is_dir():  # a `qsa train` run folder: qsa.load builds its checkpoint's generator
        p = p / "checkpoint.safetensors"
        return p if p.is_file() else None
    if p.is_file():
        return p
    from qsa.hub import shipped_weights

    return shipped_weights(model)


def _loader_sources() -> list[Path]:
    """Code that turns a model file into a module besides the graph packages (those are in
    ``graph_code_digest``): qsa.load's dispatch, the safe file reader, configs, checkpoints."""
    import qsa

    root = Path(qsa.__file__).parent
    return [root / "hub.py", root / "safefile.py", root / "config.py",
            root / "train" / "checkpoint.py", Path(__file__)]  # fmt: skip


def _file_key(model: str, source: Path, runtime: str, precision: str) -> str:
    """Cache key of an export from the bytes of the file that determines the model (see
    :func:`_model_file`), the qsa version, the source of the code that builds the graph and
    loads the model, and the export options: computed without torch, so a warm cache starts
    ``qsa live`` without it. Other weights (a retrained or new shipped file) are another
    key, never an artifact of the old ones."""
    import qsa
    from qsa.export.codedigest import graph_code_digest

    h = hashlib.sha256(b"qsa live export cache 2\0")
    h.update(qsa.__version__.encode() + b"\0")
    h.update(graph_code_digest().encode())
    for f in _loader_sources():
        h.update(f.name.encode() + b"\0")
        h.update(f.read_bytes() if f.is_file() else b"")
    h.update(f"\0{model}\0{runtime}\0{precision}\0".encode())
    h.update(source.read_bytes())
    return f"{_stem(model)}-{h.hexdigest()[:12]}"


def _load_module(model: str):
    if model == PASSTHROUGH_NAME:
        return None
    if model == REFERENCE_NAME:
        from .reference import QuaternionLowpass

        return QuaternionLowpass()
    import qsa

    return qsa.load(model, dequantize=False)


CACHE_INFO = "live.json"  # next to a cached artifact: what the live app needs without torch


def _cached(out_dir: Path) -> tuple[Path, int, dict] | None:
    """(artifact, algorithmic latency, live.json) of a complete cached export in ``out_dir``,
    else None. ``live.json`` is written after the export succeeded, so its presence means
    complete."""
    import json

    try:
        info = json.loads((out_dir / CACHE_INFO).read_text())
        artifact, lat = out_dir / info["artifact"], info["algorithmic_latency_samples"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if artifact.parent != out_dir or not artifact.is_file():
        return None
    if not isinstance(lat, int) or isinstance(lat, bool) or lat <= 0:
        return None
    return artifact, lat, info


def _write_info(out_dir: Path, info: dict) -> None:
    import json

    from qsa.fileio import atomic_write_text

    atomic_write_text(out_dir / CACHE_INFO, json.dumps(info) + "\n")


def _completed_info(info: dict, artifact: Path, rt) -> dict:
    """``info`` with what a torch-free warm start needs from a runtime that loaded through
    the full path (``load_runtime``: every check, the torch host DSP): the sha256 of the
    artifact's checked bytes (a warm start compares it instead of re-running the structural
    check) and the numbers of its host DSP (``warm.spec_of``; None: not a split artifact,
    or a DSP the numpy one does not reproduce)."""
    from qsa.export.validate import sha256_file

    from .warm import spec_of

    out = dict(info, sha256=sha256_file(artifact))
    spec = spec_of(rt)
    if spec is not None:
        out["host_dsp"] = spec
    return out


def _is_split(artifact: Path) -> bool:
    """The exporter's report.json next to ``artifact`` marks a DSP / network split."""
    import json

    try:
        r = json.loads(artifact.with_name("report.json").read_text())
        return bool(r.get("io", {}).get("split"))
    except (OSError, ValueError, AttributeError):
        return False


def _load_cached(kind: str, artifact: Path, info: dict):
    """The runtime of a complete cache entry without torch, or None when this entry needs
    the full path (a split artifact whose live.json has no host DSP spec: an entry written
    before the spec existed). The artifact's bytes must match the sha256 recorded when they
    passed the full check (else ExportError: the caller exports again); ONNX then skips its
    structural check (``onnx.checker``: 0.8 s of CPU, mostly importing ``onnx``), the
    TFLite kinds still run theirs (pure Python, ~0.1 s of CPU for qcgan-35k)."""
    from qsa.export.runtimes import load_runtime

    sha = info.get("sha256")
    spec = info.get("host_dsp")
    split = _is_split(artifact)
    if not isinstance(sha, str) or (split and not isinstance(spec, dict)):
        return None
    if kind == "onnx":
        from .warm import VerifiedOnnxRuntime

        net = VerifiedOnnxRuntime(artifact, sha)
    else:
        net = load_runtime(kind, artifact, host_dsp=False, expected_sha256=sha)
    if not split:
        return net
    from .warm import HostSplitRuntime

    return HostSplitRuntime(net, spec)


def load_processor(
    model: str,
    runtime: str = "torch",
    precision: str = "fp32",
    cache_dir: str | os.PathLike | None = None,
) -> Processor:
    """A processor for ``model`` (a shipped name, a preset, a ``.qsa`` file, an exported
    artifact ``.onnx`` / ``.pte`` / ``.tflite``, ``reference-lowpass`` or ``passthrough``)
    on ``runtime`` at ``precision``; ``runtime="auto"`` (``qsa live``'s default) picks one,
    see :func:`auto_runtimes`. Non-torch runtimes export the model once into a cache
    (``$XDG_CACHE_HOME/qsa/live``) with ``qsa.export.export_model`` and reuse it. The cache
    key hashes the model's file (:func:`_file_key`), so a cached export loads without
    building the torch model, and an ONNX / LiteRT / TFLM one (fp32 or int8: the int8 host
    DSP runs in numpy from numbers the entry records, see ``qsa.apps.live.warm``) without
    importing torch at all (ExecuTorch loads torch itself); torch loads when the cache
    misses."""
    if runtime not in RUNTIME_CHOICES:
        raise ConfigError(f"--runtime {runtime!r}; expected one of {', '.join(RUNTIME_CHOICES)}")
    if precision not in PRECISIONS:
        raise ConfigError(f"--precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
    suffix = Path(model).suffix.lower()
    if suffix in ARTIFACT_RUNTIME:
        if not Path(model).is_file():
            raise ConfigError(f"--model {model}: no such file")
        kind = runtime if runtime not in ("torch", "auto") else ARTIFACT_RUNTIME[suffix]
        if suffix == ".tflite" and kind not in ("litert", "tflm"):
            raise ConfigError(f"{model} is a TFLite model: use --runtime litert or tflm")
        _check_artifact_file(Path(model), kind)
        return _runtime_processor(kind, Path(model), Path(model).name, _artifact_latency(model))
    if model == PASSTHROUGH_NAME:
        return PassThrough()
    if runtime == "auto":
        return _load_auto(model, precision, cache_dir)
    if runtime == "torch":
        return TorchStepProcessor(_load_module(model), precision=precision, name=model)
    return _load_exported(model, runtime, precision, cache_dir)


AUTO_ORDER = ("litert", "onnx")  # then torch
_RUNTIME_LIBRARY = {"litert": "ai_edge_litert.interpreter", "onnx": "onnxruntime"}


def auto_runtimes(model: str) -> list[str]:
    """The runtimes ``--runtime auto`` tries for ``model``, in order: LiteRT when
    ``ai_edge_litert`` imports, else ONNX when ``onnxruntime`` does, then torch. The
    exported runtimes run a hop in a fraction of eager torch's time and, from the second
    start on (the export is cached), start without importing torch (docs/live.md). The
    reference low-pass stays on torch: it is the closed-form check of the audio path, which
    tests compare sample by sample with its torch form."""
    if model == REFERENCE_NAME:
        return ["torch"]
    import importlib

    out = []
    for kind in AUTO_ORDER:
        try:
            importlib.import_module(_RUNTIME_LIBRARY[kind])
        except ImportError:
            continue
        out.append(kind)
    return [*out, "torch"]


def _load_auto(model: str, precision: str, cache_dir) -> Processor:
    """The first of :func:`auto_runtimes` that loads; an export or runtime failure
    (ExportError) moves on to the next, with a line on stderr saying why."""
    import sys

    from qsa.export.errors import ExportError

    kinds = auto_runtimes(model)
    for kind in kinds[:-1]:
        try:
            return _load_exported(model, kind, precision, cache_dir)
        except (ExportError, ImportError) as e:
            print(f"qsa live: --runtime auto: {kind} failed ({e}); trying "
                  f"{kinds[kinds.index(kind) + 1]}", file=sys.stderr)  # fmt: skip
    return TorchStepProcessor(_load_module(model), precision=precision, name=model)


def _load_exported(model: str, runtime: str, precision: str, cache_dir) -> Processor:
    """``model`` exported to ``runtime`` (onnx / executorch / litert / tflm): from the cache,
    exported into it on a miss."""
    from qsa.export.errors import ExportError

    name = f"{model} ({runtime} {precision})"
    root = Path(cache_dir or _cache_root())
    source = _model_file(model)
    module = None
    if source is not None:
        out_dir = root / f"{_file_key(model, source, runtime, precision)}-{runtime}-{precision}"
        hit = _cached(out_dir)
        if hit is not None:  # a warm cache: no torch model
            try:
                return _entry_processor(runtime, out_dir, hit, name)
            except ExportError:  # a damaged entry (its checks refused it): export again
                (out_dir / CACHE_INFO).unlink(missing_ok=True)
        module = _load_module(model)
    else:
        module = _load_module(model)
        out_dir = root / f"{_model_key(model, module)}-{runtime}-{precision}"
    try:
        from qsa.export import export_model
        from qsa.export.exporters import ARTIFACT_NAMES
    except ImportError as e:
        raise ExportError(f"--runtime {runtime} needs the qsa.export stack ({e})") from None
    hit = _cached(out_dir)
    if hit is not None:  # exported meanwhile (another start), or a preset's entry
        try:
            return _entry_processor(runtime, out_dir, hit, name)
        except ExportError:
            (out_dir / CACHE_INFO).unlink(missing_ok=True)
    import sys

    artifact = out_dir / ARTIFACT_NAMES[runtime]
    lat = TorchStepProcessor(module).algorithmic_latency_samples
    print(f"qsa live: exporting {model} to {runtime} {precision} (once: later starts load it "
          f"from {root})", file=sys.stderr)  # fmt: skip
    export_model(module, runtime, precision, out_dir=out_dir, model_name=model, force=True)
    rt = _load_runtime(runtime, artifact)
    info = {"model": model, "artifact": artifact.name, "algorithmic_latency_samples": lat}
    _write_info(out_dir, _completed_info(info, artifact, rt))  # last: the entry is complete
    return RuntimeProcessor(rt, name=name, algorithmic_latency_samples=lat)


def _entry_processor(runtime: str, out_dir: Path, hit, name: str) -> Processor:
    """A complete cache entry's processor: torch-free (``_load_cached``), or, for an entry
    written before its live.json recorded the sha256 and host DSP, through the full path,
    after which they are recorded (the next start is torch-free)."""
    artifact, lat, info = hit
    rt = _load_cached(runtime, artifact, info)
    if rt is None:
        rt = _load_runtime(runtime, artifact)
        done = _completed_info(info, artifact, rt)
        if done != info:  # (a split whose DSP has no numpy twin: stays on this path)
            _write_info(out_dir, done)
    return RuntimeProcessor(rt, name=name, algorithmic_latency_samples=lat)


def _check_artifact_file(path: Path, kind: str) -> None:
    """A clear error before a native runtime sees ``path``: not a sound artifact of its kind
    (qsa.export.validate), or a .pte without the report.json its inputs' shapes come from."""
    from qsa.export.validate import check_artifact, report_sha256

    check_artifact(path, kind, report_sha256(path))
    if kind == "executorch" and not path.with_name("report.json").is_file():
        raise ConfigError(
            f"--model {path}: an ExecuTorch .pte does not record its input shapes (hop, "
            "state); qsa reads them from the report.json that `qsa export` writes next to "
            f"it, and {path.with_name('report.json')} is missing: copy the whole export "
            "folder, or re-export with `qsa export MODEL --target executorch -o DIR`"
        )


def _artifact_latency(artifact: str) -> int | None:
    """Algorithmic latency of an exported artifact, from the exporter's report.json next to
    it (its own figure, or the named preset's); None when unknown (then: one hop)."""
    import json

    report = Path(artifact).with_name("report.json")
    try:
        r = json.loads(report.read_text())
        if isinstance(r.get("algorithmic_latency_samples"), int):
            return r["algorithmic_latency_samples"]
        from qsa.models.registry import build_model, preset_config, preset_names

        if r.get("model") in preset_names():
            m = build_model(preset_config(r["model"]))
            return int(getattr(m, "algorithmic_latency_samples", 0)) or None
    except (OSError, ValueError, QsaError, TypeError, AttributeError):
        pass
    return None


def _load_runtime(kind: str, artifact: Path):
    """``load_runtime`` with every check (and the torch host DSP of a split artifact)."""
    from qsa.export.errors import ExportError
    from qsa.export.runtimes import load_runtime

    try:
        return load_runtime(kind, artifact)
    except QsaError:
        raise
    except Exception as e:  # runtime libraries raise their own types
        raise ExportError(f"could not load {artifact} on {kind}: {e}") from None


def _runtime_processor(kind: str, artifact: Path, name: str, latency: int | None = None):
    rt = _load_runtime(kind, artifact)
    return RuntimeProcessor(rt, name=name, algorithmic_latency_samples=latency)
