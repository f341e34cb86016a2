"""RNNoise (xiph, the 0.2 model bundled in ``pyrnnoise``), driven frame by frame via ctypes.

48 kHz, 480-sample (10 ms) frames; ``rnnoise_process_frame(state, out, in)`` takes and gives
floats in int16 range. Output delay measured on espeak-ng speech: 960 samples (20 ms), so the
algorithmic latency is 10 ms (frame) + 20 ms = 30 ms.

Cost, counted from the model compiled into ``librnnoise.so`` (its ``rnnoise_arrays`` table):
conv1 65x3->128, conv2 128x3->384, three GRUs of 384, dense 1536->32 gains, 1536->1 VAD:
about 2.89M parameters, stored dense (the classic 2017 RNNoise had about 88K; the model this
package ships is not that one). Each weight is used once per 10 ms frame, so the network costs
about 289 MMAC/s (the DSP around it, 960-point FFTs and a pitch search, adds a few more).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import numpy as np

from .base import Peer

SAMPLE_RATE = 48000
FRAME = 480
_FLOAT_P = ctypes.POINTER(ctypes.c_float)


class _WeightArray(ctypes.Structure):
    # nnet.h: typedef struct { const char *name; int type; int size; const void *data; }
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("type", ctypes.c_int),
        ("size", ctypes.c_int),
        ("data", ctypes.c_void_p),
    ]


@functools.lru_cache(maxsize=1)
def _lib():
    from pyrnnoise import rnnoise as _r  # loads librnnoise.so and sets argtypes/restype

    lib = _r.lib
    if lib.rnnoise_get_frame_size() != FRAME:
        raise RuntimeError(f"librnnoise frame size {lib.rnnoise_get_frame_size()} != {FRAME}")
    return lib, Path(_r.LIBRNNOISE)


@functools.lru_cache(maxsize=1)
def count_params() -> int:
    """Parameters of the bundled model: float weights, diagonal recurrent weights and biases in
    ``rnnoise_arrays`` (the int8 copies, scales and ``subias`` duplicate them and are skipped)."""
    lib, _ = _lib()
    table = (_WeightArray * 512).in_dll(lib, "rnnoise_arrays")
    total = 0
    for entry in table:
        if entry.name is None:
            break
        name = entry.name.decode()
        if name.endswith(("_weights_float", "_weights_diag", "_bias")) and not name.endswith(
            "_subias"
        ):
            total += entry.size // 4  # sizes are in bytes; float32
    return total


class RNNoise(Peer):
    """RNNoise at 48 kHz, one fresh state per utterance."""

    name = "RNNoise"
    native_sr = SAMPLE_RATE
    delay_samples = 960
    algorithmic_latency_ms = 30.0

    def __init__(self):
        lib, path = _lib()
        self._lib = lib
        self.params = count_params()
        self.macs_per_second = self.params * (SAMPLE_RATE / FRAME)
        self.artifact_bytes = path.stat().st_size
        self.sources = {
            "params": "counted from rnnoise_arrays in librnnoise.so (float weights + biases)",
            "macs_per_second": "params x 100 frames/s (each weight used once per frame; "
            "DSP not counted)",
            "algorithmic_latency_ms": "10 ms frame + 20 ms output delay (measured)",
            "artifact_bytes": f"{path.name} (weights compiled in, float and int8 copies)",
        }

    def _process(self, x: np.ndarray, sr: int) -> np.ndarray:
        n = len(x)
        frames = -(-n // FRAME)
        buf = np.zeros(frames * FRAME, np.float32)
        buf[:n] = x * 32768.0  # int16 range
        out = np.empty_like(buf)
        state = self._lib.rnnoise_create(None)
        try:
            for t in range(frames):
                src = buf[t * FRAME : (t + 1) * FRAME]
                dst = out[t * FRAME : (t + 1) * FRAME]
                self._lib.rnnoise_process_frame(
                    state, dst.ctypes.data_as(_FLOAT_P), src.ctypes.data_as(_FLOAT_P)
                )
        finally:
            self._lib.rnnoise_destroy(state)
        return out[:n] / 32768.0
