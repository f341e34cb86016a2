"""The live pipeline: two PortAudio streams (input, output), ring buffers and a worker thread.

    input callback (PortAudio thread)            worker thread
    indata ──copy──> in_ring ───────────────>  mix to mono -> soxr to 16 kHz -> hops ->
                                                processor.process_hop -> soxr to device rate
    output callback (another PortAudio thread)  (+ the recording, the statistics)
    outdata <─copy── out_ring <──────────────
                     (prefilled with P zeros)

The input and the output are separate streams, joined only through the rings: a duplex
stream waits for both directions at once, and PortAudio's ALSA duplex loop gives up
(``ContinuePoll(..., StreamDirection_In)``, "audio device lost") when the two ends are
clocked apart, as a virtual microphone's sink clocked by its recorders is from the capture
device. The callbacks only copy between PortAudio's buffers and preallocated ``SpscRing``s,
count xruns and store timestamps in preallocated slots: no array data is allocated, no lock
is taken, no I/O is done (STYLE item 9). Everything else runs in the worker. The callback
threads run at SCHED_FIFO, the worker just below them, and libpulse's mainloop threads (the
ALSA ``pulse`` plugin's, which move the samples to the server) with them, where permitted
(root, or an rtprio limit); elsewhere they keep the normal priority silently.

Latency bookkeeping: every input sample produces one output sample, so the pipeline (rings,
hop framing, resamplers) delays the signal by exactly the prefill ``P`` device samples; ``P``
is the largest deficit of the hop/resampler chain (simulated for these rates and block size)
plus one block for the callback order plus ``margin_blocks`` blocks for worker jitter; the
jitter buffer (``jitter.JitterPolicy``) scales the last two to the host's burst after the
first second (PulseAudio calls back two blocks at a time) by growing the delay once. A late
block (underrun) is played as zeros: the first ones grow the delay (up to ``max_growth_ms``),
later ones are skipped when they arrive, so the pipeline's share stays ``P + growth``
(less what backlog trimming dropped, plus the samples slipped to follow the streams' clock
drift, ``_follow_drift``): output sample ``k``
(counted from the output stream's start) carries input sample ``k - P - growth``. Each
callback stores its stream's epoch, the time its sample 0 was (would have been) converted:
ADC time less the input samples before the block, DAC time less the output samples before
it. End-to-end = output epoch - input epoch + ``P + growth`` + the model's look-ahead =
algorithmic latency + buffering latency; the report splits the buffering into the two
devices' own latencies (ADC -> input callback, output callback -> DAC), the pipeline
(``P + growth``) and ``streams``, how far the output stream runs behind the input stream
(0 for one duplex stream).

``--input-file``: the worker resamples the file to the device rate into a file ring; the
input callback feeds that ring to the pipeline in place of the microphone, so the same path
runs, on the microphone's clock. The microphone is still captured (recorded as a third
channel, "mic", sample for sample with the file): with the output looped back to the input
it measures the whole loop. Without an input device the output callback feeds the file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import threading
import time

import numpy as np

from qsa.errors import AudioError, ConfigError, QsaError

from .jitter import JitterPolicy
from .processors import Processor
from .ring import SpscRing
from .trace import CallbackTrace

RESAMPLE_QUALITIES = ("QQ", "LQ", "MQ", "HQ", "VHQ")
SFC_SET_UPDATE_HEADER_AUTO = 0x1061  # libsndfile: rewrite the WAV header after every write
STAT_HOPS = 4096  # hop-time / energy history kept for the statistics (~33 s at 8 ms hops)
HIST_BIN_S = 1e-5  # the whole-session hop-time histogram: 10 us bins up to 100 ms
HIST_BINS = 10000
DRIFT_WINDOW_S = 10.0  # clock-drift following: the offset's average over this much output
DRIFT_STEP_BLOCKS = 4  # a window whose offset spans more than this is a stall, not drift
DRIFT_MAX_PPM = 1000.0  # the most a window's slips follow (crystals differ by ~10-100 ppm)
XRUN_LOG = 16  # stream times of the latest xruns kept for the statistics


def process_start_perf() -> float | None:
    """The ``time.perf_counter()`` reading at which this process started (Linux: its start
    time in /proc/self/stat against CLOCK_BOOTTIME, 10 ms resolution), or None elsewhere: the
    start-up figures count from the command's launch, interpreter and imports included."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return time.perf_counter() - age


def list_devices() -> str:
    import sounddevice as sd

    devices = sd.query_devices()
    if len(devices) == 0:
        raise QsaError(
            "no audio devices: PortAudio finds no input or output device on this machine; "
            "connect one or start the audio server (PulseAudio / PipeWire), then run "
            "`qsa live -l` again (`qsa enhance IN OUT` needs no device)"
        )
    return str(devices)


@dataclasses.dataclass(frozen=True)
class LiveOptions:
    """What ``qsa live`` was asked to do (validated here, devices checked on open)."""

    input_device: int | str | None = None
    output_device: int | str | None = None
    samplerate: int | None = None  # device rate; None: 16 kHz if accepted, else the default
    block_ms: float = 10.0
    channels: int | None = None  # device channels (1 or 2); None: 1 if accepted, else 2
    input_file: str | None = None
    record: str | None = None
    bypass: bool = False
    duration: float | None = None
    resample_quality: str = "HQ"
    latency: str | float = "high"  # PortAudio suggested latency (sounddevice's default)
    margin_blocks: float = 1.0
    max_growth_ms: float = 100.0  # how far the jitter buffer may grow after underruns
    force: bool = False  # overwrite an existing --record file

    def __post_init__(self):
        if not 1.0 <= self.block_ms <= 200.0:
            raise ConfigError(f"--block-ms {self.block_ms}; expected 1 to 200 (10 is typical)")
        if self.samplerate is not None and not 8000 <= self.samplerate <= 384000:
            raise ConfigError(f"--samplerate {self.samplerate}; expected 8000 to 384000 Hz")
        if self.channels is not None and self.channels not in (1, 2):
            raise ConfigError(f"--channels {self.channels}; expected 1 or 2")
        if self.duration is not None and self.duration <= 0:
            raise ConfigError(f"--duration {self.duration}; expected a positive number of s")
        if self.resample_quality not in RESAMPLE_QUALITIES:
            raise ConfigError(
                f"resample quality {self.resample_quality!r}; expected one of "
                f"{RESAMPLE_QUALITIES}"
            )
        if self.margin_blocks < 0:
            raise ConfigError(f"margin_blocks={self.margin_blocks}; expected >= 0")
        if self.input_file is not None and not os.path.isfile(self.input_file):
            raise AudioError(f"--input-file {self.input_file}: no such file")
        if self.input_file is not None:
            import soundfile as sf

            try:
                with sf.SoundFile(self.input_file) as f:
                    _check_finite_file(f, self.input_file)
            except (RuntimeError, OSError) as e:  # sf.LibsndfileError is a RuntimeError
                raise AudioError(
                    f"--input-file {self.input_file}: not readable audio ({e}); expected WAV, "
                    "FLAC or OGG"
                ) from None
        if self.record is not None:
            rec = self.record
            src = self.input_file
            if src is not None and (os.path.abspath(rec) == os.path.abspath(src) or (
                    os.path.exists(rec) and os.path.samefile(rec, src))):
                raise ConfigError(f"--record {rec} is the --input-file; recording over it "
                                  "would destroy it: choose another --record path")
            if os.path.isdir(rec):
                raise ConfigError(f"--record {rec} is a folder; give a file name, e.g. "
                                  f"{os.path.join(rec, 'live.wav')}")
            if os.path.exists(rec) and not self.force:
                raise ConfigError(f"--record {rec} already exists; pass --force to overwrite "
                                  "it or choose another path")


def _device_error(kind: str, device, err: Exception) -> QsaError:
    name = "the default" if device is None else repr(device)
    return QsaError(
        f"{kind} device {name} is not available ({err}); list the devices with `qsa live -l` "
        f"and pass --{kind}-device with a number or a name from that list"
    )


