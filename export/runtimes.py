"""One interface over every place a streaming model runs.

``load_runtime(kind, artifact)`` returns a ``Runtime`` with numpy in/out:

* ``init_state()`` -> list of float32 arrays (zeros, the shapes of the step's state inputs);
* ``step(frame (1, hop), state) -> (out (1, hop), new_state)``;
* ``run_utterance(wave (T,)) -> (T // hop * hop,)``, streaming frame by frame.

kinds: ``torch`` (a step module, or a packed ``.qsa`` file: eager fp32, or the packed-int8
reference with ``precision="int8"``), ``onnx`` (onnxruntime), ``executorch`` (``.pte``,
XNNPACK delegate, ``executorch.runtime``), ``litert`` (``ai_edge_litert`` interpreter),
``tflm`` (``tflite_micro`` interpreter; ``arena_size`` bytes). Full-int8 TFLite models take and
give int8 tensors; the runtime quantises inputs and dequantises outputs with the tensors' own
scale/zero point, so callers always see float32.

``load_runtime(..., atten_lim_db=DB)`` (or ``AttenLimitedRuntime(runtime, DB, delay)``) adds the
strength control of ``qsa enhance --atten-lim`` to any runtime, on the host around the graph:
``out = (1 - g) * y + g * x[n - delay]``, ``g = 10 ** (-DB / 20)``, with the ``delay``-sample
input delay line as one more state tensor, so a device build runs the same two multiply-adds
per sample (the exported graph is unchanged).

Every file-based runtime first runs ``qsa.export.validate.check_artifact`` on the file (magic,
size, structure; and the sha256 that the exporter's report.json next to it records, when there
is one) and hands the native runtime the checked bytes, so a truncated or altered artifact is
an ``ExportError``, never a crash in native code. A step whose outputs have the wrong shape, or
are NaN/Inf for finite inputs, is an ``ExportError`` too.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .errors import ExportError
from .validate import check_artifact, report_sha256

KINDS = ("torch", "onnx", "executorch", "litert", "tflm")


class Runtime:
    """Base: subclasses implement ``_run(inputs: list[np.ndarray]) -> list[np.ndarray]``."""

    kind = "base"

    source = "model"

    def __init__(self, hop: int, state_shapes: list[tuple[int, ...]]):
        self.hop = int(hop)
        self.state_shapes = [tuple(int(d) for d in s) for s in state_shapes]
        if self.hop <= 0 or any(d < 0 for s in self.state_shapes for d in s):
            raise ExportError(
                f"{self.kind} runtime for {self.source}: input shapes hop={self.hop}, states "
                f"{self.state_shapes} are not a streaming step's; re-export the model"
            )

    def init_state(self) -> list[np.ndarray]:
        return [np.zeros(s, np.float32) for s in self.state_shapes]

    def _run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError

    def step(self, frame: np.ndarray, state: list[np.ndarray]):
        frame = np.ascontiguousarray(np.asarray(frame, np.float32).reshape(1, self.hop))
        if len(state) != len(self.state_shapes):
            raise ExportError(
                f"{self.kind} runtime: got {len(state)} state tensors, the model has "
                f"{len(self.state_shapes)}; start from runtime.init_state()"
            )
        ins = [frame] + [np.ascontiguousarray(np.asarray(s, np.float32)) for s in state]
        try:
            outs = self._run(ins)
        except ExportError:
            raise
        except Exception as e:  # the native runtime refused to run the graph
            msg = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            raise ExportError(
                f"{self.kind} runtime failed to run a step of {self.source}: {msg}; if the "
                "artifact was copied or edited, re-export it with `qsa export`"
            ) from None
        want = [(1, self.hop), *self.state_shapes]
        got = [tuple(np.shape(o)) for o in outs]
        if len(outs) != len(want) or any(
            int(np.prod(g)) != int(np.prod(w)) for g, w in zip(got, want, strict=True)
        ):
            raise ExportError(
                f"{self.kind} runtime: {self.source} returned outputs of shapes {got}, "
                f"expected {want} (frame, new state); re-export the model"
            )
        outs = [np.asarray(o).reshape(w) for o, w in zip(outs, want, strict=True)]
        if not all(np.isfinite(o).all() for o in outs) and all(np.isfinite(x).all() for x in ins):
            raise ExportError(
                f"{self.kind} runtime: {self.source} produced NaN/Inf from finite inputs; the "
                "artifact is corrupt or the model diverged: re-export it with `qsa export`"
            )
        return outs[0], list(outs[1:])

    def run_utterance(self, wave: np.ndarray) -> np.ndarray:
        wave = np.asarray(wave, np.float32).reshape(-1)
        n = len(wave) // self.hop
        state = self.init_state()
        out = np.empty(n * self.hop, np.float32)
        for t in range(n):
            y, state = self.step(wave[t * self.hop : (t + 1) * self.hop], state)
            out[t * self.hop : (t + 1) * self.hop] = y.reshape(-1)
        return out


def _checked(path, kind: str, expected_sha256: str | None) -> bytes:
    """The artifact's bytes after check_artifact; the sha256 defaults to report.json's."""
    if expected_sha256 is None:
        expected_sha256 = report_sha256(path)
    return check_artifact(path, kind, expected_sha256)


def _load_error(path, kind: str, e: Exception) -> ExportError:
    msg = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
    return ExportError(
        f"the {kind} runtime cannot load {path}: {msg}; re-export it with "
        f"`qsa export --target {kind} ...`"
    )


class TorchRuntime(Runtime):
    kind = "torch"

    def __init__(self, step_module, precision: str = "fp32"):
        import torch

        from .step import as_step_module

        if isinstance(step_module, str | os.PathLike):
            from qsa.hub import load

            step_module = load(step_module, dequantize=precision == "fp32")
        self.module = as_step_module(step_module)
        if precision == "int8":
            from qsa.quantize import Int8Config, int8_layers, quantize_

            if not int8_layers(self.module):
                import copy

                self.module = quantize_(copy.deepcopy(self.module), Int8Config())
        from qsa.layers import dense_inference_copy

        # eager one-frame steps: the dense path, its expanded weights built once (a copy:
        # the caller's module keeps its path); 2x faster per hop than packed for qcgan-35k
        self.module = dense_inference_copy(self.module)
        self.precision = precision
        self._torch = torch
        super().__init__(self.module.hop, [tuple(s.shape) for s in self.module.init_state(1)])

    def _run(self, inputs):
        torch = self._torch
        with torch.no_grad():
            outs = self.module(*(torch.from_numpy(x) for x in inputs))
        return [o.detach().numpy().astype(np.float32, copy=False) for o in outs]


class OnnxRuntime(Runtime):
    kind = "onnx"

    def __init__(
        self, path: str | os.PathLike, threads: int = 1, expected_sha256: str | None = None
    ):

        self.source = str(path)
        self._open(path, _checked(path, "onnx", expected_sha256), threads)

    def _open(self, path, data: bytes, threads: int) -> None:
        """An onnxruntime session on ``data`` (bytes already checked), its names and shapes."""
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
            ins = self.session.get_inputs()
            self.input_names = [i.name for i in ins]
            self.output_names = [o.name for o in self.session.get_outputs()]
            hop, states = ins[0].shape[-1], [tuple(i.shape) for i in ins[1:]]
            if not isinstance(hop, int) or not all(isinstance(d, int) for s in states for d in s):
                raise ValueError(f"symbolic input shapes {[i.shape for i in ins]}")
        except Exception as e:
            raise _load_error(path, "onnx", e) from None
        Runtime.__init__(self, hop, states)

    def _run(self, inputs):
        return self.session.run(self.output_names, dict(zip(self.input_names, inputs, strict=True)))


_ET_THREADS_SET = False


def _executorch_single_thread() -> None:
    """One XNNPACK thread, like the ONNX Runtime and LiteRT runtimes here (threads=1).

    ExecuTorch's shared threadpool starts with one thread per core; for a streaming step of
    ~0.3 ms, handing work to a second thread costs more than it saves (qcgan-35k int8: median
    0.42 -> 0.30 ms per hop on the 2-core dev CPU), and in the live app, where the other core
    runs the audio callback and server, it tripled the hop time (p99 2.85 ms). Set once per
    process, before any method of ours runs: resetting the pool after methods have run on it
    hung in our tests (executorch 1.x, ``_unsafe_reset_threadpool``)."""
    global _ET_THREADS_SET
    if _ET_THREADS_SET:
        return
    _ET_THREADS_SET = True
    try:
        from executorch.extension.pybindings import portable_lib as pl
    except ImportError:
        return
    get = getattr(pl, "_threadpool_get_thread_count", None)
    reset = getattr(pl, "_unsafe_reset_threadpool", None)
    if get is not None and reset is not None and get() != 1:
        reset(1)


class ExecuTorchRuntime(Runtime):
    kind = "executorch"

    def __init__(
        self, path: str | os.PathLike, hop: int, state_shapes, expected_sha256: str | None = None
    ):
        import torch
        from executorch.runtime import Runtime as ETRuntime

        _executorch_single_thread()
        self._torch = torch
        self.source = str(path)
        data = _checked(path, "executorch", expected_sha256)
        try:
            self.program = ETRuntime.get().load_program(data)
            self.method = self.program.load_method("forward")
        except Exception as e:  # RuntimeError from the loader; KeyError for a missing method
            raise ExportError(
                f"the ExecuTorch runtime cannot load {path}: {e} (its XNNPACK delegate did not "
                "build: the runtime's log names the node XNNPACK refused, e.g. an int8 reshape "
                "whose input and output scales differ; re-export it with this qsa, whose int8 "
                "graphs keep one scale through layout ops, or use --precision fp32)"
            ) from None
        super().__init__(hop, state_shapes)

    def _run(self, inputs):
        outs = self.method.execute([self._torch.from_numpy(x) for x in inputs])
        return [o.numpy().astype(np.float32, copy=True) for o in outs]


def _quantize(x: np.ndarray, dtype, scale: float, zero_point: int) -> np.ndarray:
    info = np.iinfo(dtype)
    q = np.round(x / scale) + zero_point
    return np.clip(q, info.min, info.max).astype(dtype)


def _dequantize(q: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    return ((q.astype(np.float32) - zero_point) * scale).astype(np.float32)


class _TfliteIO:
    """Quantisation parameters of a TFLite model's inputs/outputs, in signature order."""

    def __init__(self, ins: list[dict], outs: list[dict]):
        self.ins, self.outs = ins, outs

    def encode(self, i: int, x: np.ndarray) -> np.ndarray:
        d = self.ins[i]
        if d["dtype"] == np.float32:
            return x.astype(np.float32, copy=False)
        return _quantize(x, d["dtype"], d["scale"], d["zero_point"])

    def decode(self, i: int, q: np.ndarray) -> np.ndarray:
        d = self.outs[i]
        if d["dtype"] == np.float32:
            return q.astype(np.float32, copy=True)
        return _dequantize(q, d["scale"], d["zero_point"])


