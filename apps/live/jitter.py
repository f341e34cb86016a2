"""The output side's jitter buffer policy: how far the output runs behind the input.

The output callback asks for a block; the worker fills the output ring from the input
stream's blocks. The pipeline's design delay ``P`` (``LiveSession.open``) is the hop framing's
deficit + one block for the callbacks' order (the output's block may come before the input's)
+ ``margin`` blocks (``--jitter-ms``) against the worker's jitter: made for a host that calls
each stream back one block at a time. PulseAudio (the ALSA ``pulse`` plugin, ``latency high``)
calls back in *bursts*: two 10 ms blocks every 20 ms per stream (issue 29's traces). The
output's burst then takes two blocks before the input's next burst is processed, and a worker
pass that slips past it misses a whole burst, not one block: with the design ``P`` the ring's
headroom at its lowest was 2 ms, and a normal worker pass (the 7.8 s underrun) or a 12 ms
stall (18.7 s) underran.

The policy (PulseAudio's loopback and WebRTC's NetEq likewise keep a target level sized to
the arrival pattern, grow on a late burst and shrink only slowly):

- **start-up** is the first ``startup_s`` of output stream time (at least ``measure_s`` of
  it with the signal playing). It measures the host's usual burst ``b`` (the samples the
  output takes at one wake-up: the mode over start-up's wake-ups). At its end the delay
  grows once to the design scaled to the burst: ``(b - block) * (1 + margin)`` zeros are
  played (one short insertion at ~1 s, ``startup_topup``; 0 for a one-block host), so the
  order and the margin terms hold a burst where they held a block. Nothing is trimmed in
  start-up. Underruns after start-up are the acceptance figure (``underruns_after_startup``).
- **an underrun** grows the delay by its shortfall (once per burst of underruns: the late
  samples stay in the ring as reserve), up to ``max_growth`` in all; beyond it they are
  skipped when they arrive. Growth is never trimmed back, and nothing is trimmed for
  ``hold_s`` after it.
- **trim** (hysteresis): the streams' offset ``d`` (input frames delivered less output frames
  played less frames trimmed: how far the input runs ahead, whatever the worker holds; the
  design has it between -burst and 0) is watched over windows of ``window_s``. When its
  lowest point in a window is ``hysteresis`` (a block) or more above 0, the output fell behind
  (an output stall: the input kept delivering) and that backlog is dropped from the ring,
  oldest first, down to 0: never into the design's range, never into the growth.

Pure integer bookkeeping on samples, no allocation: the output callback calls it. The stream
time ``now`` is output samples since the stream started.
"""

from __future__ import annotations

STARTUP, STEADY = 0, 1


class JitterPolicy:
    def __init__(
        self,
        sr: int,
        block: int,
        margin_blocks: float,
        max_growth: int,
        startup_s: float = 1.0,
        measure_s: float = 0.5,
        window_s: float = 2.0,
        hold_s: float = 30.0,
        hysteresis: int | None = None,
        max_burst_blocks: int = 4,
    ):
        if margin_blocks < 0 or max_growth < 0 or block < 1:
            raise ValueError(
                f"margin_blocks={margin_blocks}, max_growth={max_growth}, block={block}; "
                "expected >= 0, >= 0, >= 1"
            )
        self.sr, self.block = int(sr), int(block)
        self.margin = float(margin_blocks)
        self.max_growth = int(max_growth)
        self.startup = int(round(startup_s * sr))
        self.measure = int(round(measure_s * sr))
        self.window = max(int(round(window_s * sr)), 4 * self.block)
        self.hold = int(round(hold_s * sr))
        self.hysteresis = self.block if hysteresis is None else int(hysteresis)
        self.phase = STARTUP
        self.growth = 0  # samples the delay grew by (start-up burst, top-up, underruns)
        self.startup_topup = 0  # of which the top-up at the end of start-up
        self.startup_end: int | None = None  # stream time (samples) start-up ended at
        self.burst = 0  # samples the host takes at its usual wake-up (set at start-up's end)
        self.head_min: int | None = None  # the ring's lowest headroom after start-up
        self.trimmed = 0
        self.trims = 0
        self.growths = 0  # growth events after start-up (a burst of underruns counts once)
        self._signal_at: int | None = None
        self._burst_now = 0
        self._bursts = [0] * (max_burst_blocks + 1)  # start-up's wake-ups by blocks taken
        self._pending = 0  # top-up zeros still to play
        self._win_low: int | None = None
        self._win_left = self.window
        self._hold_until = 0
        self._last_short = -(1 << 62)  # stream time of the latest shortfall

    @property
    def settled(self) -> bool:
        """Start-up is over (underruns from here on count as "after start-up")."""
        return self.phase == STEADY

    def plan(self, now: int, avail: int, frames: int, wakeup: bool = True,
             offset: int = 0) -> tuple[int, int]:  # fmt: skip
        """Before a callback's read, with the signal playing: ``avail`` samples in the ring,
        ``frames`` asked for; ``wakeup``: this callback starts a new host wake-up (it came at
        least half a block after the one before; False: the same burst); ``offset``: the
        streams' offset ``d``. Returns (zeros to play first, the delay growing by as much;
        samples to drop from the ring's oldest first)."""
        if self._signal_at is None:
            self._signal_at = now
        if self.phase == STARTUP:
            if wakeup and self._burst_now:  # the previous wake-up's total, in blocks
                k = min((self._burst_now + self.block // 2) // self.block, len(self._bursts) - 1)
                self._bursts[k] += 1
            self._burst_now = frames if wakeup else self._burst_now + frames
            if now + frames < max(self.startup, self._signal_at + self.measure):
                return 0, 0
            self.phase = STEADY
            self.startup_end = now + frames
            n = max(self._bursts)  # the usual wake-up (a refill after a stall is not)
            self.burst = self.block * (self._bursts.index(n) if n else 1)
            extra = int(round(max(0, self.burst - self.block) * (1 + self.margin)))
            self._pending = max(0, min(extra, self.max_growth - self.growth))
            self.startup_topup = self._pending
            self._win_left = self.window
        if self._pending:
            g = min(self._pending, frames)
            self._pending -= g
            self.growth += g
            return g, 0
        head = avail - frames
        self.head_min = head if self.head_min is None else min(self.head_min, head)
        self._win_low = offset if self._win_low is None else min(self._win_low, offset)
        self._win_left -= frames
        if self._win_left > 0:
            return 0, 0
        excess, self._win_low, self._win_left = self._win_low, None, self.window
        if excess < self.hysteresis or now < self._hold_until:
            return 0, 0
        k = min(excess, avail - frames)  # the rest waits for the next window
        if k <= 0:
            return 0, 0
        self.trimmed += k
        self.trims += 1
        return 0, k

    def shortfall(self, now: int, short: int) -> int:
        """A read came up ``short`` samples (played as zeros). Returns how many of them grow
        the delay; the rest are owed (skipped from the ring when they arrive)."""
        grow = max(0, min(short, self.max_growth - self.growth))
        self.growth += grow
        if self.phase == STEADY:
            self._hold_until = now + self.hold
            if now - self._last_short > 4 * self.block:  # a new burst, not the same one
                self.growths += 1
            self._last_short = now
            self._win_low, self._win_left = None, self.window  # measure afresh
        return grow

    def grow_before_signal(self, frames: int) -> bool:
        """The start-up burst before the signal plays (see LiveSession._play): hold it back
        by ``frames`` zeros if the growth allows; True if it did."""
        if self.growth + frames > self.max_growth:
            return False
        self.growth += frames
        return True