def raise_thread_priority(fifo_priority: int | None = None) -> str:
    """Best effort: give the calling thread real-time (SCHED_FIFO, for the short bounded
    callback) or a higher nice priority (the worker: a model slower than real time must not
    monopolise a core at real-time priority); returns what was obtained ("normal" without
    the privilege). Called once per thread, not in the steady-state callback path."""
    tid = threading.get_native_id()
    if fifo_priority is not None:
        try:
            os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(fifo_priority))
            return "realtime"
        except (OSError, AttributeError):
            pass
    try:
        os.setpriority(os.PRIO_PROCESS, tid, -10)
        return "nice -10"
    except (OSError, AttributeError):
        return "normal"


def _hold_priority(fifo_priority: int):
    """SCHED_FIFO at ``fifo_priority`` for the calling thread; what to restore (its policy,
    parameters and nice value, with its id), or None where it was not permitted."""
    tid = threading.get_native_id()
    try:
        old = (tid, os.sched_getscheduler(tid), os.sched_getparam(tid),
               os.getpriority(os.PRIO_PROCESS, tid))  # fmt: skip
        os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(fifo_priority))
        return old
    except (OSError, AttributeError):
        return None


def _restore_priority(old) -> None:
    tid, policy, param, nice = old
    if tid != threading.get_native_id():
        return  # another thread: its scheduling is its own
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(tid, policy, param)
        os.setpriority(os.PRIO_PROCESS, tid, nice)