def _detail(d: dict) -> dict:
    qp = d.get("quantization_parameters") or {}
    scales = np.asarray(qp.get("scales", []), np.float64)
    zps = np.asarray(qp.get("zero_points", []), np.int64)
    if scales.size == 0 and "quantization" in d:
        s, z = d["quantization"]
        scales, zps = np.array([s]), np.array([z])
    return {
        "dtype": np.dtype(d["dtype"]).type,
        "shape": tuple(int(v) for v in d["shape"]),
        "scale": float(scales[0]) if scales.size else 0.0,
        "zero_point": int(zps[0]) if zps.size else 0,
    }


class LiteRTRuntime(Runtime):
    kind = "litert"

    def __init__(
        self, path: str | os.PathLike, threads: int = 1, expected_sha256: str | None = None
    ):
        from ai_edge_litert.interpreter import Interpreter

        self.source = str(path)
        self._data = _checked(path, "litert", expected_sha256)
        try:
            from .tflite_compact import for_litert

            # a TFLite-Micro artifact is in forms only TFLM reads (one zero point per weight
            # tensor, bare reshapes, no zero biases ...); LiteRT gets them written out
            self._data = for_litert(self._data)
            self.interpreter = Interpreter(model_content=self._data, num_threads=threads)
            self.interpreter.allocate_tensors()
            ins = self.interpreter.get_input_details()
            outs = self.interpreter.get_output_details()
            self.in_index = [d["index"] for d in ins]
            self.out_index = [d["index"] for d in outs]
            self.io = _TfliteIO([_detail(d) for d in ins], [_detail(d) for d in outs])
        except Exception as e:
            raise _load_error(path, "litert", e) from None
        shapes = [d["shape"] for d in self.io.ins]
        if not shapes or not shapes[0]:
            raise _load_error(path, "litert", ValueError(f"input shapes {shapes}"))
        super().__init__(shapes[0][-1], shapes[1:])

    def _run(self, inputs):
        it = self.interpreter
        for k, (idx, x) in enumerate(zip(self.in_index, inputs, strict=True)):
            it.set_tensor(idx, self.io.encode(k, x))
        it.invoke()
        return [self.io.decode(k, it.get_tensor(idx)) for k, idx in enumerate(self.out_index)]


