"""Sample-rate conversion with soxr (high quality), offline and streaming.

``resample`` converts a whole array; ``StreamResampler`` converts a stream of blocks (the live
app's microphone) with an explicit ``flush()`` that returns the tail soxr still holds.
"""

from __future__ import annotations

import numpy as np

from qsa.errors import AudioError

QUALITY = "HQ"  # soxr "high quality": 20-bit precision, ~95% bandwidth, linear phase


def _check_rate(name: str, sr: int) -> int:
    if not isinstance(sr, int | np.integer) or sr <= 0:
        raise AudioError(f"{name}={sr!r} is not a sample rate; expected a positive integer (Hz)")
    return int(sr)


def resample(x: np.ndarray, sr_in: int, sr_out: int, quality: str = QUALITY) -> np.ndarray:
    """Resample ``x`` (samples, or (samples, channels)) from ``sr_in`` to ``sr_out`` Hz.

    Returns float32; the input itself is returned (as float32) when the rates are equal.
    """
    import soxr

    sr_in, sr_out = _check_rate("sr_in", sr_in), _check_rate("sr_out", sr_out)
    x = np.asarray(x, dtype=np.float32)
    if sr_in == sr_out or x.shape[0] == 0:
        return x
    return soxr.resample(x, sr_in, sr_out, quality=quality).astype(np.float32, copy=False)


class StreamResampler:
    """Block-by-block resampler around ``soxr.ResampleStream``.

    ``process(block)`` returns whatever output is ready (possibly nothing, since soxr delays
    its output by its filter length); ``flush()`` ends the stream and returns the rest. The
    concatenated output matches ``resample`` of the whole signal up to floating-point error.
    """

    def __init__(self, sr_in: int, sr_out: int, channels: int = 1, quality: str = QUALITY):
        import soxr

        self.sr_in, self.sr_out = _check_rate("sr_in", sr_in), _check_rate("sr_out", sr_out)
        self.channels = int(channels)
        self._passthrough = self.sr_in == self.sr_out
        self._stream = None if self._passthrough else soxr.ResampleStream(
            self.sr_in, self.sr_out, self.channels, dtype="float32", quality=quality
        )
        self._flushed = False

    def process(self, block: np.ndarray) -> np.ndarray:
        """Feed one block (samples,) or (samples, channels); return the ready output."""
        if self._flushed:
            raise AudioError("StreamResampler.process called after flush(); make a new one")
        block = np.ascontiguousarray(block, dtype=np.float32)
        if self._passthrough:
            return block
        return self._stream.resample_chunk(block, last=False)

    def flush(self) -> np.ndarray:
        """End the stream and return the output still buffered inside soxr."""
        if self._flushed:
            raise AudioError("StreamResampler.flush called twice; make a new one")
        self._flushed = True
        shape = (0,) if self.channels == 1 else (0, self.channels)
        if self._passthrough:
            return np.zeros(shape, np.float32)
        return self._stream.resample_chunk(np.zeros(shape, np.float32), last=True)
