"""Lock-free single-producer / single-consumer ring buffer over a preallocated numpy array.

One thread writes (``write``), one thread reads (``read_into`` / ``skip``). Each side owns
one monotonic counter (``_written`` by the producer, ``_read`` by the consumer) and only reads
the other's; a Python int attribute store is atomic under the GIL, and the producer stores its
counter only after the samples are copied, so the consumer never sees a half-written frame.
No locks, no waiting, no array data allocated after construction: this is what the audio
callback may touch (STYLE item 9).
"""

from __future__ import annotations

import numpy as np


class SpscRing:
    """Frames of ``channels`` float32 samples; ``capacity`` frames."""

    def __init__(self, capacity: int, channels: int = 1, dtype=np.float32):
        if capacity < 1 or channels < 1:
            raise ValueError(f"ring capacity={capacity}, channels={channels}; both must be >= 1")
        self.capacity = int(capacity)
        self.channels = int(channels)
        self.buf = np.zeros((self.capacity, self.channels), dtype)  # (capacity, C)
        self._written = 0  # frames ever written (producer-owned)
        self._read = 0  # frames ever read or skipped (consumer-owned)

    def available(self) -> int:
        """Frames ready for the consumer."""
        return self._written - self._read

    def space(self) -> int:
        """Frames the producer may write without overwriting unread ones."""
        return self.capacity - (self._written - self._read)

    def write(self, frames: np.ndarray) -> int:
        """Copy up to len(frames) frames (N, C) or (N,) in; returns how many fit."""
        n = min(len(frames), self.capacity - (self._written - self._read))
        if n <= 0:
            return 0
        start = self._written % self.capacity
        first = min(n, self.capacity - start)
        buf = self.buf
        if frames.ndim == 1:  # (N,) -> broadcast over the ring's channels
            buf[start : start + first] = frames[:first, None]
            if n > first:
                buf[: n - first] = frames[first:n, None]
        else:
            buf[start : start + first] = frames[:first]
            if n > first:
                buf[: n - first] = frames[first:n]
        self._written += n
        return n

    def write_zeros(self, n: int) -> int:
        n = min(n, self.capacity - (self._written - self._read))
        if n <= 0:
            return 0
        start = self._written % self.capacity
        first = min(n, self.capacity - start)
        self.buf[start : start + first] = 0.0
        if n > first:
            self.buf[: n - first] = 0.0
        self._written += n
        return n

    def read_into(self, out: np.ndarray) -> int:
        """Copy up to len(out) frames into ``out`` (N, C); returns how many were copied
        (the rest of ``out`` is left untouched)."""
        n = min(len(out), self._written - self._read)
        if n <= 0:
            return 0
        start = self._read % self.capacity
        first = min(n, self.capacity - start)
        out[:first] = self.buf[start : start + first]
        if n > first:
            out[first:n] = self.buf[: n - first]
        self._read += n
        return n

    def skip(self, n: int) -> int:
        """Drop up to ``n`` unread frames (consumer side)."""
        n = min(n, self._written - self._read)
        if n > 0:
            self._read += n
        return max(n, 0)