class TFLMRuntime(Runtime):
    kind = "tflm"

    def __init__(
        self,
        path: str | os.PathLike,
        arena_size: int | None = None,
        expected_sha256: str | None = None,
    ):
        from tflite_micro.python.tflite_micro import runtime

        self.path = self.source = str(path)
        self.arena_size = arena_size
        self._data = _checked(path, "tflm", expected_sha256)  # kept alive: TFLM reads it
        try:
            self.interpreter = runtime.Interpreter.from_bytes(self._data, arena_size=arena_size)
        except Exception as e:  # the TFLM binding raises RuntimeError/ValueError variants
            raise ExportError(f"TFLM could not load {path} (arena {arena_size}): {e}") from None
        from .tflm import _native_output_to

        ins, outs = [], []
        with _native_output_to(None):  # probing past the last input/output prints a C++ error
            while True:
                try:
                    ins.append(_detail(self.interpreter.get_input_details(len(ins))))
                except Exception:
                    break
            while True:  # a DSP / network split's network has more outputs than inputs
                try:
                    outs.append(_detail(self.interpreter.get_output_details(len(outs))))
                except Exception:
                    break
        if len(outs) < len(ins):
            raise _load_error(path, "tflm", ValueError(f"{len(ins)} inputs, {len(outs)} outputs"))
        if not ins or not ins[0]["shape"]:
            raise _load_error(path, "tflm", ValueError(f"inputs {ins}"))
        self.io = _TfliteIO(ins, outs)
        super().__init__(ins[0]["shape"][-1], [d["shape"] for d in ins[1:]])

    def _run(self, inputs):
        it = self.interpreter
        for k, x in enumerate(inputs):
            it.set_input(self.io.encode(k, x).reshape(self.io.ins[k]["shape"]), k)
        it.invoke()
        return [self.io.decode(k, it.get_output(k)) for k in range(len(self.io.outs))]


