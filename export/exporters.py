"""Staged exporters: prepare -> export -> quantise -> lower/convert -> serialise -> verify ->
measure, one class per target, each stage a named method.

    result = export_model(model, "tflm", "int8", "out/")   # every stage, report.json written

Every exporter loads what it wrote in the real runtime, streams held-out noisy speech through
it and compares with PyTorch:

* fp32: each step is run on the same (frame, state) as the PyTorch step module (teacher
  forced); the RMS error of every step output (frame and new state) must be <= 1e-4;
* int8: the artifact streams the utterance on its own state; the SQNR of its output against
  PyTorch fp32 must be >= ``INT8_SQNR_FLOOR_DB`` (a post-training-quantisation floor; a model
  that falls below it needs QAT, not a looser check).

A mismatch raises ``ExportError`` (the artifact is left in place for inspection, its
report.json says ``"verified": false``).
"""

from __future__ import annotations

import dataclasses
import json
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from qsa.fileio import ensure_dir

from .errors import ExportError
from .rewrite import prepare_for_export
from .runtimes import load_runtime
from .step import as_step_module, count_params, example_inputs, stream_torch

TARGETS = ("onnx", "executorch", "litert", "tflm")
PRECISIONS = ("fp32", "int8")
FP32_STEP_RMS_TOL = 1e-4
INT8_SQNR_FLOOR_DB = 15.0
ARTIFACT_NAMES = {
    "onnx": "model.onnx",
    "executorch": "model.pte",
    "litert": "model.tflite",
    "tflm": "model.tflite",
}


def sqnr_db(ref: np.ndarray, test: np.ndarray) -> float:
    err = float(np.sum((ref - test) ** 2))
    sig = float(np.sum(ref**2))
    if err == 0.0:
        return float("inf")
    return 10.0 * np.log10(max(sig, 1e-30) / err)


@dataclasses.dataclass
class ExportResult:
    target: str
    precision: str
    artifact: Path
    report_path: Path
    report: dict[str, Any]
    files: list[Path]