def raise_pulse_threads(fifo_priority: int = 20) -> str | None:
    """Best effort: SCHED_FIFO for libpulse's mainloop threads in this process ("threaded-ml":
    the ALSA ``pulse`` plugin runs one per stream; they move the samples between PortAudio's
    ring and the audio server, so a callback at real-time priority waits on them). Returns
    what was obtained ("realtime xN", "normal" without the privilege), None without such
    threads (no PulseAudio / PipeWire behind the device). Linux only; silent elsewhere."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    found = raised = 0
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() != "threaded-ml":
                    continue
        except OSError:
            continue
        found += 1
        try:
            os.sched_setscheduler(int(tid), os.SCHED_FIFO, os.sched_param(fifo_priority))
            raised += 1
        except (OSError, AttributeError):
            pass
    if not found:
        return None
    return f"realtime x{raised}" if raised == found else ("normal" if not raised else
                                                          f"realtime {raised} of {found}")


def _resampler(sr_in: int, sr_out: int, quality: str):
    if sr_in == sr_out:
        return None
    import soxr

    return soxr.ResampleStream(sr_in, sr_out, 1, dtype="float32", quality=quality)


def pipeline_deficit(sr_dev: int, sr_model: int, block: int, hop: int, quality: str) -> int:
    """Largest number of device samples the resample/hop chain holds back, simulated on
    silence for 3 s (soxr's streaming output comes in bursts that depend on rates and
    quality)."""
    rs_in = _resampler(sr_dev, sr_model, quality)
    rs_out = _resampler(sr_model, sr_dev, quality)
    zeros = np.zeros(block, np.float32)
    acc = fed = produced = worst = 0
    for _ in range(int(3 * sr_dev / block) + 1):
        fed += block
        acc += len(rs_in.resample_chunk(zeros)) if rs_in else block
        n = acc // hop * hop
        acc -= n
        if n:
            produced += len(rs_out.resample_chunk(np.zeros(n, np.float32))) if rs_out else n
        worst = max(worst, fed - produced)
    return worst


def _check_finite_file(f, name: str) -> None:
    """An :class:`AudioError` when the file holds NaN or Inf samples (read once, in blocks,
    before anything opens)."""
    pos = 0
    for b in f.blocks(blocksize=1 << 16, dtype="float32", always_2d=True):
        bad = ~np.isfinite(b)
        if bad.any():
            first = pos + int(np.argwhere(bad)[0, 0])
            raise AudioError(
                f"--input-file {name}: {int(bad.sum())} NaN or Inf sample(s) in the block "
                f"from sample {pos} (first at {first}, {first / f.samplerate:.3f} s); "
                "expected finite audio: re-export the file from its source"
            )
        pos += len(b)


class Recorder:
    """Input and enhanced output (and the device microphone in --input-file mode) at the
    model rate, float WAV. Written directly (not via a temporary file: a recording is a log)
    with the header rewritten after every write, so a crash, Ctrl-C or a lost device leaves
    a complete, valid file with everything up to the last hop."""

    def __init__(self, path: str, sr: int, with_mic: bool):
        import soundfile as sf

        self.path = path
        self.channels = 3 if with_mic else 2
        self.with_mic = with_mic
        from qsa.fileio import ensure_dir

        ensure_dir(os.path.dirname(os.path.abspath(path)), "--record folder")
        try:
            self.f = sf.SoundFile(
                path, "w", samplerate=sr, channels=self.channels, subtype="FLOAT", format="WAV"
            )
        except (OSError, RuntimeError) as e:
            raise AudioError(f"--record {path}: cannot write it ({e})") from None
        sf._snd.sf_command(self.f._file, SFC_SET_UPDATE_HEADER_AUTO, sf._ffi.NULL, 1)
        self._io: list[np.ndarray] = []  # pending (n, 2) rows waiting for mic samples
        self._mic: list[np.ndarray] = []
        self.frames = 0

    def push(self, x: np.ndarray, y: np.ndarray) -> None:
        rows = np.stack([x, y], axis=1)  # (n, 2)
        if not self.with_mic:
            self.f.write(rows)
            self.frames += len(rows)
            return
        self._io.append(rows)
        self._flush_aligned()

    def push_mic(self, m: np.ndarray) -> None:
        if self.with_mic and len(m):
            self._mic.append(m)
            self._flush_aligned()

    def _flush_aligned(self, pad: bool = False) -> None:
        io = np.concatenate(self._io) if self._io else np.zeros((0, 2), np.float32)
        mic = np.concatenate(self._mic) if self._mic else np.zeros(0, np.float32)
        # at the end, every input/output row is written (a missing mic tail is zeros); the
        # mic's few samples beyond the last hop are dropped
        n = len(io) if pad else min(len(io), len(mic))
        if n == 0:
            return
        rows = np.zeros((n, 3), np.float32)  # (n, 3): input, output, mic
        rows[: min(n, len(io)), :2] = io[:n]
        rows[: min(n, len(mic)), 2] = mic[:n]
        self.f.write(rows)
        self.frames += n
        self._io = [io[n:]] if len(io) > n else []
        self._mic = [mic[n:]] if len(mic) > n else []

    def close(self) -> None:
        if self.f.closed:
            return
        try:
            if self.with_mic:
                self._flush_aligned(pad=True)
        finally:
            self.f.close()


class LiveSession:
    """One run of the live pipeline. ``open()`` checks devices and allocates everything,
    ``start()`` starts the stream and the worker, ``stats()`` may be called any time,
    ``close()`` stops and saves (idempotent; also via ``with``)."""

    def __init__(self, processor: Processor, options: LiveOptions | None = None):
        self.proc = processor
        self.opt = options or LiveOptions()
        self.bypass = bool(self.opt.bypass)
        self.error: QsaError | None = None
        self.in_stream = None  # None: no input device (--input-file on an output-only host)
        self.out_stream = None
        self.recorder: Recorder | None = None
        self._stop = threading.Event()
        self.restarts = 0  # stream reopened after PortAudio stopped it (devices still there)
        self.max_restarts = 5
        self._worker: threading.Thread | None = None
        # start-up: perf_counter at the process start, with the processor ready (the model
        # loaded: the session is made after it), the stream started, and the first processed
        # sample handed to the device (with the process's CPU seconds by then)
        self._t_process = process_start_perf()
        self._t_ready = time.perf_counter()
        self._t_stream: float | None = None
        self._t_first_out: float | None = None
        self._cpu_first_out: float | None = None
        self._opened = False
        self._closed = False
        self.stream_stuck = False  # set by close() when the audio library did not return

    # -- setup ------------------------------------------------------------------------
    def open(self) -> LiveSession:
        import sounddevice as sd

        opt, proc = self.opt, self.proc
        self.sr_model = int(proc.sample_rate)
        self.hop = int(proc.hop)
        file_mode = opt.input_file is not None
        out_info = self._query(sd, opt.output_device, "output")
        try:
            in_info = self._query(sd, opt.input_device, "input")
        except QsaError:
            if not file_mode or opt.input_device is not None:
                raise
            in_info = None  # --input-file on an output-only machine: no mic channel
        self.in_name = in_info["name"] if in_info else None
        self.out_name = out_info["name"]
        self.duplex = in_info is not None  # an input device too (its own input stream)
        dev = (in_info["index"] if in_info else None, out_info["index"])
        self.sr_dev = self._pick_rate(sd, dev, in_info, out_info)
        self.ch_in, self.ch_out = self._pick_channels(sd, dev, in_info, out_info)
        self.block = max(1, round(self.sr_dev * opt.block_ms / 1000.0))
        B, sr = self.block, self.sr_dev
        deficit = pipeline_deficit(sr, self.sr_model, B, self.hop, opt.resample_quality)
        self.prefill = deficit + int(np.ceil(B * (1.0 + opt.margin_blocks)))
        # the resamplers' share of that delay (their filters' look-ahead and output bursts):
        # the chain's deficit less the hop framing's alone (the same blocks at the model rate)
        self.resampler_delay = 0
        if sr != self.sr_model:
            b16 = max(1, round(B * self.sr_model / sr))
            framing = pipeline_deficit(self.sr_model, self.sr_model, b16, self.hop, "HQ")
            self.resampler_delay = max(0, deficit - round(framing * sr / self.sr_model))

        # rings (device rate) and the callback's scratch block
        self.in_ring = SpscRing(2 * sr + 4 * B, 1 if file_mode else self.ch_in)
        self.mic_ring = SpscRing(2 * sr + 4 * B, self.ch_in) if file_mode and self.duplex else None
        self.file_ring = SpscRing(sr + 4 * B, 1) if file_mode else None
        self.out_ring = SpscRing(2 * sr + self.prefill + 4 * B, 1)
        self.out_ring.write_zeros(self.prefill)
        self._cb_block = np.zeros((4 * B, 1), np.float32)  # (4B, 1) file block for the callback

        # callback-owned counters (written only by the callback)
        self.n_callbacks = 0  # output callbacks (the stream time counts them)
        self.n_in_callbacks = 0
        self.callback_priority: str | None = None  # the output callback's thread
        self.in_callback_priority: str | None = None
        self.worker_priority: str | None = None
        self.pulse_priority: str | None = None  # libpulse's mainloop threads (ALSA pulse)
        self._frames_in = 0  # frames the input callbacks delivered (written or dropped)
        self._frames_out = 0  # frames the output callbacks played (signal or zeros)
        self.pa_input_overflows = 0
        self.pa_output_underflows = 0
        self.ring_overruns = 0  # input ring full: the worker stalled, a block was dropped
        self.dropped_in = 0  # samples dropped with those overruns
        self.ring_underruns = 0  # output ring short: a block was played (partly) as zeros
        # Shortfalls before the first processed sample reaches the device: the host fills its
        # buffer at start in a burst of callbacks faster than real time and drains the prefill
        # silence early. They only play more silence before the signal (the jitter buffer grows,
        # the latency figures include it); nothing is dropped, so they are counted apart.
        self.startup_ring_shortfalls = 0
        self.startup_device_underflows = 0
        self._played = 0  # samples taken from the output ring (prefill zeros first)
        self._lead = 0  # zeros played before the input stream's first block (not the ring's)
        # The jitter buffer (qsa.apps.live.jitter): the host's burst measured in start-up
        # and the delay grown once to the design scaled to it; the delay's growth after
        # underruns (never trimmed back); the backlog an output stall leaves trimmed, with
        # hysteresis, down to the design, never below it
        self.jb = JitterPolicy(sr, B, opt.margin_blocks,
                               max_growth=int(round(opt.max_growth_ms / 1000 * sr)))  # fmt: skip
        self.underruns_after_startup = 0  # ring underruns once the jitter buffer settled
        # The start-up burst lasts until the host's first callback that comes at least half a
        # block after the one before (on PortAudio's clock or ours). Until then processed
        # samples are held back once the prefill is played (zeros instead, the delay grows by
        # as much, within max_growth): a burst longer than the prefill would otherwise play a
        # little signal and then a gap of zeros, an audible glitch 40-60 ms into the stream.
        self._settled = False
        self._half_block_s = 0.5 * B / sr
        self.file_underruns = 0
        self.nonfinite_in = 0  # NaN/Inf input samples replaced by zeros before the model
        self.nonfinite_out = 0  # NaN/Inf output samples replaced by zeros before the device
        self._late = 0  # samples played as zeros that will be skipped when they arrive
        self.file_eof = False
        self._xrun_t = np.full(XRUN_LOG, np.nan)  # stream times (s) of the latest xruns
        self._n_xrun_events = 0
        # what each xrun coincided with: the gap since the previous callback (host side) and
        # how long the worker had gone without finishing a pass (our side), in seconds
        self._xrun_gap = np.full(XRUN_LOG, np.nan)
        self._xrun_pa_gap = np.full(XRUN_LOG, np.nan)  # the same gap on PortAudio's clock
        # the gap before the host's wake-up the xrun came in (a burst's later callbacks come
        # 0.1 ms apart: their own gap hides a server stall the burst is catching up on)
        self._xrun_wake_gap = np.full(XRUN_LOG, np.nan)
        self._wake_gap = 0.0
        self._xrun_worker_quiet = np.full(XRUN_LOG, np.nan)
        self._cb_last = 0.0  # perf_counter at the previous callback
        self._cb_gap = 0.0
        self._pa_last = 0.0  # PortAudio's currentTime at the previous callback
        self._pa_gap = 0.0  # host-side gap: PortAudio stamps it before Python is entered
        self.cb_gap_max = 0.0  # largest gap between callbacks after the first second
        self._worker_beat = 0.0  # perf_counter when the worker last finished a pass
        self._in_seen_t = 0.0  # perf_counter at the latest input callback
        # per callback (latest 256 of each stream), in PortAudio's stream time (s): the epoch
        # (when sample 0 was converted: ADC / DAC time less the samples before the block) and
        # the device's own latency (ADC -> callback, callback -> DAC)
        self._in_epoch = np.full(256, np.nan)
        self._out_epoch = np.full(256, np.nan)
        self._in_dev = np.full(256, np.nan)
        self._out_dev = np.full(256, np.nan)
        self._trace = CallbackTrace.from_env()  # QSA_LIVE_TRACE=PATH: per-callback rows

        # worker-owned statistics
        self.hops_done = 0
        self._hop_time = np.zeros(STAT_HOPS)
        self._hop_hist = np.zeros(HIST_BINS, np.int64)  # every hop of the session
        self._e_in = np.zeros(STAT_HOPS)
        self._e_out = np.zeros(STAT_HOPS)
        self._dropped_seen = 0
        self.out_ring_full = 0
        # clock-drift following (_follow_drift; worker-owned)
        self.slipped = 0
        self._slip_todo = 0
        self._d_sum, self._d_n = 0, 0
        self._d_t0 = self._d_ref = None
        self._d_marks = (0, 0)  # the jitter buffer's (trims, growths) at the reference
        self._d_lo, self._d_hi = 1 << 62, -(1 << 62)  # the offset's range in the window

        # resamplers and the file
        q = opt.resample_quality
        self.rs_in = _resampler(sr, self.sr_model, q)
        self.rs_mic = _resampler(sr, self.sr_model, q)
        self.rs_out = _resampler(self.sr_model, sr, q)
        self._acc = np.zeros(self.hop + 8 * B + 1024, np.float32)  # hop accumulator, 16 kHz
        self._n_acc = 0
        d = proc.signal_delay_samples
        self._bypass_line = np.zeros(d + self.hop, np.float32)  # delay line for bypass
        self._file = None
        if file_mode:
            import soundfile as sf

            try:
                self._file = sf.SoundFile(opt.input_file)
            except (RuntimeError, OSError) as e:
                raise AudioError(
                    f"--input-file {opt.input_file}: not readable audio ({e})"
                ) from None
            self.rs_file = _resampler(self._file.samplerate, sr, q)
            self._file_pending = np.zeros(0, np.float32)
            self._file_read_all = False
            self._file_done = False
            self._feed_file()  # fill the file ring before the stream starts
        if opt.record:
            self.recorder = Recorder(opt.record, self.sr_model, with_mic=self.mic_ring is not None)
        self._warm_up()

        try:
            self._make_streams(sd, dev)
        except (sd.PortAudioError, ValueError) as e:
            self._abort_streams()
            self._close_files()
            raise QsaError(
                f"cannot open the audio stream on input {self.in_name!r} / output "
                f"{self.out_name!r} at {sr} Hz, {B}-frame blocks ({e}); check the devices "
                "with `qsa live -l`, or pass --samplerate / --block-ms"
            ) from None
        self._opened = True
        return self

    def _warm_up(self, seconds: float = 0.25) -> None:
        """Run the processor on silence before the stream starts, then reset it: the first
        calls of a runtime (arena allocation, kernel selection, numpy's dispatch caches) take
        several steady hops each and would underrun the first blocks."""
        proc = self.proc
        x, y = np.zeros(proc.hop, np.float32), np.zeros(proc.hop, np.float32)
        for _ in range(max(1, int(seconds * self.sr_model / proc.hop))):
            proc.process_hop(x, y)
        proc.reset()

    def _make_streams(self, sd, dev) -> None:
        """The output stream, and the input stream when there is an input device: two
        streams, not one duplex stream (see the module docstring)."""
        kwargs = dict(
            samplerate=self.sr_dev,
            blocksize=self.block,
            dtype="float32",
            latency=self.opt.latency,
            finished_callback=self._finished,
        )
        self._stream_finished = False
        self.in_stream = self.out_stream = None
        if self.duplex:
            self.in_stream = sd.InputStream(
                device=dev[0], channels=self.ch_in, callback=self._in_callback, **kwargs
            )
        self.out_stream = sd.OutputStream(
            device=dev[1], channels=self.ch_out, callback=self._out_callback, **kwargs
        )

    @property
    def streams(self) -> list:
        return [s for s in (self.in_stream, self.out_stream) if s is not None]

    def _start_streams(self) -> None:
        """Input first: its samples wait in the rings for the output (measured, reported);
        an output started first would only play more of the prefill's silence."""
        for s in self.streams:
            s.start()
        self.pulse_priority = raise_pulse_threads()

    def _abort_streams(self) -> None:
        for s in self.streams:
            try:
                s.abort()
                s.close()
            except Exception:  # the device may be gone already
                pass

    def _reopen(self, timeout_s: float = 5.0) -> bool:
        """After the stream died: reopen it on the same devices if they are still there
        (PortAudio gives up on some recoverable xruns); False if a device is gone. Bounded
        like ``_close_stream``: with the audio server gone, PortAudio's abort / terminate can
        block for good (seen in CI: the session hung instead of reporting the lost device),
        so the attempt runs in a thread and, past ``timeout_s``, counts as failed with
        ``stream_stuck`` set (close() then leaves the stream alone)."""
        self.restarts += 1
        result: list[bool] = []
        done = threading.Event()

        def attempt() -> None:
            try:
                result.append(self._reopen_now())
            except Exception:
                result.append(False)
            finally:
                done.set()

        threading.Thread(target=attempt, name="qsa-live-reopen", daemon=True).start()
        if not done.wait(timeout_s):
            self.stream_stuck = True
            return False
        return bool(result and result[0])

    def _reopen_now(self) -> bool:
        import sounddevice as sd

        self._abort_streams()  # already broken; replaced below
        try:
            sd._terminate()  # re-enumerate: a vanished device must not be found again
            sd._initialize()
            devices = sd.query_devices()

            def find(name, kind):
                if name is None:
                    return None
                for i, d in enumerate(devices):
                    if d["name"] == name and d[f"max_{kind}_channels"] > 0:
                        return i
                raise ValueError(f"{kind} device {name!r} is gone")

            dev = (find(self.in_name, "input"), find(self.out_name, "output"))
            self._make_streams(sd, dev)
            # new PortAudio threads: each callback raises its own priority again; the input's
            # stall check waits for its first block again
            self.callback_priority = self.in_callback_priority = None
            self._in_seen_t = 0.0
            self._start_streams()
        except Exception:
            self._abort_streams()
            return False
        self._seen_t = time.monotonic()
        return True

    @staticmethod
    def _query(sd, device, kind):
        try:
            info = sd.query_devices(device, kind)
        except (ValueError, sd.PortAudioError) as e:
            raise _device_error(kind, device, e) from None
        if not info or info.get(f"max_{kind}_channels", 0) < 1:
            raise _device_error(kind, device, f"it has no {kind} channels")
        return info

    def _pick_rate(self, sd, dev, in_info, out_info) -> int:
        if self.opt.samplerate:
            return int(self.opt.samplerate)
        try:
            if in_info is not None:
                sd.check_input_settings(dev[0], samplerate=self.sr_model, dtype="float32")
            sd.check_output_settings(dev[1], samplerate=self.sr_model, dtype="float32")
            return self.sr_model
        except (sd.PortAudioError, ValueError):
            return int((in_info or out_info)["default_samplerate"])

    def _pick_channels(self, sd, dev, in_info, out_info) -> tuple[int, int]:
        def pick(check, device, info, kind):
            if self.opt.channels:
                return min(self.opt.channels, info[f"max_{kind}_channels"])
            try:
                check(device, channels=1, samplerate=self.sr_dev, dtype="float32")
                return 1
            except (sd.PortAudioError, ValueError):
                return min(2, info[f"max_{kind}_channels"])

        cin = pick(sd.check_input_settings, dev[0], in_info, "input") if in_info else 0
        return cin, pick(sd.check_output_settings, dev[1], out_info, "output")

    # -- the audio callbacks: copies and counters only ----------------------------------
    def _in_callback(self, indata, frames, time_info, status):
        """The input stream's: the microphone (or, with --input-file, the file in its place,
        the microphone into the mic ring) into the pipeline."""
        self.n_in_callbacks += 1
        self._in_seen_t = time.perf_counter()
        if self.in_callback_priority is None:  # once, on this stream's PortAudio thread
            self.in_callback_priority = raise_thread_priority(20)
        if status.input_overflow:
            self.pa_input_overflows += 1
            self._mark_xrun()
        adc = time_info.inputBufferAdcTime
        if adc > 0:  # 0: the host API does not know
            k = self.n_in_callbacks % 256
            self._in_epoch[k] = adc - self._frames_in / self.sr_dev
            self._in_dev[k] = time_info.currentTime - adc
        self._frames_in += frames
        if self._trace is not None:
            self._trace.inp_row(self._in_seen_t, time_info.currentTime, frames)
        if self.file_ring is None:
            w = self.in_ring.write(indata)
        else:
            if self.mic_ring is not None:
                self.mic_ring.write(indata)
            w = self._file_into_pipeline(frames)
        if w < frames:
            self.ring_overruns += 1
            self.dropped_in += frames - w
            self._mark_xrun()

    def _out_callback(self, outdata, frames, time_info, status):
        """The output stream's: the pipeline's output to the device (without an input
        stream it feeds the file into the pipeline first, on this stream's clock)."""
        self.n_callbacks += 1
        self._callback_gap(time_info.currentTime)
        if self.callback_priority is None:  # once, on this stream's PortAudio thread
            self.callback_priority = raise_thread_priority(20)
        if status.output_underflow:
            self._device_underflow()
        dac, now = time_info.outputBufferDacTime, time_info.currentTime
        k = self.n_callbacks % 256
        if dac > 0:
            self._out_epoch[k] = dac - self._frames_out / self.sr_dev
            self._out_dev[k] = dac - now
        if self.in_stream is None and self.file_ring is not None:
            if now > 0:  # the file enters now: its "ADC" time is this callback's
                self._in_epoch[k] = now - self._frames_out / self.sr_dev
                self._in_dev[k] = 0.0
            self._frames_in += frames
            w = self._file_into_pipeline(frames)
            if w < frames:
                self.ring_overruns += 1
                self.dropped_in += frames - w
                self._mark_xrun()
        self._frames_out += frames
        tr = self._trace
        if tr is None:
            self._play(outdata, frames)
            return
        avail, played = self.out_ring.available(), self._played
        self._play(outdata, frames)
        tr.out_row(self._cb_last, now, self._frames_in, self._frames_out, avail,
                   self._played - played, self.growth, self.trimmed, self._late,
                   self._frames_in - (self._frames_out - self._lead) - self.trimmed,
                   self.jb.head_min or 0)  # fmt: skip

    def _callback(self, indata, outdata, frames, time_info, status):
        """Both halves in one call, as one duplex callback would run them (the tests drive
        the pipeline through it, block by block)."""
        self._in_callback(indata, frames, time_info, status)
        self._out_callback(outdata, frames, time_info, status)

    def _callback_gap(self, pa_now: float) -> None:
        self._pa_gap = pa_now - self._pa_last if self._pa_last else 0.0
        self._pa_last = pa_now
        now = time.perf_counter()
        self._cb_gap = now - self._cb_last if self._cb_last else 0.0
        self._cb_last = now
        if max(self._pa_gap, self._cb_gap) >= self._half_block_s:  # a new host wake-up
            self._wake_gap = max(self._pa_gap, self._cb_gap)
        if self._cb_gap > self.cb_gap_max and self.n_callbacks * self.block > self.sr_dev:
            self.cb_gap_max = self._cb_gap

    def _device_underflow(self) -> None:
        if self._played > self.prefill:  # a processed sample was already played: a gap in it
            self.pa_output_underflows += 1
            self._mark_xrun()
        else:
            self.startup_device_underflows += 1

    def _mark_xrun(self) -> None:
        """Note the stream time of an xrun, the callback gap and the worker's quiet time before
        it, in preallocated slots (callback-safe)."""
        i = self._n_xrun_events % XRUN_LOG
        self._xrun_t[i] = self.n_callbacks * self.block / self.sr_dev
        self._xrun_gap[i] = self._cb_gap
        self._xrun_pa_gap[i] = self._pa_gap
        self._xrun_wake_gap[i] = self._wake_gap
        beat = self._worker_beat
        self._xrun_worker_quiet[i] = self._cb_last - beat if beat else np.nan
        self._n_xrun_events += 1

    def _file_into_pipeline(self, frames: int) -> int:
        block = self._cb_block[:frames]
        n = self.file_ring.read_into(block)
        if n < frames:
            block[n:] = 0.0
            if self._file_done:
                self.file_eof = True
            else:
                self.file_underruns += 1
        return self.in_ring.write(block)

    def _play(self, outdata, frames: int) -> None:
        ring = self.out_ring
        if self.duplex and self._frames_in == 0:
            # The input stream has delivered nothing yet: silence, outside the pipeline. An
            # output stream fills its buffer at start (and an idle PulseAudio source may
            # take up to 2 s for its first block): counted as the streams' offset, it must
            # not use up the prefill and the jitter buffer's growth meant for the signal.
            outdata[:frames] = 0.0
            self._lead += frames
            return
        if self._late:
            k = min(self._late, ring.available() - frames)
            if k > 0:
                self._late -= ring.skip(k)
        jb = self.jb
        if not self._settled:
            if max(self._pa_gap, self._cb_gap) >= self._half_block_s:
                self._settled = True
            elif self._played >= self.prefill and jb.grow_before_signal(frames):
                outdata[:frames] = 0.0  # still the start-up burst: hold the signal back
                self.startup_ring_shortfalls += 1
                return
        started = self._played > self.prefill  # the signal has reached the device
        now = self._frames_out - frames  # this block's stream time (samples)
        zeros = 0
        if started:  # the jitter buffer: a top-up (zeros first) or a trim (a backlog)
            wakeup = max(self._pa_gap, self._cb_gap) >= self._half_block_s
            # the streams' offset: how far the input runs ahead (see jitter.py)
            d = self._frames_in - (self._frames_out - self._lead) - jb.trimmed + self.slipped
            zeros, trim = jb.plan(now, ring.available(), frames, wakeup, d)
            if trim:
                ring.skip(trim)
            if zeros:
                outdata[:zeros] = 0.0
        n = ring.read_into(outdata[zeros:frames] if zeros else outdata)
        self._played += n
        if not started and self._played > self.prefill:  # its first sample, in this block
            self._t_first_out = self._cb_last  # this callback's perf_counter
            self._cpu_first_out = time.process_time()  # once a session
        if n < frames - zeros:
            outdata[zeros + n :] = 0.0
            if started:
                self.ring_underruns += 1
                if jb.settled:
                    self.underruns_after_startup += 1
                self._mark_xrun()
            else:
                self.startup_ring_shortfalls += 1
            short = frames - zeros - n
            # Adaptive jitter buffer: a shortfall (a host that calls back in bursts, a slow
            # start, a stall) grows the delay, up to ``max_growth``; beyond it late samples
            # are skipped so the latency stays bounded.
            self._late += short - jb.shortfall(now, short)

    @property
    def growth(self) -> int:
        """Samples the pipeline's delay grew by (start-up burst, top-up, underruns)."""
        return self.jb.growth

    @property
    def trimmed(self) -> int:
        """Samples of backlog dropped from the output ring (output stalls)."""
        return self.jb.trimmed

    @property
    def trims(self) -> int:
        return self.jb.trims

    def _finished(self) -> None:
        self._stream_finished = True

    # -- the worker ---------------------------------------------------------------------
    def _feed_file(self) -> None:
        """Keep the file ring topped up (file -> mono -> device rate). ``_file_done`` (read
        by the callback) turns true once the last sample is in the ring."""
        ring = self.file_ring
        while not self._file_done:
            if len(self._file_pending):
                w = ring.write(self._file_pending)
                self._file_pending = self._file_pending[w:]
                if len(self._file_pending):
                    return
            if self._file_read_all:
                self._file_done = True
                return
            if ring.space() < self.block:
                return
            x = self._file.read(2048, dtype="float32", always_2d=True)  # (n, C)
            self._file_read_all = len(x) < 2048
            x = x.mean(axis=1) if x.shape[1] > 1 else x[:, 0]  # (n,) mono
            if self.rs_file is not None:
                x = self.rs_file.resample_chunk(x, last=self._file_read_all)
            self._file_pending = np.ascontiguousarray(x, np.float32)

    def _take(self, ring: SpscRing, resampler) -> np.ndarray:
        n = ring.available()
        if n <= 0:
            return np.zeros(0, np.float32)
        x = np.empty((n, ring.channels), np.float32)  # (n, C)
        ring.read_into(x)
        x = x.mean(axis=1) if ring.channels > 1 else x[:, 0]  # (n,) mono
        if resampler is not None:
            x = resampler.resample_chunk(x)
        return np.ascontiguousarray(x, np.float32)

    def _work_once(self) -> bool:
        did = False
        if self._file is not None:
            self._feed_file()
        if self.mic_ring is not None and self.mic_ring.available():
            m = self._take(self.mic_ring, self.rs_mic)
            if self.recorder is not None:
                self.recorder.push_mic(m)
            did = True
        if not self.in_ring.available():
            return did
        x = self._take(self.in_ring, self.rs_in)
        lost = self.dropped_in - self._dropped_seen
        if lost:  # keep one output sample per input sample: stand in zeros for dropped ones
            self._dropped_seen += lost
            n16 = round(lost * self.sr_model / self.sr_dev)
            x = np.concatenate([np.zeros(n16, np.float32), x])
        self._process(x)
        return True

    def _process(self, x: np.ndarray) -> None:
        hop, acc = self.hop, self._acc
        if self._n_acc + len(x) > len(acc):
            self._acc = acc = np.concatenate([acc[: self._n_acc], np.zeros(len(x), np.float32)])
        acc[self._n_acc : self._n_acc + len(x)] = x
        self._n_acc += len(x)
        n_hops = self._n_acc // hop
        if n_hops == 0:
            return
        ins = acc[: n_hops * hop].copy()
        if not np.isfinite(ins).all():  # a broken capture driver: never into the model
            bad = ~np.isfinite(ins)
            self.nonfinite_in += int(bad.sum())
            ins[bad] = 0.0
        outs = np.empty(n_hops * hop, np.float32)
        d = len(self._bypass_line) - hop
        for t in range(n_hops):
            s = slice(t * hop, (t + 1) * hop)
            t0 = time.perf_counter()
            self.proc.process_hop(ins[s], outs[s])
            dt = time.perf_counter() - t0
            line = self._bypass_line
            line[d:] = ins[s]
            if self.bypass:
                outs[s] = line[:hop]
            line[:d] = line[hop:]
            k = self.hops_done % STAT_HOPS
            self._hop_time[k] = dt
            self._hop_hist[min(int(dt / HIST_BIN_S), HIST_BINS - 1)] += 1
            self._e_in[k] = float(np.dot(ins[s], ins[s])) / hop
            self._e_out[k] = float(np.dot(outs[s], outs[s])) / hop
            self.hops_done += 1
        if not np.isfinite(outs).all():  # a model that produced NaN/Inf: silence, counted
            bad = ~np.isfinite(outs)
            self.nonfinite_out += int(bad.sum())
            outs[bad] = 0.0
        rest = self._n_acc - n_hops * hop
        acc[:rest] = acc[n_hops * hop : self._n_acc]
        self._n_acc = rest
        y = self.rs_out.resample_chunk(outs) if self.rs_out is not None else outs
        y = self._follow_drift(y)
        if self.out_ring.write(np.ascontiguousarray(y, np.float32)) < len(y):
            self.out_ring_full += 1  # only when the device stopped pulling samples
        if self.recorder is not None:  # after the audio is out: a slow disk only delays this
            self.recorder.push(ins, outs)

    def _follow_drift(self, y: np.ndarray) -> np.ndarray:
        """Clock drift between the input and the output stream (two devices, or two null
        sinks: 72 ppm in issue 29's 10-minute session) moves the streams' offset ``d`` a
        block every ~2 minutes and eats the jitter buffer's reserve. Once start-up is over,
        the worker averages ``d`` over windows of ``DRIFT_WINDOW_S``; ``v`` = that average +
        ``slipped``. When ``v`` has moved half a block or more from the first window's, the
        worker slips single samples at the quietest point of a pass's output (one a pass at
        most: a repeated sample to stretch, a dropped one to shrink) until it is back, as
        PulseAudio's loopback steers its resampler; at most ``DRIFT_MAX_PPM`` of a window per
        window. A window in which the offset jumped (spanning more than ``DRIFT_STEP_BLOCKS``
        blocks: a stall's backlog) or the jitter buffer trimmed or grew is not drift: the
        reference is taken again from the next window (so the follower never puts back what a
        trim dropped). ``slipped`` counts the slips (+ inserted); the delay report and the
        backlog trim include them."""
        if not self.jb.settled or self.in_stream is None or len(y) < 2:
            return y
        d = self._frames_in - (self._frames_out - self._lead) - self.jb.trimmed
        self._d_sum += d
        self._d_n += 1
        self._d_lo, self._d_hi = min(self._d_lo, d), max(self._d_hi, d)
        now = self._frames_out
        if self._d_t0 is None:
            self._d_t0 = now
        elif now - self._d_t0 >= DRIFT_WINDOW_S * self.sr_dev:
            v = self._d_sum / self._d_n + self.slipped
            span = self._d_hi - self._d_lo
            self._d_sum, self._d_n, self._d_t0 = 0, 0, now
            self._d_lo, self._d_hi = 1 << 62, -(1 << 62)
            marks = (self.jb.trims, self.jb.growths)
            if marks != self._d_marks or span > DRIFT_STEP_BLOCKS * self.block:
                # the offset jumped in this window (an output stall's backlog, not yet
                # trimmed) or the jitter buffer moved it on purpose (a trim, a growth): not
                # drift. The reference starts again from the next window; otherwise the
                # follower would put back what a trim dropped (issue 29, run final10b)
                self._d_marks, self._d_ref, self._slip_todo = marks, None, 0
            elif self._d_ref is None:
                self._d_ref = v
            else:
                err = v - self._d_ref  # < 0: the output runs ahead of the input
                cap = max(1, round(DRIFT_MAX_PPM * 1e-6 * DRIFT_WINDOW_S * self.sr_dev))
                self._slip_todo = (max(-cap, min(cap, -round(err)))
                                   if abs(err) >= self.block / 2 else 0)  # fmt: skip
        if self._slip_todo:
            k = int(np.argmin(np.abs(y)))
            step = 1 if self._slip_todo > 0 else -1
            y = np.insert(y, k, y[k]) if step > 0 else np.delete(y, k)
            self._slip_todo -= step
            self.slipped += step
        return y

    def _demote_if_slow(self) -> None:
        n = min(self.hops_done, STAT_HOPS, 256)
        idx = np.arange(self.hops_done - n, self.hops_done) % STAT_HOPS
        if float(np.mean(self._hop_time[idx])) > 0.8 * self.hop / self.sr_model:
            with contextlib.suppress(OSError):
                os.sched_setscheduler(threading.get_native_id(), os.SCHED_OTHER,
                                      os.sched_param(0))  # fmt: skip
            self.worker_priority = "demoted: " + raise_thread_priority()

    def _worker_main(self) -> None:
        import sys

        torch = sys.modules.get("torch")  # loaded by a torch processor; importing it for an
        if torch is not None:  # ONNX / LiteRT one would add a second to the start-up
            torch.set_num_threads(1)
        # Real-time like the callback (below it), as long as the model keeps up: a model
        # slower than real time is demoted so it cannot monopolise a core.
        self.worker_priority = raise_thread_priority(5)
        poll = min(0.002, self.block / self.sr_dev / 4)
        try:
            tr, beat = self._trace, time.perf_counter()
            while not self._stop.is_set():
                t0, h0 = time.perf_counter(), self.hops_done
                busy = self._work_once()
                self._worker_beat = time.perf_counter()
                if tr is not None and (busy or self._worker_beat - beat > 0.006):
                    # a busy pass, or an idle one that ended > 6 ms after the previous one
                    # (a late wake-up: hops -1); the gaps follow from the "t" column
                    tr.work_row(self._worker_beat, self._worker_beat - t0,
                                self.hops_done - h0 if busy else -1,
                                self.out_ring.available())  # fmt: skip
                beat = self._worker_beat
                if not busy:
                    time.sleep(poll)
                elif self.worker_priority == "realtime" and self.hops_done >= 256:
                    self._demote_if_slow()
            while self._work_once():  # drain what the callback delivered before stopping
                pass
        except QsaError as e:
            self.error = e
        except Exception as e:  # a runtime failing mid-stream: report it, stop cleanly
            self.error = QsaError(f"the model failed while streaming: {type(e).__name__}: {e}")

    # -- control ------------------------------------------------------------------------
    def start(self) -> None:
        if not self._opened:
            self.open()
        # Python's full garbage collection walks every tracked object: ~400K once torch and a
        # runtime are loaded, 215 ms with the GIL held, so the worker and the callback stall
        # and the output underruns (seen every few minutes in 10-minute sessions). Freeze
        # what exists now (the models, modules, caches) out of the collector for the session.
        gc.collect()
        gc.freeze()
        self._gc_frozen = True
        if self._trace is not None:
            gc.callbacks.append(self._trace.gc_callback)
        # The thread that runs the session (the terminal view, --json-stats) takes the GIL
        # too: descheduled while holding it on a busy host (a nice'd process beside a
        # training run waits tens of ms for a core), it stalls the callbacks and the worker
        # behind it. It runs at real-time priority too, below them, until close().
        self._main_sched = _hold_priority(1)
        self.session_priority = "realtime" if self._main_sched is not None else "normal"
        self._worker = threading.Thread(target=self._worker_main, name="qsa-live", daemon=True)
        self._worker.start()
        self.t_start = time.monotonic()
        self._start_streams()
        self._t_stream = time.perf_counter()

    def check_alive(self, stall_s: float = 2.0) -> None:
        """Raise QsaError if the device vanished (stream died or callbacks stopped)."""
        if self.error is not None:
            raise self.error
        now = time.monotonic()
        if self.n_callbacks != getattr(self, "_seen_cb", -1):
            self._seen_cb, self._seen_t = self.n_callbacks, now
        stalled = now - getattr(self, "_seen_t", now) > stall_s
        # the input stream stopped delivering once it had started (its device went away;
        # before its first block an idle capture device may take a while)
        in_t = self._in_seen_t
        stalled = stalled or (in_t > 0 and time.perf_counter() - in_t > stall_s
                              and self.in_stream is not None)  # fmt: skip
        active = all(s.active for s in self.streams)
        if self._stream_finished or not active or stalled:
            if self.restarts < self.max_restarts and self._reopen():
                return
            why = "the stream stopped" if not stalled else f"no audio for {stall_s:.0f} s"
            self.error = QsaError(
                f"audio device lost: input {self.in_name!r}, output {self.out_name!r} "
                f"({why}); check the device is connected and see `qsa live -l`"
            )
            raise self.error

    @property
    def done(self) -> bool:
        """--input-file played out (plus the pipeline tail), or --duration reached."""
        if self.opt.duration is not None and self.elapsed >= self.opt.duration:
            return True
        if self.file_eof:
            if not hasattr(self, "_eof_at"):
                self._eof_at = self.n_callbacks
            dev_in, dev_out, streams = self._latency_parts()
            device = min(dev_in + dev_out + max(streams, 0.0), 2.0)  # a confused host may
            tail = self.prefill + self.growth + (device + 0.25) * self.sr_dev  # say seconds
            return (self.n_callbacks - self._eof_at) * self.block >= tail
        return False

    @property
    def elapsed(self) -> float:
        return self.n_callbacks * self.block / self.sr_dev

    def _latency_parts(self) -> tuple[float, float, float]:
        """Seconds: (input device: ADC -> input callback, output device: output callback ->
        DAC, streams: the output epoch less the input epoch less both), medians of the
        latest 256 callbacks of each stream. Where the host API gives no timestamps, each
        stream's own ``latency`` (PortAudio's figure at open) and 0 for the streams."""

        def med(a):
            a = a[np.isfinite(a)]
            return float(np.median(a)) if a.size else None

        dev_in, dev_out = med(self._in_dev), med(self._out_dev)
        if dev_in is None:
            dev_in = float(self.in_stream.latency) if self.in_stream is not None else 0.0
        if dev_out is None:
            dev_out = float(self.out_stream.latency) if self.out_stream is not None else 0.0
        e_in, e_out = med(self._in_epoch), med(self._out_epoch)
        # output sample k carries input sample k - lead - P - growth + trimmed - slipped
        streams = 0.0 if e_in is None or e_out is None else (
            e_out - e_in + (self._lead - self.trimmed) / self.sr_dev - dev_in - dev_out)
        return max(dev_in, 0.0), max(dev_out, 0.0), streams

    @property
    def device_latency_s(self) -> float:
        """The devices' own latency (input + output), seconds."""
        dev_in, dev_out, _ = self._latency_parts()
        return dev_in + dev_out

    @property
    def device_latency_spread_s(self) -> float:
        """Half the 10-90 % range of the per-callback epochs (ADC / DAC time less the samples
        before the block), the input's and the output's added (seconds): how far the audio
        server's own timestamps move from callback to callback, which bounds how well
        ``device`` + ``streams`` (from their medians) can know the true figure. 0 before
        any callback."""

        def half_range(a):
            a = a[np.isfinite(a)]
            if a.size < 2:
                return 0.0
            lo, hi = np.percentile(a, [10, 90])
            return float(hi - lo) / 2

        return half_range(self._in_epoch) + half_range(self._out_epoch)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self.streams and not self.stream_stuck:
                self._close_stream()
        finally:
            self._stop.set()
            if self._worker is not None:
                self._worker.join(timeout=10)
            self._close_files()
            if getattr(self, "_trace", None) is not None:
                if self._trace.gc_callback in gc.callbacks:
                    gc.callbacks.remove(self._trace.gc_callback)
                with contextlib.suppress(OSError, QsaError):
                    self._trace.save()
            if getattr(self, "_gc_frozen", False):
                gc.unfreeze()
                self._gc_frozen = False
            if getattr(self, "_main_sched", None) is not None:
                _restore_priority(self._main_sched)
                self._main_sched = None

    def _close_stream(self, timeout_s: float = 3.0) -> None:
        """Abort and close the stream, waiting at most ``timeout_s``. abort, not stop: stop()
        waits until the output buffers have played. A host API call into an audio server that
        stopped answering can block for good (seen in CI: Ctrl-C hung past 30 s); then
        ``stream_stuck`` is set, the recording is saved anyway, and the CLI exits without
        waiting for the audio library (``qsa.commands.live``)."""
        done = threading.Event()

        def close() -> None:
            try:
                self._abort_streams()  # the device may be gone already; we still save
            finally:
                done.set()

        threading.Thread(target=close, name="qsa-live-close", daemon=True).start()
        self.stream_stuck = not done.wait(timeout_s)

    def _close_files(self) -> None:
        if self.recorder is not None:
            self.recorder.close()
        if self._file is not None:
            self._file.close()

    def __enter__(self):
        if not self._opened:
            self.open()
        return self

    def __exit__(self, *exc):
        self.close()

    # -- statistics ---------------------------------------------------------------------
    def _jitter_stats(self) -> dict:
        jb, ms = self.jb, 1000 / self.sr_dev

        def r(v):
            return None if v is None else round(v * ms, 2)

        return {"startup_end_s": None if jb.startup_end is None
                else round(jb.startup_end / self.sr_dev, 3),
                "burst_ms": r(jb.burst), "startup_topup_ms": r(jb.startup_topup),
                "headroom_min_ms": r(jb.head_min), "growth_events": jb.growths}  # fmt: skip

    def _xrun_log(self, values: np.ndarray, scale: float = 1.0, nd: int = 2) -> list:
        """The latest ``XRUN_LOG`` entries of a per-xrun slot array, oldest first."""
        n = self._n_xrun_events
        idx = np.arange(max(0, n - XRUN_LOG), n) % XRUN_LOG
        return [None if not np.isfinite(v) else round(float(v) * scale, nd) for v in values[idx]]

    def _xrun_times(self) -> list[float]:
        """Stream times (s) of the latest ``XRUN_LOG`` xruns, oldest first."""
        return self._xrun_log(self._xrun_t)

    def _session_p99_ms(self) -> float | None:
        """p99 of the hop time over the whole session (upper edge of its 10 us bin)."""
        total = int(self._hop_hist.sum())
        if total == 0:
            return None
        k = int(np.searchsorted(np.cumsum(self._hop_hist), 0.99 * total))
        return round((k + 1) * HIST_BIN_S * 1000, 3)

    def _session_max_ms(self) -> float | None:
        """The slowest hop of the whole session (upper edge of its bin; 100 ms: at least)."""
        nz = np.flatnonzero(self._hop_hist)
        return round((int(nz[-1]) + 1) * HIST_BIN_S * 1000, 3) if nz.size else None

    def startup(self) -> dict:
        """Seconds from the process start (None: not yet, or no /proc) until the processor
        was ready (model loaded), the stream started, and the first processed sample went to
        the device (``first_output``; ``first_output_cpu``: the process's CPU seconds by
        then, the figure to compare on a loaded host, where wall time stretches)."""
        t0 = self._t_process

        def since(t):
            return None if t is None or t0 is None else round(t - t0, 3)

        cpu = self._cpu_first_out
        return {"model_ready": since(self._t_ready), "stream_started": since(self._t_stream),
                "first_output": since(self._t_first_out),
                "first_output_cpu": None if cpu is None else round(cpu, 3)}  # fmt: skip

    def stats(self) -> dict:
        """The figures of the live view, JSON-ready."""
        n = min(self.hops_done, STAT_HOPS)
        hop_s = self.hop / self.sr_model
        t = self._hop_time[:n] if n else np.zeros(1)
        e_in, e_out = self._e_in[:n], self._e_out[:n]
        last = (np.arange(self.hops_done - min(n, 12), self.hops_done) % STAT_HOPS) if n else []

        def dbfs(e):
            return round(10 * np.log10(max(float(np.mean(e)), 1e-12)), 1) if len(e) else None

        def snr(e):  # speech peaks over the noise floor: 90th over 10th percentile energy
            if len(e) < 50:
                return None
            lo, hi = np.percentile(e, [10, 90])
            return float(10 * np.log10(max(hi, 1e-12) / max(lo, 1e-12)))

        s_in, s_out = snr(e_in), snr(e_out)
        dev_in, dev_out, streams = self._latency_parts()
        dev_ms = (dev_in + dev_out) * 1000
        streams_ms = streams * 1000
        pipe_ms = (self.prefill + self.growth + self.slipped) / self.sr_dev * 1000
        alg_ms = self.proc.algorithmic_latency_samples / self.sr_model * 1000
        buf_ms = dev_ms + streams_ms + pipe_ms - hop_s * 1000
        return {
            "t": round(self.elapsed, 2),
            "model": self.proc.name,
            "bypass": self.bypass,
            # the strength control (qsa.apps.live.processors.AttenLimited); None: no limit
            "atten_lim_db": getattr(self.proc, "atten_lim_db", None),
            "input_dbfs": dbfs(self._e_in[last]) if n else None,
            "output_dbfs": dbfs(self._e_out[last]) if n else None,
            "snr_in_db": None if s_in is None else round(s_in, 1),
            "snr_out_db": None if s_out is None else round(s_out, 1),
            "snr_gain_db": None if s_in is None or s_out is None else round(s_out - s_in, 1),
            "hop_ms_median": round(float(np.median(t)) * 1000, 3),
            "hop_ms_p99": round(float(np.percentile(t, 99)) * 1000, 3),
            "hop_ms_max": round(float(np.max(t)) * 1000, 3),
            "session_hop_ms_p99": self._session_p99_ms(),
            "session_hop_ms_max": self._session_max_ms(),
            "rtf": round(float(np.mean(t)) / hop_s, 4),
            "latency_ms": {
                "algorithmic": round(alg_ms, 2),
                "buffering": round(buf_ms, 2),
                "device": round(dev_ms, 2),  # input + output device
                "device_in": round(dev_in * 1000, 2),  # ADC -> input callback
                "device_out": round(dev_out * 1000, 2),  # output callback -> DAC
                # +- how far the server's per-callback timestamps spread (see
                # device_latency_spread_s): the uncertainty of "device" + "streams" and
                # so of "end_to_end"
                "device_spread": round(self.device_latency_spread_s * 1000, 2),
                # how far the output stream runs behind the input stream: the two streams'
                # samples waiting in the rings besides the pipeline's (0: one duplex stream)
                "streams": round(streams_ms, 2),
                "pipeline": round(pipe_ms, 2),
                # part of "pipeline": the device-rate <-> model-rate resampling (0 at the
                # model's rate); --resample-quality trades it against the resampler's error
                "resampler": round(self.resampler_delay / self.sr_dev * 1000, 2),
                "end_to_end": round(alg_ms + buf_ms, 2),
            },
            "overruns": self.ring_overruns + self.pa_input_overflows,
            "underruns": self.ring_underruns + self.pa_output_underflows,
            "xruns": {
                "ring_overruns": self.ring_overruns,
                "ring_underruns": self.ring_underruns,
                "device_input_overflows": self.pa_input_overflows,
                "device_output_underflows": self.pa_output_underflows,
                "file_underruns": self.file_underruns,
            },
            "nonfinite_samples": {"input": self.nonfinite_in, "output": self.nonfinite_out},
            "startup_shortfalls": {  # before the signal started: more silence first, no loss
                "ring": self.startup_ring_shortfalls,
                "device": self.startup_device_underflows,
            },
            "xrun_times_s": self._xrun_times(),
            # per xrun (same order): ms since the previous callback as Python saw it and as
            # PortAudio stamped it (before the GIL is taken: a long PortAudio gap is the host,
            # a long Python gap alone is another thread holding the GIL), and ms the worker
            # had gone without finishing a pass
            "xrun_callback_gap_ms": self._xrun_log(self._xrun_gap, 1000, 1),
            "xrun_portaudio_gap_ms": self._xrun_log(self._xrun_pa_gap, 1000, 1),
            "xrun_wakeup_gap_ms": self._xrun_log(self._xrun_wake_gap, 1000, 1),
            "xrun_worker_quiet_ms": self._xrun_log(self._xrun_worker_quiet, 1000, 1),
            "callback_gap_ms_max": round(self.cb_gap_max * 1000, 1),
            "restarts": self.restarts,
            # the output ring's backlog dropped after the output stream fell behind the input
            # stream (the jitter buffer's trim): how often, and how much audio in all
            "trimmed": {"events": self.trims,
                        "ms": round(self.trimmed / self.sr_dev * 1000, 2)},  # fmt: skip
            "startup_s": self.startup(),  # from the command's launch to enhanced audio
            "jitter_growth_ms": round(self.growth / self.sr_dev * 1000, 2),
            # the jitter buffer (qsa.apps.live.jitter): start-up ends at startup_end_s of
            # stream time (None: not yet); the host's usual burst, the one top-up to the
            # design scaled to it, the ring's lowest headroom since, growth events after
            # start-up; and the ring's underruns after start-up (issue 29's figure)
            "jitter_buffer": self._jitter_stats(),
            # clock drift between the streams followed by slipping single samples: + inserted
            "drift_slipped_samples": self.slipped,
            "underruns_after_startup": self.underruns_after_startup,
            "priority": {"callback": self.callback_priority,
                         "input_callback": self.in_callback_priority,
                         "worker": self.worker_priority, "pulse": self.pulse_priority,
                         "session": getattr(self, "session_priority", None)},
            "hops": self.hops_done,
            "hop": self.hop,
            "samplerate": self.sr_dev,
            "block": self.block,
            "channels": [self.ch_in, self.ch_out],
            "input_device": self.in_name,
            "output_device": self.out_name,
            "recorded_s": (
                round(self.recorder.frames / self.sr_model, 2) if self.recorder else None
            ),
        }