class AttenLimitedRuntime(Runtime):
    """``runtime`` with its output mixed with its input (the strength control):
    ``out = (1 - g) * y + g * x_delayed``, ``g = 10 ** (-atten_lim_db / 20)``, ``x_delayed``
    the input ``delay`` samples earlier (the step's output delay, n_fft - hop for an STFT
    model, so the two line up). The state is the wrapped runtime's plus the delay line
    ``(1, delay)`` (the last ``delay`` input samples), last; ``atten_lim_db`` may be changed
    between steps (it takes effect at once: a live app ramps it, see
    ``qsa.apps.live.processors.AttenLimited``)."""

    def __init__(self, runtime: Runtime, atten_lim_db: float | None, delay: int):
        from qsa.enhancement import check_atten_lim

        self.inner = runtime
        self.kind = runtime.kind
        self.source = runtime.source
        if isinstance(delay, bool) or not isinstance(delay, int | np.integer) or delay < 0:
            raise ExportError(f"delay={delay!r}: expected the step's output delay in samples, "
                              "an int >= 0 (n_fft - hop for an STFT model)")
        self.delay = int(delay)
        self._check = check_atten_lim
        self.atten_lim_db = atten_lim_db
        super().__init__(runtime.hop, [*runtime.state_shapes, (1, self.delay)])

    @property
    def atten_lim_db(self) -> float | None:
        return self._atten_lim_db

    @atten_lim_db.setter
    def atten_lim_db(self, value) -> None:
        from qsa.enhancement import atten_lim_gain

        self._atten_lim_db = self._check(value, "atten_lim_db")
        self.gain = np.float32(atten_lim_gain(self._atten_lim_db))

    def _run(self, inputs):
        frame, inner_state, line = inputs[0], inputs[1:-1], inputs[-1]
        outs = self.inner._run([frame, *inner_state])
        y = np.asarray(outs[0], np.float32).reshape(1, self.hop)  # (1, hop)
        buf = np.concatenate([line.reshape(1, self.delay), frame], axis=1)  # (1, delay + hop)
        x = buf[:, : self.hop]  # (1, hop): the input that produced y
        g = self.gain
        return [(np.float32(1.0) - g) * y + g * x, *outs[1:], buf[:, self.hop :]]