class Exporter:
    """Base of the per-target exporters; ``STAGES`` names the methods run in order."""

    target = "base"
    mix = "conv"  # how quaternion layers write the component mixing (qsa.export.rewrite)
    fold_norm = False  # quaternion layer norms with one two-axis mean (qsa.export.rewrite)
    norm_reduce = "mean"  # how a folded norm writes its means (qsa.export.rewrite)
    upsample_filler = "concat"  # how an upsampling conv reads past the last bin (rewrite)
    layout = "source"  # "channels_last": QC-GAN's int8 network step bin-major (channels_last)
    STAGES = ("prepare", "export", "quantize", "lower", "serialize", "verify", "measure")

    def __init__(
        self,
        model: nn.Module,
        precision: str,
        out_dir: str | Path,
        calib: list[np.ndarray] | None = None,
        verify_wave: np.ndarray | None = None,
        model_name: str | None = None,
        force: bool = False,
        latency_hops: int = 200,
    ):
        if precision not in PRECISIONS:
            raise ExportError(f"precision={precision!r}; expected one of {PRECISIONS}")
        self.source = model
        self.precision = precision
        self.out_dir = Path(out_dir)
        self.model_name = model_name or type(model).__name__
        self.force = force
        self.latency_hops = latency_hops
        self._calib = calib
        self._verify_wave = verify_wave
        self.artifact = self.out_dir / ARTIFACT_NAMES[self.target]
        self.files: list[Path] = []
        self.report: dict[str, Any] = {}
        self.stage_times: dict[str, float] = {}

    # -- data --------------------------------------------------------------------------
    @property
    def calib(self) -> list[np.ndarray]:
        if self._calib is None:
            from .calib import calibration_set

            self._calib = calibration_set()
        return self._calib

    @property
    def verify_wave(self) -> np.ndarray:
        if self._verify_wave is None:
            from .calib import verification_utterance

            self._verify_wave = verification_utterance()
        return self._verify_wave

    def calibration_inputs(self, max_steps: int = 600):
        """(frame, *state) tuples from streaming the fp32 step module over the calibration set
        (the states a deployed model actually sees)."""
        from .split import stream_network_inputs

        inputs = []
        for wave in self.calib:
            w = torch.from_numpy(np.asarray(wave, np.float32))
            if self.split:
                inputs.extend(stream_network_inputs(self.step, w))
            else:
                _, trace = stream_torch(self.step, w)
                inputs.extend((f, *s) for f, s in trace)
        stride = max(1, len(inputs) // max_steps)
        return inputs[::stride]

    # -- stages ------------------------------------------------------------------------
    def run(self, stages: tuple[str, ...] | None = None) -> ExportResult:
        if self.artifact.exists() and not self.force:
            raise ExportError(f"{self.artifact} already exists; pass --force to overwrite it")
        ensure_dir(self.out_dir)
        # a previous export's report (and the sha256 it records) does not describe what this
        # run writes: drop it, so loaders never check the new artifact against it
        (self.out_dir / "report.json").unlink(missing_ok=True)
        for name in stages or self.STAGES:
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                getattr(self, name)()
            self.stage_times[name] = round(time.perf_counter() - t0, 3)
        if self.report:
            self.report["stage_seconds"] = self.stage_times
            self._write_report()
        return ExportResult(
            self.target,
            self.precision,
            self.artifact,
            self.out_dir / "report.json",
            self.report,
            self.files,
        )

    def prepare(self) -> None:
        """The step module (fp32 reference) and its export form (components stored once).

        int8 of a step with a DSP / network split (``qsa.export.split``): the artifact holds
        the network only, the DSP runs on the host around it."""
        from .split import INT8_MASK_VALUE, splittable

        self.step = as_step_module(self.source)
        for p in self.step.parameters():
            p.requires_grad_(False)
        self.split = self.precision == "int8" and splittable(self.step)
        if self.split:
            net = self.step.network()
            self.export_step = prepare_for_export(
                net, mix=self.mix, fold_norm=self.fold_norm, norm_reduce=self.norm_reduce,
                upsample_filler=self.upsample_filler,
            )
            for m in self.export_step.modules():  # empty-cache mask inside the int8 range
                if hasattr(m, "mask_value"):
                    m.mask_value = INT8_MASK_VALUE
            if self.layout == "channels_last":
                from .channels_last import ChannelsLastNetworkStep, channels_last_reason

                taps = getattr(getattr(net.model, "config", None), "df_taps", 0)
                if taps:  # the channels-last graph and the C DSP have no deep filter
                    raise ExportError(
                        f"df_taps={taps}: a QC-GAN with deep filtering is not exported to "
                        f"{self.target} (TFLite-Micro / C) yet; export it to onnx, or use a "
                        "model with df_taps=0"
                    )

                if channels_last_reason(self.export_step) is None:
                    self.export_step = ChannelsLastNetworkStep(self.export_step).eval()
            self.example = (net.example_input(1), *net.init_state(1))
            self.n_outputs = net.n_outputs
        else:
            self.export_step = prepare_for_export(
                self.step, mix=self.mix, fold_norm=self.fold_norm, norm_reduce=self.norm_reduce,
                upsample_filler=self.upsample_filler,
            )
            self.example = example_inputs(self.step)
            self.n_outputs = 1
        self.n_inputs = len(self.example)

    def export(self) -> None:
        self.exported = torch.export.export(self.export_step, self.example)

    def quantize(self) -> None:
        """Static PTQ (int8 only; fp32 passes through)."""

    def lower(self) -> None:
        raise NotImplementedError

    def serialize(self) -> None:
        raise NotImplementedError

    def runtime(self):
        return load_runtime(self.target, self.artifact, host_dsp=False)

    def verify(self) -> None:
        rt = self.runtime()
        if self.split:
            from .split import SplitRuntime

            rt = SplitRuntime(rt, self.step)
        self.loaded = rt
        wave = torch.from_numpy(np.asarray(self.verify_wave, np.float32))
        ref, trace = stream_torch(self.step, wave)
        ref = ref.numpy()
        try:
            streamed = rt.run_utterance(self.verify_wave)
        except (RuntimeError, ValueError) as e:  # the runtime rejected what we wrote
            raise ExportError(
                f"{self.artifact}: the {self.target} runtime failed to run the exported "
                f"{self.precision} model: {str(e).strip().splitlines()[-1]}"
            ) from None
        parity: dict[str, Any] = {
            "utterance_samples": int(len(ref)),
            "stream_sqnr_db_vs_torch_fp32": round(sqnr_db(ref, streamed), 2),
            "stream_rms_error": float(np.sqrt(np.mean((ref - streamed) ** 2))),
        }
        ok = True
        if self.precision == "fp32":
            worst = 0.0
            for frame, state in trace[: min(len(trace), 120)]:
                want = self.step(frame, *state)
                got_out, got_state = rt.step(frame.numpy(), [s.numpy() for s in state])
                for w, g in zip(want, [got_out, *got_state], strict=True):
                    worst = max(worst, float(np.sqrt(np.mean((w.numpy() - g) ** 2))))
            parity["step_rms_error_max"] = worst
            parity["tolerance"] = {"step_rms_error_max": FP32_STEP_RMS_TOL}
            ok = worst <= FP32_STEP_RMS_TOL
            why = f"step output RMS error {worst:.3g} > {FP32_STEP_RMS_TOL:g}"
        else:
            s = parity["stream_sqnr_db_vs_torch_fp32"]
            parity["tolerance"] = {"stream_sqnr_db_min": INT8_SQNR_FLOOR_DB}
            ok = s >= INT8_SQNR_FLOOR_DB
            why = f"streamed SQNR {s:.1f} dB < floor {INT8_SQNR_FLOOR_DB:g} dB"
        parity["verified"] = bool(ok)
        self.parity = parity
        if not ok:
            self.report = {"verified": False, "parity": parity}
            self._write_report()
            raise ExportError(
                f"{self.target} {self.precision} artifact {self.artifact} does not match "
                f"PyTorch: {why}; the artifact is kept for inspection"
            )

    # -- measurement -------------------------------------------------------------------
    def ops(self) -> dict[str, int]:
        return {}

    def memory(self) -> dict[str, Any]:
        return {}

    def latency(self, rt=None) -> dict[str, float]:
        rt = rt or self.loaded
        wave = np.asarray(self.verify_wave, np.float32)
        n = min(self.latency_hops, len(wave) // rt.hop)
        state = rt.init_state()
        times = []
        for t in range(n + 5):
            frame = wave[(t % n) * rt.hop : (t % n + 1) * rt.hop]
            t0 = time.perf_counter()
            _, state = rt.step(frame, state)
            times.append(time.perf_counter() - t0)
        ms = np.array(times[5:]) * 1e3
        return {
            "hops": int(n),
            "median_ms": round(float(np.median(ms)), 4),
            "p99_ms": round(float(np.percentile(ms, 99)), 4),
            "budget_ms": round(1e3 * rt.hop / 16000, 3),
        }

    def measure(self) -> None:
        from .report import macs_per_step
        from .validate import sha256_file

        n_params = count_params(self.step)
        size = sum(p.stat().st_size for p in [self.artifact])
        macs = macs_per_step(self.step)
        self.report = {
            "model": self.model_name,
            "target": self.target,
            "precision": self.precision,
            "artifact": self.artifact.name,
            "bytes": int(size),
            "sha256": sha256_file(self.artifact),
            "params": int(n_params),
            "model_config": _model_config(self.step),
            "bytes_per_param": round(size / max(1, n_params), 4),
            "packed_bound_bytes": int(1.25 * n_params + 24 * 1024),
            "ops": self.ops(),
            "memory": self.memory(),
            "macs_per_hop": int(macs),
            "mac_per_s": int(macs * 16000 / self.step.hop),
            "sample_rate": 16000,
            "io": self._io(),
            "latency_per_hop": self.latency(),
            "parity": self.parity,
            "verified": self.parity["verified"],
            "stage_seconds": self.stage_times,
            "files": [p.name for p in self.files],
        }
        if getattr(self, "compaction", None):
            self.report["compaction"] = self.compaction
        self._write_report()

    def _io(self) -> dict[str, Any]:
        io: dict[str, Any] = {
            "hop": int(self.step.hop),
            "state_shapes": [list(s.shape) for s in self.example[1:]],
        }
        if self.split:
            k = self.step.n_dsp_state
            io["split"] = {
                "graph": "network only: the STFT analysis/synthesis and power-law compression "
                "run on the host DSP in float (qsa.export.split)",
                "network_input_shape": list(self.example[0].shape),
                "network_outputs": int(self.n_outputs),
                "dsp_state_shapes": [list(s.shape) for s in self.step.init_state(1)[:k]],
            }
        return io

    def _write_report(self) -> None:
        from qsa.fileio import atomic_write_text

        atomic_write_text(self.out_dir / "report.json", json.dumps(self.report, indent=2) + "\n")

    def _write(self, path: Path, data: bytes) -> None:
        from qsa.fileio import atomic_write_bytes

        atomic_write_bytes(path, data)
        if path not in self.files:
            self.files.append(path)


def _model_config(step: nn.Module) -> dict | None:
    from qsa.config import ModelConfig, config_to_dict

    cfg = getattr(getattr(step, "model", step), "config", None)
    return config_to_dict(cfg) if isinstance(cfg, ModelConfig) else None


def _calibrate(fn, inputs_list) -> None:
    """Feed calibration (frame, *state) tuples through ``fn`` (a prepared PT2E module)."""
    with torch.no_grad():
        for args in inputs_list:
            fn(*args)


class ExecuTorchExporter(Exporter):
    target = "executorch"
    # norms' means as constant linear ops, delegated to XNNPACK: as mean ops they ran on the
    # portable kernels between 34 delegate calls per qcgan-35k int8 step (3 now, with the
    # attention's bmm4 and the models' pads folded into convs / concats)
    fold_norm = True
    norm_reduce = "linear"

    def quantize(self) -> None:
        if self.precision != "int8":
            return
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        from .quantizers import xnnpack_quantizer

        pm = prepare_pt2e(self.exported.module(), xnnpack_quantizer())
        _calibrate(pm, self.calibration_inputs())
        cm = convert_pt2e(pm)
        self.exported = torch.export.export(cm, self.example)

    def lower(self) -> None:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower

        partitioner = XnnpackPartitioner()
        if self.precision == "int8":
            # XNNPACK rejects the quantised constant pads of this graph at init
            # ("Failed to create StaticConstantPad node ... invalid_parameter"): pads stay on
            # the portable kernels, everything else is delegated
            from executorch.backends.xnnpack.partition.config import (
                ALL_PARTITIONER_CONFIGS,
                ConstantPadConfig,
            )

            partitioner = XnnpackPartitioner(
                configs=[c for c in ALL_PARTITIONER_CONFIGS if c is not ConstantPadConfig]
            )
        edge = to_edge_transform_and_lower(self.exported, partitioner=[partitioner])
        self.edge = edge
        self.program = edge.to_executorch()

    def serialize(self) -> None:
        self._write(self.artifact, bytes(self.program.buffer))

    def runtime(self):
        return load_runtime(
            "executorch",
            self.artifact,
            host_dsp=False,
            hop=self.step.hop,
            state_shapes=[tuple(s.shape) for s in self.example[1:]],
        )

    def ops(self) -> dict[str, int]:
        c: Counter = Counter()
        for n in self.edge.exported_program().graph.nodes:
            if n.op == "call_function":
                c[str(getattr(n.target, "__name__", n.target))] += 1
        return dict(sorted(c.items()))

    def memory(self) -> dict[str, Any]:
        plan = self.program.executorch_program.execution_plan[0]
        sizes = [int(s) for s in plan.non_const_buffer_sizes]
        return {"planned_bytes": int(sum(sizes)), "planned_buffers": sizes}


def _tidy_onnx(path: Path) -> None:
    """Fold the constant subgraphs the dynamo exporter leaves (shape arithmetic, a conv's
    zero bias as Expand(Constant)) into initializers, drop dead nodes, and strip the
    per-node source metadata (stack traces: most of the file for small models).

    Only constant folding and lifting: onnxscript's full optimizer also rewrites patterns,
    and one of its rules dropped the magnitude eps (NaN on silence).
    """
    import onnx_ir as ir
    import onnx_ir.passes.common as passes
    from onnxscript.optimizer import fold_constants

    model = ir.load(str(path))
    fold_constants(model)
    for p in (
        passes.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        passes.RemoveUnusedNodesPass(),
        passes.ClearMetadataAndDocStringPass(),
    ):
        p(model)
    model.metadata_props.clear()
    # a conv/linear without bias exports as Conv(x, w, Expand(0)) (the bias a qsa layer
    # carries is a separate Add); folded, the zero would become an int32 bias initializer
    # in the int8 graph: it is dropped, so the node has the bias it had in PyTorch, none
    for node in model.graph:
        if node.op_type in ("Conv", "ConvTranspose", "Gemm") and len(node.inputs) == 3:
            bias = node.inputs[2]
            const = None if bias is None else bias.const_value
            if const is not None and not np.any(const.numpy()):
                node.resize_inputs(2)
    passes.RemoveUnusedNodesPass()(model)
    ir.save(model, str(path))


class OnnxExporter(Exporter):
    target = "onnx"

    def export(self) -> None:
        names_in = self._input_names()
        heads = ["out"] if self.n_outputs == 1 else [f"out_{k}" for k in range(self.n_outputs)]
        names_out = heads + [f"new_state_{k}" for k in range(self.n_inputs - 1)]
        self.fp32_path = self.out_dir / (
            "model.onnx" if self.precision == "fp32" else "model.fp32.onnx"
        )
        from qsa.fileio import atomic_path

        with atomic_path(self.fp32_path) as tmp:
            torch.onnx.export(
                self.export_step,
                self.example,
                str(tmp),
                input_names=names_in,
                output_names=names_out,
                dynamo=True,
                optimize=False,
                external_data=False,
                verbose=False,
            )
            _tidy_onnx(tmp)
        self.files.append(self.fp32_path)

    def quantize(self) -> None:
        if self.precision != "int8":
            return
        from onnxruntime.quantization import (
            CalibrationDataReader,
            QuantFormat,
            QuantType,
            quantize_static,
        )

        names = self._input_names()
        feeds = [
            {n: a.numpy() for n, a in zip(names, args, strict=True)}
            for args in self.calibration_inputs(max_steps=300)
        ]

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.it = iter(feeds)

            def get_next(self):
                return next(self.it, None)

        from qsa.fileio import atomic_path

        with atomic_path(self.artifact) as tmp:
            quantize_static(
                str(self.fp32_path),
                str(tmp),
                Reader(),
                quant_format=QuantFormat.QDQ,
                per_channel=True,
                # the quaternion layers (Gemm/Conv: the weights and the MACs); elementwise
                # maths (power-law compression, norms) and the STFT / attention MatMuls stay
                # fp32: quantising every op took untrained qcgan-35k to 5.7 dB SQNR
                op_types_to_quantize=["Conv", "Gemm", "ConvTranspose"],
                activation_type=QuantType.QInt8,
                weight_type=QuantType.QInt8,
                # 7-bit weights: x86 without VNNI (AVX2: this machine, most laptops) runs
                # the fused int8 conv/gemm kernels with u8 x s8 pair sums that saturate at
                # 16 bits; with 8-bit weights the fused graph left its own QDQ reference by
                # 0.36 on a 0.29 output (qcgan-35k streamed at 7 dB). reduce_range is
                # onnxruntime's documented fix: qcgan-35k 30.1 dB, toy 23.1 dB, fused graph
                # equal to the QDQ reference
                reduce_range=True,
                extra_options={"ActivationSymmetric": False, "WeightSymmetric": True},
            )
        self.files.append(self.artifact)

    def _input_names(self) -> list[str]:
        first = "features" if self.split else "frame"
        return [first] + [f"state_{k}" for k in range(self.n_inputs - 1)]

    def lower(self) -> None:
        """onnxruntime optimises at session creation; nothing to lower ahead of time."""

    def serialize(self) -> None:
        import onnx

        onnx.checker.check_model(str(self.artifact))
        self.onnx_model = onnx.load(str(self.artifact))

    def ops(self) -> dict[str, int]:
        return dict(sorted(Counter(n.op_type for n in self.onnx_model.graph.node).items()))


class LiteRTExporter(Exporter):
    target = "litert"
    mix = "matmul"  # channels-last: a conv mix would be wrapped in transposes
    fold_norm = True  # one op fewer per layer norm (TFLM: ~8 KB less arena for qcgan-35k)
    upsample_filler = "same"  # TFLite SAME padding: 2 ops fewer per upsampling stage
    # the source layout: XNNPACK runs qcgan-35k int8 in 0.37-0.39 ms per step at 27.1 dB
    # against 0.43 ms / 26.1 dB for the channels-last step (12-05, same process); the
    # microcontroller file (TFLMExporter) takes the smaller channels-last graph
    layout = "source"
    mix_bmm = False  # XNNPACK runs the converter's FULLY_CONNECTED form of the mixing
    micro = False  # TFLite-Micro-only file forms (tflite_compact: ``micro``, for_litert)

    def export(self) -> None:
        """litert_torch exports internally (fp32); int8 needs the PT2E graph first."""
        if self.precision == "int8":
            super().export()

    def quantize(self) -> None:
        if self.precision != "int8":
            return
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        from .quantizers import litert_full_int8_quantizer

        self.quantizer = litert_full_int8_quantizer()
        pm = prepare_pt2e(self.exported.module(), self.quantizer)
        _calibrate(pm, self.calibration_inputs())
        self.quantized = convert_pt2e(pm, fold_quantize=False)

    def lower(self) -> None:
        import litert_torch

        if self.precision == "int8":
            from litert_torch.quantize.quant_config import QuantConfig

            qc = QuantConfig(pt2e_quantizer=self.quantizer)
            self.converted = litert_torch.convert(self.quantized, self.example, quant_config=qc)
        else:
            self.converted = litert_torch.convert(self.export_step, self.example)

    def serialize(self) -> None:
        from qsa.fileio import atomic_path

        from .tflite_compact import compact_tflite

        with atomic_path(self.artifact) as tmp:
            self.converted.export(str(tmp))
            # strings stripped and every distinct table written once, in one parse and write;
            # int8: the converter's four-op PReLUs as one PRELU op (verified below)
            data, self.compaction = compact_tflite(
                tmp.read_bytes(), fuse=self.precision == "int8", mix_bmm=self.mix_bmm,
                micro=self.micro, scalar_muls=self.precision == "int8",
            )
            tmp.write_bytes(data)
        self.files.append(self.artifact)
        self.check_graph()

    def check_graph(self) -> None:
        from .tflm import tflite_ops

        self.op_list = tflite_ops(self.artifact)

    def ops(self) -> dict[str, int]:
        return dict(sorted(Counter(o["op"] for o in self.op_list).items()))

    def memory(self) -> dict[str, Any]:
        from .tflm import tflite_tensor_bytes

        return tflite_tensor_bytes(self.artifact)


class TFLMExporter(LiteRTExporter):
    """LiteRT conversion + the microcontroller checks: integer-only graph, C array, op
    resolver header, measured arena."""

    target = "tflm"
    mix_bmm = True  # the mixing as BATCH_MATMUL: one transpose fewer per quaternion layer
    layout = "channels_last"  # no NCHW <-> NHWC moves around QC-GAN's convs (channels_last)
    micro = True  # forms only TFLM reads (LiteRT's loaders undo them: for_litert)

    def check_graph(self) -> None:
        from .tflm import float_ops, tflite_ops

        self.op_list = tflite_ops(self.artifact)
        if self.precision == "int8":
            bad = float_ops(self.op_list)
            if bad:
                raise ExportError(
                    f"{self.artifact}: the int8 TFLM graph still has float ops "
                    f"{sorted({o['op'] for o in bad})} (first: {bad[0]}); an MCU int8 kernel set "
                    "cannot run them: quantise the module they come from or replace it in "
                    "qsa.export.rewrite"
                )
        from .tflm import write_c_array, write_op_resolver

        for p in write_c_array(self.artifact, self.out_dir):
            self.files.append(p)
        self.files.append(write_op_resolver(self.op_list, self.out_dir))

    def runtime(self):
        from .tflm import arena_breakdown, bisect_arena

        self.arena = bisect_arena(self.artifact)
        breakdown = arena_breakdown(self.artifact, self.arena["arena_bytes"])
        if breakdown:
            self.arena["breakdown"] = breakdown
        return load_runtime(
            "tflm", self.artifact, host_dsp=False, arena_size=self.arena["arena_bytes"]
        )

    def memory(self) -> dict[str, Any]:
        return dict(self.arena)

    def measure(self) -> None:
        """The report, and model_data.h again with the measured ``kTensorArenaSize``."""
        from .tflm import write_c_array

        super().measure()
        write_c_array(self.artifact, self.out_dir, arena_bytes=self.arena["arena_bytes"])


EXPORTERS: dict[str, type[Exporter]] = {
    "onnx": OnnxExporter,
    "executorch": ExecuTorchExporter,
    "litert": LiteRTExporter,
    "tflm": TFLMExporter,
}


def export_model(
    model: nn.Module,
    target: str,
    precision: str = "fp32",
    out_dir: str | Path = "export",
    calib: list[np.ndarray] | None = None,
    verify_wave: np.ndarray | None = None,
    profile: str | None = None,
    model_name: str | None = None,
    force: bool = False,
    stages: tuple[str, ...] | None = None,
) -> ExportResult:
    """Export ``model``'s streaming step to ``target`` at ``precision`` in ``out_dir``, run it
    in the target's runtime, compare with PyTorch and write report.json (see module doc).
    With ``profile`` the report gets that profile's budget check and a budget overrun raises
    ExportError."""
    if target not in EXPORTERS:
        raise ExportError(f"target={target!r}; expected one of {TARGETS}")
    if profile is not None:
        from .profiles import get_profile

        get_profile(profile)  # fail before the (slow) export on an unknown name
    exp = EXPORTERS[target](
        model,
        precision,
        out_dir,
        calib=calib,
        verify_wave=verify_wave,
        model_name=model_name,
        force=force,
    )
    result = exp.run(stages)
    if profile is not None:
        from .profiles import check_budget

        verdict = check_budget(result.report, profile)
        result.report["profile"] = verdict
        exp.report = result.report
        exp._write_report()
        if not verdict["fits"]:
            raise ExportError(
                f"{result.artifact} does not fit profile {profile!r}: "
                + "; ".join(verdict["violations"])
            )
    return result
