"""The interface every peer shares, and the resample / delay-compensation around it.

A peer runs at its native rate: ``enhance(x, sr)`` resamples the input with soxr (HQ), runs the
peer, removes the peer's own output delay (so output sample n lines up with input sample n),
resamples back and returns exactly ``len(x)`` samples at ``sr``.
"""

from __future__ import annotations

import time

import numpy as np


def resample(x: np.ndarray, sr_in: int, sr_out: int) -> np.ndarray:
    """soxr HQ resampling of a whole signal (soxr's offline call removes its own delay)."""
    if sr_in == sr_out:
        return np.asarray(x, np.float32)
    import soxr

    return soxr.resample(np.asarray(x, np.float32), sr_in, sr_out, quality="HQ").astype(np.float32)


def fit_length(y: np.ndarray, n: int) -> np.ndarray:
    """Trim or zero-pad ``y`` to ``n`` samples."""
    if len(y) >= n:
        return y[:n]
    return np.pad(y, (0, n - len(y)))


def measure_delay(reference: np.ndarray, output: np.ndarray, max_lag: int) -> int:
    """Lag (samples) that maximises the cross-correlation of ``output`` with ``reference``;
    positive when the output comes later than the reference."""
    n = min(len(reference), len(output))
    a = np.asarray(reference[:n], np.float64)
    b = np.asarray(output[:n], np.float64)
    size = 1 << int(np.ceil(np.log2(2 * n)))
    xc = np.fft.irfft(np.fft.rfft(b, size) * np.conj(np.fft.rfft(a, size)), size)
    lags = np.concatenate([np.arange(0, max_lag + 1), np.arange(-max_lag, 0)])
    vals = np.concatenate([xc[: max_lag + 1], xc[size - max_lag :]])
    return int(lags[int(np.argmax(vals))])


class Peer:
    """Base class. Subclasses set the cost fields and implement ``_process(x_native)``, which
    returns the peer's raw output stream (same length as its input) at ``native_sr``.

    ``delay_samples`` is the peer's output delay at ``native_sr``: the input is padded with that
    many zeros at the end (so the tail comes out) and the first ``delay_samples`` are dropped.
    ``sources`` says where each cost figure comes from (counted, measured or published).
    """

    name: str = "peer"
    native_sr: int | None = None  # None: runs at whatever rate it is given
    params: int = 0
    macs_per_second: float = 0.0
    algorithmic_latency_ms: float | None = 0.0  # None: offline (needs the whole utterance)
    artifact_bytes: int = 0
    delay_samples: int = 0
    sources: dict[str, str] = {}  # replaced per subclass; never mutated
    # wall time of the last enhance() without per-utterance set-up (``setup_seconds``, what a
    # streaming deployment pays once, e.g. loading a model): the real-time factor uses it
    last_seconds: float = 0.0
    setup_seconds: float = 0.0
    last_cpu_seconds: float = 0.0  # the same in this process's CPU time (all its threads)
    setup_cpu_seconds: float = 0.0

    def _process(self, x: np.ndarray, sr: int) -> np.ndarray:
        raise NotImplementedError

    def enhance(self, x: np.ndarray, sr: int) -> np.ndarray:
        """Enhanced ``x`` (float32 mono, any rate), aligned with ``x``, at ``sr``."""
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 1:
            raise ValueError(f"{self.name}: expected a mono 1-D signal, got shape {x.shape}")
        if not np.all(np.isfinite(x)):
            raise ValueError(f"{self.name}: input has NaN/inf samples")
        t0, c0 = time.perf_counter(), time.process_time()
        self.setup_seconds = self.setup_cpu_seconds = 0.0
        rate = self.native_sr or sr
        xn = resample(x, sr, rate)
        delay = self.delay_samples
        y = self._process(np.pad(xn, (0, delay)), rate)
        y = fit_length(y[delay:], len(xn))
        y = fit_length(resample(y, rate, sr), len(x))
        self.last_seconds = time.perf_counter() - t0 - self.setup_seconds
        self.last_cpu_seconds = time.process_time() - c0 - self.setup_cpu_seconds
        return y

    def describe(self) -> dict:
        return {
            "name": self.name,
            "native_sr": self.native_sr,
            "params": self.params,
            "macs_per_second": self.macs_per_second,
            "algorithmic_latency_ms": self.algorithmic_latency_ms,
            "artifact_bytes": self.artifact_bytes,
            "sources": dict(self.sources),
        }