def signal_delay(kind: str, artifact, runtime: Runtime) -> int:
    """The output delay of a streaming step in samples (algorithmic latency - hop): from the
    torch module, else from the exporter's report.json next to the artifact."""
    hop = runtime.hop
    if kind == "torch":
        d = _module_delay(getattr(runtime, "module", None), hop)
        if d is not None:
            return d
    else:
        report = Path(artifact).with_name("report.json")
        if report.is_file():
            import json

            r = json.loads(report.read_text())
            if isinstance(r.get("algorithmic_latency_samples"), int):
                return r["algorithmic_latency_samples"] - hop
            if r.get("model_config"):
                from .split import step_from_report

                d = _module_delay(step_from_report(r), hop)
                if d is not None:
                    return d
    raise ExportError(
        f"cannot tell the output delay of {artifact} (no report.json with the model config "
        "next to it); keep the exporter's report.json, or wrap the runtime yourself with "
        "AttenLimitedRuntime(runtime, atten_lim_db, delay)"
    )


def _module_delay(module, hop: int) -> int | None:
    for obj in (module, getattr(module, "model", None)):
        v = getattr(obj, "delay_samples", None)
        if isinstance(v, int):
            return v
        v = getattr(obj, "algorithmic_latency_samples", None)
        if isinstance(v, int):
            return v - hop
    return None


def load_runtime(kind: str, artifact, host_dsp: bool = True, atten_lim_db=None,
                 **kwargs) -> Runtime:
    """A runtime of ``kind`` (one of KINDS) for ``artifact`` (see the module docstring).
    ``atten_lim_db`` (not None): wrapped in :class:`AttenLimitedRuntime` (the delay from the
    model or report.json).

    executorch needs ``hop`` and ``state_shapes`` (the .pte carries no input metadata the
    Python runtime exposes); the exporter's report.json has both. An int8 artifact that holds
    only the network of a DSP / network split (``io.split`` in its report.json) comes wrapped
    in the host DSP (``qsa.export.split.SplitRuntime``) unless ``host_dsp=False``, so it
    streams audio like every other runtime.
    """
    rt = _load_runtime(kind, artifact, **kwargs)
    report = Path(artifact).with_name("report.json") if kind != "torch" else None
    if host_dsp and report is not None and report.is_file():
        import json

        r = json.loads(report.read_text())
        if r.get("io", {}).get("split"):
            from .split import SplitRuntime, step_from_report

            rt = SplitRuntime(rt, step_from_report(r))
    if atten_lim_db is not None:
        from qsa.enhancement import check_atten_lim

        atten_lim_db = check_atten_lim(atten_lim_db, "atten_lim_db")
        rt = AttenLimitedRuntime(rt, atten_lim_db, signal_delay(kind, artifact, rt))
    return rt


def _load_runtime(kind: str, artifact, **kwargs) -> Runtime:
    if kind == "torch":
        return TorchRuntime(artifact, **kwargs)
    if kind == "onnx":
        return OnnxRuntime(artifact, **kwargs)
    if kind == "executorch":
        if "hop" not in kwargs or "state_shapes" not in kwargs:
            report = Path(artifact).with_name("report.json")
            if report.is_file():
                import json

                r = json.loads(report.read_text())
                kwargs.setdefault("hop", r["io"]["hop"])
                kwargs.setdefault("state_shapes", r["io"]["state_shapes"])
            else:
                raise ExportError(
                    f"executorch runtime for {artifact}: pass hop= and state_shapes= (or keep "
                    "the report.json written next to the .pte)"
                )
        return ExecuTorchRuntime(artifact, **kwargs)
    if kind == "litert":
        return LiteRTRuntime(artifact, **kwargs)
    if kind == "tflm":
        return TFLMRuntime(artifact, **kwargs)
    raise ExportError(f"unknown runtime kind {kind!r}; expected one of {KINDS}")
