"""`qsa live` on a real audio stack: PulseAudio with null sinks, PortAudio, sounddevice.

The module starts a private PulseAudio server (its own XDG_RUNTIME_DIR, flags that work as
root too) with three null sinks at 16 kHz float: ``loop`` (the app plays into it and records
its monitor: output looped back to the input), ``room`` (a player puts noisy speech into it,
its monitor is the microphone) and ``speaker``. The server is torn down at the end.

The enhancer is ``qcgan-35k`` once its trained weights ship in the package, otherwise the
reference quaternion low-pass (closed-form offline output, removes the noise above 4 kHz).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.signal as ss
import soundfile as sf

from qsa.apps.live.pulse import PrivatePulse

SR = 16000
BLOCK_MS = 10.0

pytestmark = [
    pytest.mark.skipif(
        shutil.which("pulseaudio") is None or shutil.which("espeak-ng") is None,
        reason="needs the pulseaudio and espeak-ng packages (scripts/system_packages.sh)",
    ),
    pytest.mark.realtime,  # make test runs it alone: a loaded CPU drops real-time audio
]


# -- the audio server ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pulse():
    p = PrivatePulse({"loop": SR, "loop48": 48000, "room": SR, "speaker": SR})
    yield p
    p.stop()


# -- signals ---------------------------------------------------------------------------------
def speech(text: str, voice: str = "en-us") -> np.ndarray:
    import soxr

    with tempfile.TemporaryDirectory() as d:
        wav = Path(d) / "s.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-s", "170", "-w", str(wav), text], check=True)
        x, sr = sf.read(wav, dtype="float32")
    return soxr.resample(x, sr, SR).astype(np.float32)


class Enhancer:
    """What the live app runs and what its output must equal offline."""

    def __init__(self, which: str | None = None):
        import os

        from qsa.hub import shipped_weights

        # The loop-back tests run the real-time reference filter by default (closed-form
        # output, noise above 4 kHz that it removes); QSA_LIVE_TEST_MODEL=qcgan-35k runs them
        # all on the shipped model. The microphone test runs both (below). Eager-torch
        # qcgan-35k steps an 8 ms hop in 2.5 ms on one core of this 2-core machine since the
        # dense-path weight cache (5.3 ms before, 11 ms under load: not real time then).
        wanted = which or os.environ.get("QSA_LIVE_TEST_MODEL", "reference")
        if wanted == "qcgan-35k":
            assert shipped_weights("qcgan-35k") is not None, "qcgan-35k's weights must ship"
            import qsa
            from qsa.apps.live import TorchStepProcessor

            self.model = "qcgan-35k"
            self.proc = TorchStepProcessor(qsa.load("qcgan-35k"), name="qcgan-35k")
            self.hf_noise = False  # a trained enhancer: broadband noise
        else:
            from qsa.apps.live import REFERENCE_NAME, load_processor

            self.model = REFERENCE_NAME
            self.proc = load_processor(REFERENCE_NAME)
            self.hf_noise = True  # the low-pass removes noise above 4 kHz
        # the app runs what `offline` checks against: the eager torch step (`qsa live`'s
        # default `auto` would export qcgan-35k to LiteRT)
        self.live_args = ["--model", self.model, "--runtime", "torch"]

    def offline(self, x: np.ndarray) -> np.ndarray:
        y = self.proc.process_offline(x)
        if self.model != "qcgan-35k":  # closed form, independent of torch
            from qsa.apps.live import lowpass_taps

            ref = ss.lfilter(lowpass_taps(), 1.0, x[: len(y)]).astype(np.float32)
            np.testing.assert_allclose(y, ref, atol=2e-6)
        return y

    def noise(self, n: int, rng) -> np.ndarray:
        w = rng.standard_normal(n).astype(np.float32)
        if self.hf_noise:
            w = ss.sosfilt(ss.butter(8, 5000, "high", fs=SR, output="sos"), w).astype(np.float32)
        return w


@pytest.fixture(scope="module")
def enhancer():
    return Enhancer()


PREROLL = SR  # 1 s of digital silence first: audio servers settle while a stream starts
NOISE_LEAD = SR // 2  # then 0.5 s of noise only: where the noise level is measured
CLICK_GAP = SR // 2
# A new stream through PulseAudio's null sink at 48 kHz settles for up to ~5 s: the server
# inserts short stretches of silence while the stream's buffer fills, so the loop's delay
# creeps up by ~9 ms (0.2 %) and then holds, exact to -64 dB (measured on an idle machine,
# 2026-12-02; not seen at 16 kHz). The loop-back runs start with this much silence.
SETTLE_S = 6.0


@pytest.fixture(scope="module")
def noisy(tmp_path_factory, enhancer):
    return make_noisy(tmp_path_factory, enhancer)


def make_noisy(tmp_path_factory, enhancer):
    """silence, noise-only lead, speech + noise at 5 dB SNR, then a click in noise;
    (path, x, click index)."""
    rng = np.random.default_rng(0)
    s = speech("Quaternion networks remove the noise from live speech.")
    s = 0.3 * s / np.max(np.abs(s))
    body = np.concatenate([np.zeros(NOISE_LEAD, np.float32), s, np.zeros(CLICK_GAP, np.float32)])
    click = len(body)
    body = np.concatenate([body, np.zeros(SR // 2, np.float32)])
    n = enhancer.noise(len(body), rng)
    n *= np.sqrt(np.mean(s**2) / 10 ** (5 / 10) / np.mean(n**2))
    x = np.concatenate([np.zeros(PREROLL, np.float32), body + n])
    click += PREROLL
    x[click] = 0.9
    path = tmp_path_factory.mktemp("live") / "noisy.wav"
    sf.write(path, x, SR, subtype="FLOAT")
    return path, x, click


@pytest.fixture(scope="module")
def looped(noisy):
    """``noisy`` after SETTLE_S of silence: (path, x, click index)."""
    path, x, click = noisy
    lead = int(SETTLE_S * SR)
    x = np.concatenate([np.zeros(lead, np.float32), x])
    out = path.with_name("looped.wav")
    sf.write(out, x, SR, subtype="FLOAT")
    return out, x, click + lead


def qsa_live(env, *args, timeout=90):
    cmd = [sys.executable, "-m", "qsa.cli", "live", *map(str, args)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def portaudio_on(pulse, monkeypatch) -> None:
    """Point this process's PortAudio at the private server: its ALSA ``pulse`` device reads
    the environment when PortAudio (re)initialises and enumerates the devices."""
    import sounddevice as sd

    for k in ("PULSE_SERVER", "XDG_RUNTIME_DIR", "HOME"):
        monkeypatch.setenv(k, pulse.env[k])
    sd._terminate()
    sd._initialize()


def json_lines(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def align(ref: np.ndarray, sig: np.ndarray) -> int:
    """Lag of ``sig`` behind ``ref`` (samples), by cross-correlation."""
    c = ss.correlate(sig, ref, mode="full", method="fft")
    return int(np.argmax(c)) - (len(ref) - 1)


def segment_errors_db(sent, got, lag, seg=SR // 10, search=SR // 20, up=1):
    """Error (dB re. the segment) of each ``seg``-sample segment of ``sent`` (within 30 dB
    of its level)
    found in ``got`` within +-``search`` samples of ``lag``; ``up`` > 1 aligns to 1/up of a
    sample (a device at 48 kHz delays by whole 48 kHz samples: thirds of a 16 kHz one)."""
    if up > 1:
        sent, got = ss.resample_poly(sent, up, 1), ss.resample_poly(got, up, 1)
        lag, seg, search = lag * up, seg * up, search * up
    errs = []
    floor = rms_db(sent) - 30  # judge the segments that carry the signal, not the pauses
    for s0 in range(0, len(sent) - seg, seg):
        a = sent[s0 : s0 + seg]
        lo = s0 + lag - search
        if rms_db(a) < floor or lo < 0 or lo + seg + 2 * search > len(got):
            continue
        win = got[lo : lo + seg + 2 * search]
        c = ss.correlate(win, a, mode="valid")
        e = np.convolve(win.astype(np.float64) ** 2, np.ones(seg), mode="valid")
        k = lo + int(np.argmax(c / np.sqrt(e + 1e-20)))  # normalised: no pull to loud parts
        errs.append(rms_db(got[k : k + seg] - a) - rms_db(a))
    return np.array(errs)


def clean_run(lines: list[dict], signal_t: float = 0.0, allowed: int = 1) -> bool:
    """At most ``allowed`` xruns once the signal started (the stream time ``signal_t`` plus
    most of the 1 s of pre-roll silence, where start-up xruns only grow the jitter buffer)
    and no reopened stream: the real-time path ran as designed (on an overloaded machine the
    audio server itself drops and stretches audio). One xrun is allowed by default: checks
    made per segment tolerate the one-block shift it leaves; a check over the whole stream
    passes ``allowed=0``."""
    early = [d for d in lines if d["t"] <= signal_t + 0.8 * PREROLL / SR]
    base = early[-1] if early else {"underruns": 0, "overruns": 0, "restarts": 0}
    final = lines[-1]
    xruns = final["underruns"] + final["overruns"] - base["underruns"] - base["overruns"]
    return xruns <= allowed and final["restarts"] == base["restarts"]


def overloaded(stats: dict, what: str):
    pytest.xfail(
        f"{what}: the machine was overloaded during the real-time run (xruns {stats['xruns']}, "
        f"restarts {stats['restarts']}); the exact checks passed, the server path is not "
        "conclusive"
    )


# Share of a run's wall time in which runnable tasks waited for a CPU (Linux PSI, "some")
# above which the host counts as busy: the app, its worker and the audio server need well
# under one of the two cores, so an idle host stays near 0 (other jobs push it to 0.5-0.9).
HOST_BUSY_STALL = 0.10


class HostLoad:
    """How busy the host was while a block ran: the CPU pressure stall share (PSI
    ``/proc/pressure/cpu``, else the CPU time of other processes per core from
    ``/proc/stat`` less this process's children). ``busy`` is what excuses a run: a loaded
    host delays the audio server too, which stretches or drops audio (and moves the loop's
    latency) without the app seeing an xrun."""

    def __enter__(self):
        self._t0, self._psi0, self._cpu0 = time.monotonic(), _psi_us(), _cpu_other_s()
        return self

    def __exit__(self, *exc):
        wall = max(time.monotonic() - self._t0, 1e-3)
        psi1 = _psi_us()
        if self._psi0 is not None and psi1 is not None:
            self.stall = (psi1 - self._psi0) / 1e6 / wall
            self.what = f"CPU pressure stall {self.stall:.0%} of the run"
        else:  # no PSI: other processes' CPU share of the spare cores
            cores = max((os.cpu_count() or 1) - 1, 1)
            self.stall = (_cpu_other_s() - self._cpu0) / wall / cores
            self.what = f"other processes used {self.stall:.0%} of the spare cores"
        self.busy = self.stall > HOST_BUSY_STALL
        return False


class SinkQuantum:
    """The render quantum of a null sink while a block ran: the largest ``configured``
    latency ``pactl`` reports for it below its idle 2 s (polled every 0.3 s, in ms).

    A null sink renders its input in chunks of its configured latency and hands each chunk to
    its monitor at once, while the latency it reports to the playing client is how far it has
    rendered ahead (measured at 16 kHz, --latency low: 0.3-7.6 ms of a 10 ms quantum, fixed
    for a stream by the phase of the client's wake-ups against the sink's timer). So the
    loop's true delay sits up to one quantum away from what the client is told: the app's
    ``device`` figure cannot resolve it, and a loop-back check must allow it."""

    def __init__(self, pulse, sink: str):
        import threading

        self._pulse, self._sink, self._stop = pulse, sink, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self.ms = 0.0

    def _poll(self):
        import re

        while not self._stop.wait(0.3):
            out = subprocess.run(["pactl", "list", "sinks"], env=self._pulse.env,
                                 capture_output=True, text=True, timeout=10).stdout
            for block in out.split("Sink #")[1:]:
                if re.search(rf"^\s*Name: {re.escape(self._sink)}$", block, re.M):
                    m = re.search(r"Latency: \d+ usec, configured (\d+) usec", block)
                    if m and int(m.group(1)) < 2_000_000:
                        self.ms = max(self.ms, int(m.group(1)) / 1000)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=15)
        return False


def _psi_us() -> int | None:
    try:
        for line in Path("/proc/pressure/cpu").read_text().splitlines():
            if line.startswith("some"):
                return int(line.rsplit("total=", 1)[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cpu_other_s() -> float:
    """Busy CPU seconds of the whole host less those of this process's (waited) children."""
    import resource

    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return busy - ru.ru_utime - ru.ru_stime


def band(x: np.ndarray, hz: float = 6500.0) -> np.ndarray:
    """Zero-phase low-pass: the band every resampler in the path keeps."""
    return ss.sosfiltfilt(ss.butter(10, hz, fs=SR, output="sos"), x).astype(np.float32)


def rms_db(x: np.ndarray) -> float:
    return 10 * np.log10(np.mean(x.astype(np.float64) ** 2) + 1e-20)


# -- tests -----------------------------------------------------------------------------------
def test_list_devices(pulse):
    r = qsa_live(pulse.env, "-l")
    assert r.returncode == 0, r.stderr
    assert "pulse" in r.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    "rate,channels,latency",
    [(16000, 1, "low"), (48000, 2, "high")],
    ids=["16k-mono-low", "48k-stereo-high"],
)
def test_file_through_the_loop(pulse, enhancer, looped, tmp_path, rate, channels, latency):
    """--input-file played through the real input and output streams, output looped back to
    the input: the recorded output equals offline processing, the looped-back stream carries
    it (after latency alignment) with the noise level dropped, and the click comes back after
    the reported end-to-end latency within one block and the null sink's render quantum.

    The exact checks (what the model saw and produced) must hold on every run. The checks of
    the audio server's loop-back depend on the server getting the CPU in time: on a loaded
    2-core machine PulseAudio itself can drop or stretch a few blocks without the app seeing
    an xrun. Those are given up to three runs; all three failing fails the test (or xfails it
    when every run was disturbed: app xruns, or a busy host by ``HostLoad``). A run on a
    quiet host with no xruns whose latency or loop-back is off fails the test."""
    failures, overloaded_runs = [], 0
    for attempt in range(3):
        rec = tmp_path / f"rec{attempt}.wav"
        try:
            sink = "loop" if rate == SR else "loop48"
            with HostLoad() as host, SinkQuantum(pulse, sink) as quantum:
                lines, y = _loop_run(pulse, enhancer, looped, rec, rate, channels, latency)
        except subprocess.TimeoutExpired as e:  # the file plays in ~12 s; 90 s is starvation
            if not host.busy:
                raise
            # a host this busy starves every further run too (and the offline checks): stop
            pytest.xfail(f"loop: the machine was overloaded ({host.what}): `qsa live` did not "
                         f"finish its {len(looped[1]) / SR:.0f} s file within {e.timeout:.0f} s "
                         f"(run {attempt}); earlier runs: {failures or 'none'}")
        _loop_exact_checks(enhancer, looped, lines, y, rate, channels)
        if not clean_run(lines, signal_t=SETTLE_S):
            overloaded_runs += 1
            failures.append(
                f"run {attempt}: app xruns {lines[-1]['xruns']} at stream times (s) "
                f"{lines[-1]['xrun_times_s']} ({host.what})"
            )
            continue
        try:
            _loop_server_checks(looped, lines, y, rate, quantum.ms)
            return
        except AssertionError as e:
            overloaded_runs += host.busy  # a busy host moves the server's timing: excused
            failures.append(f"run {attempt} ({host.what}): {e}")
    if overloaded_runs == len(failures):
        pytest.xfail("loop: the machine was overloaded during every real-time run ("
                     + "; ".join(failures) + "); the exact checks passed where a run "
                     "finished, the server path is not conclusive")
    pytest.fail("the loop-back failed on every run:\n" + "\n".join(failures))


def _loop_run(pulse, enhancer, noisy, rec, rate, channels, latency):
    path, _, _ = noisy
    sink = "loop" if rate == SR else "loop48"  # no resampling inside the server
    r = qsa_live(
        pulse.env_for(sink, f"{sink}.monitor"), *enhancer.live_args, "-i", "pulse",
        "-o", "pulse", "--samplerate", rate, "--channels", channels, "--block-ms", BLOCK_MS,
        "--latency", latency, "--input-file", path, "--record", rec, "--json-stats",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = json_lines(r.stdout)
    y, sr = sf.read(rec, dtype="float32")
    assert sr == SR and y.shape[1] == 3  # input, output, microphone
    return lines, y


def _loop_exact_checks(enhancer, noisy, lines, y, rate, channels):
    _, x, _ = noisy
    final = lines[-1]
    assert final["final"] and final["samplerate"] == rate and final["channels"] == [channels] * 2
    inp, out, _ = y.T
    assert len(inp) >= len(x)
    # what the model saw is the file (bit-exact without resampling, else through soxr twice)
    if rate == SR:
        np.testing.assert_array_equal(inp[: len(x)], x)
    else:
        assert align(x, inp) == 0  # soxr streams are delay-compensated
        a, b = band(x), band(inp[: len(x)])  # resampling keeps the band below ~7 kHz
        assert rms_db(a) - rms_db(b - a) > 40
    # the live output is offline processing of that input, sample for sample
    ref = enhancer.offline(inp)
    np.testing.assert_allclose(out[: len(ref)], ref, atol=1e-5)
    reported = final["latency_ms"]
    assert reported["end_to_end"] == pytest.approx(
        reported["algorithmic"] + reported["buffering"], abs=0.02
    )


def _loop_server_checks(noisy, lines, y, rate, quantum_ms):
    _, _, click = noisy
    final = lines[-1]
    inp, out, mic = y.T
    # latency: the click, located in the microphone signal, vs the reported figure
    win = mic[click : click + SR // 2]
    measured_ms = int(np.argmax(np.abs(win))) / SR * 1000
    reported = final["latency_ms"]
    print(
        f"\n[{rate} Hz] click through the loop: measured {measured_ms:.1f} ms, reported "
        f"{reported['end_to_end']:.1f} ms (algorithmic {reported['algorithmic']:.1f} + buffering "
        f"{reported['buffering']:.1f}; device {reported['device']:.1f}, pipeline "
        f"{reported['pipeline']:.1f}, streams {reported['streams']:.1f}, device spread "
        f"{reported['device_spread']:.1f}; sink quantum {quantum_ms:.1f}); xruns "
        f"{final['xruns']}, trimmed {final['trimmed']}, restarts {final['restarts']}"
    )
    # within one block plus what the server cannot report (SinkQuantum; seen: -10.6 to
    # +10.3 ms at a 10 ms quantum) and the spread of its per-callback reports
    assert 0 < quantum_ms <= 50, f"the null sink's render quantum was not seen: {quantum_ms}"
    bound = BLOCK_MS + quantum_ms + reported["device_spread"]
    assert abs(measured_ms - reported["end_to_end"]) <= bound, (measured_ms, bound, reported)

    # the enhanced stream made it through the audio server and back, sample for sample
    lag = align(out, mic)
    assert lag > 0
    sent, got = (out, mic) if rate == SR else (band(out), band(mic))  # soxr keeps < 7 kHz
    errs = segment_errors_db(sent, got, lag, up=rate // SR)
    ok = errs < (-60 if rate == SR else -35)
    # PulseAudio re-renders the first part of a new stream while it settles its latency
    # (seen on an idle machine: 0.8-2.2 s of -10 dB segments, then exact to -130 dB): the
    # loop must become exact within the first half and stay exact from there on
    first = int(np.argmax(ok)) if ok.any() else len(ok)
    assert first <= len(ok) // 2, f"looped-back segments vs output (dB): {np.round(errs, 1)}"
    matched = np.mean(ok[first:])
    assert matched >= 0.9, f"looped-back segments vs output (dB): {np.round(errs, 1)}"
    back = mic[lag:]
    tail = slice(click - CLICK_GAP + 1000, click - 1000)  # noise only, after the settling
    noise_in, noise_out = rms_db(inp[tail]), rms_db(back[tail])
    assert noise_in - noise_out > 10, (noise_in, noise_out)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["reference", "qcgan-35k"])
def test_microphone_path(pulse, enhancer, noisy, tmp_path, tmp_path_factory, which):
    """No --input-file: a player puts noisy speech into the 'room' sink, the app listens to
    its monitor as the microphone and plays to 'speaker'. Run with the reference filter and
    with the shipped qcgan-35k on eager torch (`--runtime torch`: the output is compared with
    the torch enhancer's to 1e-5; the default `auto` runtime is LiteRT)."""
    if (enhancer.model == "qcgan-35k") != (which == "qcgan-35k"):  # not the module's one
        enhancer = Enhancer(which)
        noisy = make_noisy(tmp_path_factory, enhancer)
    path, x, _ = noisy
    rec = tmp_path / "mic.wav"
    app = subprocess.Popen(
        [sys.executable, "-m", "qsa.cli", "live", *enhancer.live_args, "-i", "pulse",
         "-o", "pulse", "--record", str(rec), "--json-stats", "--duration", "30",
         "--latency", "high"],
        env=pulse.env_for("speaker", "room.monitor"), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        before = []
        for line in app.stdout:  # wait until the stream runs
            before.append(json.loads(line))
            if before[-1]["t"] > 0.5:
                break
        play = subprocess.run(["paplay", "-d", "room", str(path)], env=pulse.env, timeout=60)
        assert play.returncode == 0
        time.sleep(0.3)
        app.send_signal(signal.SIGINT)
        out_text, err = app.communicate(timeout=30)
    finally:
        app.kill()
    assert app.returncode == 0, err
    y, _ = sf.read(rec, dtype="float32")
    assert y.shape[1] == 2
    inp, out = y.T
    ref = enhancer.offline(inp)
    np.testing.assert_allclose(out[: len(ref)], ref, atol=1e-5)
    lines = before + json_lines(out_text)
    final = lines[-1]
    print(f"\n[microphone {enhancer.model}] xruns {final['xruns']} at stream times (s) "
          f"{final['xrun_times_s']} "
          f"(signal from {before[-1]['t']:.2f} s), restarts {final['restarts']}; per xrun "
          f"callback gap {final['xrun_callback_gap_ms']} ms, PortAudio gap "
          f"{final['xrun_portaudio_gap_ms']} ms, worker quiet {final['xrun_worker_quiet_ms']} ms, "
          f"hop ms max {final['hop_ms_max']}")
    if not clean_run(lines, signal_t=before[-1]["t"]):
        overloaded(final, f"microphone ({enhancer.model})")
    lag = align(x, inp)  # the file arrived through the server, whole
    if lag < 0 and any(t >= before[-1]["t"] for t in final["xrun_times_s"]):
        # xruns in the pre-roll after the file started playing (a host busy at start-up,
        # 13 of them in one CI run): the ALSA pulse plugin may then drop or repeat what the
        # server delivered, so the file need not arrive whole; on a clean run it must
        overloaded(final, f"microphone ({enhancer.model}; file not found in the capture)")
    assert lag >= 0
    errs = segment_errors_db(x, inp, lag)
    assert np.mean(errs < -60) >= 0.9, f"microphone segments vs the file (dB): {errs}"
    noise = slice(lag + PREROLL + 2000, lag + PREROLL + NOISE_LEAD - 2000)
    assert rms_db(inp[noise]) - rms_db(out[noise]) > 10


@pytest.mark.parametrize("how", [
    pytest.param(("SIGINT", "default"), id="sigint"),
    # A shell that backgrounds a job (`qsa live ... &`, as CI launchers do) starts it with
    # SIGINT ignored, and Python then installs no KeyboardInterrupt handler: before the fix
    # the app ignored Ctrl-C and ran its whole 30 s file (seen in 2 CI runs on 12-03).
    pytest.param(("SIGINT", "inherited-ignored"), id="sigint-inherited-ignored"),
    pytest.param(("SIGTERM", "default"), id="sigterm"),
])
def test_stop_signal_leaves_a_valid_recording(pulse, enhancer, tmp_path, how):
    """Ctrl-C (or kill) mid-run: the app stops promptly, exits 0 and leaves a complete WAV;
    the WAV is valid while still recording."""
    sig_name, disposition = how
    src = tmp_path / "long.wav"
    rng = np.random.default_rng(1)
    sf.write(src, 0.1 * rng.standard_normal(SR * 30).astype(np.float32), SR, subtype="FLOAT")
    rec = tmp_path / "rec.wav"

    def inherit():  # in the child, before exec: what `cmd &` does to SIGINT
        if disposition == "inherited-ignored":
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    app = subprocess.Popen(
        [sys.executable, "-m", "qsa.cli", "live", *enhancer.live_args, "-i", "pulse",
         "-o", "pulse", "--input-file", str(src), "--record", str(rec), "--json-stats"],
        # faulthandler: SIGABRT makes the app print every thread's stack (see below)
        env={**pulse.env_for("speaker", "speaker.monitor"), "PYTHONFAULTHANDLER": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=inherit,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if rec.exists() and sf.info(rec).frames > SR:  # readable mid-recording
                break
            time.sleep(0.1)
        mid = sf.read(rec, dtype="float32")[0]
        assert len(mid) > SR
        app.send_signal(getattr(signal, sig_name))
        try:
            out, err = app.communicate(timeout=25)
        except subprocess.TimeoutExpired:
            app.send_signal(signal.SIGABRT)
            out, err = app.communicate(timeout=15)
            pytest.fail(f"qsa live did not exit within 25 s of {sig_name}; its threads at "
                        f"SIGABRT:\n{err[-8000:]}\nlast stats: {out[-1500:]}")
    finally:
        app.kill()
    assert app.returncode == 0, err
    final = json_lines(out)[-1]
    assert final["final"]
    # It stopped on the signal, not at the end of the 30 s file: the signal came once about
    # a second had been recorded, and closing is bounded (stream 3 s, worker 10 s).
    assert final["t"] < 20.0, f"the app ran {final['t']:.1f} s of its 30 s file: {sig_name} " \
                              "did not stop it"
    y, sr = sf.read(rec, dtype="float32")
    assert sr == SR and y.shape[1] == 3 and len(y) >= len(mid)
    assert len(y) < 20 * SR
    ref = enhancer.offline(y[:, 0])
    np.testing.assert_allclose(y[: len(ref), 1], ref, atol=1e-5)


def test_survives_injected_xruns(pulse, enhancer, tmp_path):
    """Real xruns, injected from outside: the whole app is frozen (SIGSTOP) three times for
    0.4 s (40 blocks) mid-stream, so the audio server under- and overflows on it. The app
    counts the xruns, keeps (or reopens) the stream, plays the file to the end (less the
    backlog each freeze leaves, trimmed), exits 0, and its recording is still the model's
    exact output for what the model was given."""
    src = tmp_path / "noise.wav"
    rng = np.random.default_rng(4)
    sf.write(src, 0.1 * rng.standard_normal(SR * 8).astype(np.float32), SR, subtype="FLOAT")
    rec = tmp_path / "rec.wav"
    app = subprocess.Popen(
        [sys.executable, "-m", "qsa.cli", "live", *enhancer.live_args, "-i", "pulse",
         "-o", "pulse", "--input-file", str(src), "--record", str(rec), "--json-stats"],
        env=pulse.env_for("speaker", "speaker.monitor"), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        lines = []
        for line in app.stdout:  # wait until audio flows
            lines.append(json.loads(line))
            if lines[-1]["t"] > 1.0:
                break
        for _ in range(3):
            app.send_signal(signal.SIGSTOP)
            time.sleep(0.4)
            app.send_signal(signal.SIGCONT)
            time.sleep(0.8)
        out, err = app.communicate(timeout=60)
    finally:
        app.send_signal(signal.SIGCONT)
        app.kill()
    assert app.returncode == 0, err
    lines += json_lines(out)
    final = lines[-1]
    # the whole file played, less the backlog trimmed after each freeze: the input stream's
    # buffer delivers what it held at once, the output's buffer had run dry (backlog trim)
    assert final["final"] and final["t"] + final["trimmed"]["ms"] / 1000 >= 8.0, final
    x = final["xruns"]
    injected = (
        x["ring_underruns"] + x["ring_overruns"] + x["device_output_underflows"]
        + x["device_input_overflows"] + x["file_underruns"] + final["restarts"]
    )  # fmt: skip
    assert injected >= 1, f"the freezes caused no xrun: {final}"
    y, sr = sf.read(rec, dtype="float32")
    assert sr == SR and y.shape[1] == 3
    assert len(y) >= 7 * SR
    ref = enhancer.offline(y[:, 0])
    np.testing.assert_allclose(y[: len(ref), 1], ref, atol=1e-5)


def test_missing_device_is_a_clear_error(pulse):
    r = qsa_live(pulse.env, "--model", "passthrough", "-i", "no-such-microphone")
    assert r.returncode == 2
    assert "no-such-microphone" in r.stderr and "qsa live -l" in r.stderr
    assert "Traceback" not in r.stderr


def test_vanished_device_saves_the_recording(tmp_path):
    """The audio server dies mid-run: a clear error (exit 2) and what was recorded is saved."""
    own = PrivatePulse({"gone": SR})
    try:
        src = tmp_path / "long.wav"
        sf.write(src, np.zeros(SR * 60, np.float32), SR)
        rec = tmp_path / "rec.wav"
        app = subprocess.Popen(
            [sys.executable, "-m", "qsa.cli", "live", "--model", "passthrough", "-i", "pulse",
             "-o", "pulse", "--input-file", str(src), "--record", str(rec), "--json-stats"],
            env=own.env_for("gone", "gone.monitor"), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            for line in app.stdout:  # wait until audio flows
                if json.loads(line)["t"] > 0.5:
                    break
            own.stop()  # the device vanishes
            out, err = app.communicate(timeout=60)
        finally:
            app.kill()
    finally:
        own.stop()
    assert app.returncode == 2, err
    assert "audio device lost" in err and "qsa live -l" in err and "Traceback" not in err
    info = sf.info(rec)
    assert info.frames > 0 and info.channels == 3


def test_callback_allocates_nothing_and_pipeline_is_exact(pulse, enhancer, monkeypatch):
    """The real callback, called as PortAudio calls it, on an opened session: no memory is
    allocated over 2000 calls; and the pipeline (rings, worker, bypass) delays the signal by
    exactly the prefill."""
    import tracemalloc

    import sounddevice as sd

    from qsa.apps.live import LiveOptions, LiveSession

    portaudio_on(pulse, monkeypatch)
    blk = 3200  # large blocks (200 ms): any per-call buffer would show in the peak
    opts = LiveOptions(
        input_device="pulse", output_device="pulse", channels=2, block_ms=blk / SR * 1000,
        samplerate=SR,
    )  # fmt: skip
    session = LiveSession(enhancer.proc, opts).open()
    try:
        rng = np.random.default_rng(2)
        x = rng.standard_normal(blk * 40).astype(np.float32) * 0.1
        indata = np.zeros((blk, 2), np.float32)
        outdata = np.zeros((blk, 2), np.float32)
        status = sd.CallbackFlags()

        class TimeInfo:  # the fields PortAudio passes (a cffi struct in real calls)
            inputBufferAdcTime, outputBufferDacTime, currentTime = 1.0, 1.01, 1.0

        ti = TimeInfo()
        tracemalloc.start()
        try:
            session._callback(indata, outdata, blk, ti, status)  # warm up
            session._work_once()
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            for k in range(2000):
                session._callback(indata, outdata, blk, ti, status)
                if k % 2 == 0:
                    session.in_ring.skip(session.in_ring.available())
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
        assert peak < 4096, f"the callback allocated {peak} bytes"

        # the pipeline, block by block: prefill P, then the model's output, then bypass
        session.in_ring.skip(session.in_ring.available())
        session.out_ring.skip(session.out_ring.available())
        session.out_ring.write_zeros(session.prefill)
        enhancer.proc.reset()
        session._n_acc = session._late = 0
        played = []
        for k in range(40):
            indata[:, 0] = indata[:, 1] = x[k * blk : (k + 1) * blk]
            session.bypass = k >= 20
            session._callback(indata, outdata, blk, ti, status)
            played.append(outdata[:, 0].copy())
            session._work_once()
        y = np.concatenate(played)
        p = session.prefill
        half = 20 * blk
        ref = enhancer.proc.process_offline(x[:half])
        np.testing.assert_allclose(y[p:half], ref[: half - p], atol=1e-5)
        d = enhancer.proc.signal_delay_samples  # bypass: the input, delayed like the model
        np.testing.assert_allclose(y[half + p + d :], x[half : len(x) - p - d], atol=1e-7)
    finally:
        session.close()


def live_on_a_pty(pulse, enhancer, tmp_path, *, seed: int, args: tuple, ready: bytes,
                  keys: bytes, changed: bytes, settle_s: float = 0.0):
    """`qsa live` (its rich view) on a real terminal, a pty, playing 60 s of seeded noise to
    the speaker sink: once ``ready`` is on the screen and over 1 s is recorded, type ``keys``
    (then read for ``settle_s``), wait for ``changed`` on the screen and 1 s more of recording,
    and quit with 'q'. Returns (exit code, the screen's bytes, the recording's path)."""
    import pty

    src = tmp_path / "noise.wav"
    rng = np.random.default_rng(seed)
    sf.write(src, 0.1 * rng.standard_normal(SR * 60).astype(np.float32), SR, subtype="FLOAT")
    rec = tmp_path / "rec.wav"
    master, slave = pty.openpty()
    app = subprocess.Popen(
        [sys.executable, "-m", "qsa.cli", "live", *enhancer.live_args, "-i", "pulse",
         "-o", "pulse", "--input-file", str(src), "--record", str(rec), *args],
        env=dict(pulse.env_for("speaker", "speaker.monitor"), TERM="xterm", COLUMNS="120"),
        stdin=slave, stdout=slave, stderr=slave,
    )  # fmt: skip
    os.close(slave)
    screen = b""

    def read_for(seconds):
        nonlocal screen
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if select.select([master], [], [], 0.1)[0]:
                try:
                    screen += os.read(master, 65536)
                except OSError:
                    return

    try:
        deadline = time.monotonic() + 60
        while ready not in screen and time.monotonic() < deadline:
            read_for(0.2)
        while not (rec.exists() and sf.info(rec).frames > SR) and time.monotonic() < deadline:
            read_for(0.2)
        os.write(master, keys)
        read_for(settle_s)
        while changed not in screen and time.monotonic() < deadline:
            read_for(0.2)
        before = sf.info(rec).frames
        while sf.info(rec).frames < before + SR and time.monotonic() < deadline:
            read_for(0.2)
        os.write(master, b"q")
        app.wait(timeout=30)
        read_for(0.3)
    finally:
        app.kill()
        os.close(master)
    return app.returncode, screen, rec


def test_terminal_view_b_toggles_bypass_q_quits(pulse, enhancer, tmp_path):
    """The rich view on a real terminal (a pty): 'b' switches to bypass (the input, delayed
    like the model), 'q' stops and saves."""
    returncode, screen, rec = live_on_a_pty(
        pulse, enhancer, tmp_path, seed=3, args=(), ready=b"enhancing", keys=b"b",
        changed=b"BYPASS", settle_s=0.5)
    assert returncode == 0, screen[-2000:]
    assert b"BYPASS" in screen and b"qsa live:" in screen
    y, _ = sf.read(rec, dtype="float32")
    inp, out = y[:, 0], y[:, 1]
    ref = enhancer.offline(inp)
    np.testing.assert_allclose(out[:SR], ref[:SR], atol=1e-5)  # enhanced before 'b'
    d = enhancer.proc.signal_delay_samples
    tail = slice(len(out) - SR // 2, len(out))
    np.testing.assert_allclose(out[tail], inp[tail.start - d : tail.stop - d], atol=1e-7)


def test_startup_shortfalls_are_not_underruns(pulse, enhancer, monkeypatch):
    """A host that drains the output faster than real time before the first processed sample
    is played (the start-up burst) only plays more silence first: counted as start-up
    shortfalls, not underruns, and processed samples are held back until the burst ends (no
    signal, gap, signal). The same shortfall once the signal plays is an underrun."""
    import sounddevice as sd

    from qsa.apps.live import LiveOptions, LiveSession

    portaudio_on(pulse, monkeypatch)
    blk = 160
    opts = LiveOptions(input_device="pulse", output_device="pulse", channels=1, samplerate=SR)
    session = LiveSession(enhancer.proc, opts).open()
    try:
        indata = np.full((blk, 1), 0.1, np.float32)
        outdata = np.zeros((blk, 1), np.float32)
        ok, under = sd.CallbackFlags(), sd.CallbackFlags(sd._lib.paOutputUnderflow)

        class TimeInfo:
            inputBufferAdcTime, outputBufferDacTime, currentTime = 1.0, 1.01, 1.0

        ti = TimeInfo()
        # the start burst: callbacks with no worker pass in between drain the prefill
        session._callback(indata, outdata, blk, ti, under)
        for _ in range(session.prefill // blk + 3):
            session._callback(indata, outdata, blk, ti, ok)
        s = session.stats()
        assert s["startup_shortfalls"]["ring"] >= 2 and s["startup_shortfalls"]["device"] == 1
        assert s["underruns"] == 0 and s["xrun_times_s"] == []
        assert not session._settled and session.growth > 0
        # the host settles into real time (callbacks a block apart on PortAudio's clock), the
        # worker catches up, processed samples play, then the host bursts again
        for _ in range(20):
            session._work_once()
            ti.currentTime += blk / SR
            session._callback(indata, outdata, blk, ti, ok)
        assert session._settled
        session._work_once()
        assert session._played > session.prefill
        base = session.stats()["underruns"]
        for _ in range(session.out_ring.available() // blk + 2):
            session._callback(indata, outdata, blk, ti, ok)
        session._callback(indata, outdata, blk, ti, under)
        s = session.stats()
        assert s["xruns"]["ring_underruns"] >= 1 and s["xruns"]["device_output_underflows"] == 1
        assert s["underruns"] > base and len(s["xrun_times_s"]) == s["underruns"]
        assert s["startup_shortfalls"]["device"] == 1  # unchanged
    finally:
        session.close()


def test_output_before_input_is_the_streams_offset(pulse, enhancer, monkeypatch):
    """Two streams: the output stream calls back before the input stream has delivered
    anything (it fills its buffer at start; an idle PulseAudio source takes up to 2 s for its
    first block). Those blocks are silence outside the pipeline: the prefill and the jitter
    buffer stay for the signal (no growth, no shortfall), the signal comes out exactly the
    prefill after the input's first sample, and the report counts the head start in the
    streams' offset (output epoch - input epoch, here 0: one clock), so end-to-end stays
    right."""
    import sounddevice as sd

    from qsa.apps.live import LiveOptions, LiveSession

    portaudio_on(pulse, monkeypatch)
    blk = 160
    opts = LiveOptions(input_device="pulse", output_device="pulse", channels=1, samplerate=SR)
    session = LiveSession(enhancer.proc, opts).open()
    try:
        assert session.in_stream is not None and session.out_stream is not None  # two streams
        enhancer.proc.reset()
        x = np.random.default_rng(6).standard_normal(blk * 30).astype(np.float32) * 0.1
        indata = np.zeros((blk, 1), np.float32)
        outdata = np.zeros((blk, 1), np.float32)
        ok = sd.CallbackFlags()

        class TimeInfo:  # one clock: input ADC and output DAC 5 ms either side of "now"
            currentTime, inputBufferAdcTime, outputBufferDacTime = 10.0, 9.995, 10.005

        ti = TimeInfo()

        def tick():
            ti.currentTime += blk / SR
            ti.inputBufferAdcTime = ti.currentTime - 0.005
            ti.outputBufferDacTime = ti.currentTime + 0.005

        played = []
        lead = 7
        for _ in range(lead):  # the output alone
            session._out_callback(outdata, blk, ti, ok)
            played.append(outdata[:, 0].copy())
            tick()
        assert session.growth == 0 and session._played == 0
        assert session.stats()["startup_shortfalls"] == {"ring": 0, "device": 0}
        for k in range(30):  # then both, a block each, one clock
            indata[:, 0] = x[k * blk : (k + 1) * blk]
            session._in_callback(indata, blk, ti, ok)
            session._work_once()
            session._out_callback(outdata, blk, ti, ok)
            played.append(outdata[:, 0].copy())
            tick()
        y = np.concatenate(played)
        p = session.prefill + lead * blk
        assert session.growth == 0 and session.stats()["underruns"] == 0
        ref = enhancer.proc.process_offline(x)
        np.testing.assert_allclose(y[p:], ref[: len(y) - p], atol=1e-5)
        lat = session.stats()["latency_ms"]
        assert lat["device_in"] == pytest.approx(5.0, abs=0.01)
        assert lat["device_out"] == pytest.approx(5.0, abs=0.01)
        # output epoch - input epoch: the head start less the 10 ms of the two devices
        assert lat["streams"] == pytest.approx(0.0, abs=0.01)
        assert lat["pipeline"] == pytest.approx((p - lead * blk) / SR * 1000, abs=0.01)
    finally:
        session.close()


def test_output_stall_backlog_is_trimmed(pulse, enhancer, monkeypatch):
    """Two streams: the output stream stalls for 200 ms while the input keeps delivering
    (the device plays its 30 ms buffer, then 170 ms of silence), then catches up on its
    buffer in a burst. The 160 ms the output fell behind would wait in the rings for good
    (a loaded 10-minute session ended at 403 ms end-to-end): once a whole trim window (2 s of
    output after the 1 s start-up) shows it, the oldest 160 ms are dropped from the output
    ring, no more (the jitter buffer trims down to the level start-up measured, never below
    it), counted in ``trimmed``; the signal on both sides of the skip is the exact pipeline's,
    and the latency report is back to the pre-stall figure (streams 0, pipeline P)."""
    import sounddevice as sd

    from qsa.apps.live import LiveOptions, LiveSession

    portaudio_on(pulse, monkeypatch)
    blk, dev_out = 160, 0.03  # the output device buffers 3 blocks
    opts = LiveOptions(input_device="pulse", output_device="pulse", channels=1, samplerate=SR)
    session = LiveSession(enhancer.proc, opts).open()
    try:
        enhancer.proc.reset()
        n_before, n_stall, n_burst, n_after = 50, 20, 4, 400
        x = np.random.default_rng(7).standard_normal(blk * (n_before + n_stall + n_after))
        x = (0.1 * x).astype(np.float32)
        indata = np.zeros((blk, 1), np.float32)
        outdata = np.zeros((blk, 1), np.float32)
        ok, under = sd.CallbackFlags(), sd.CallbackFlags(sd._lib.paOutputUnderflow)

        class TimeInfo:  # one clock: input ADC 5 ms before "now", output DAC 30 ms after
            currentTime, inputBufferAdcTime, outputBufferDacTime = 10.0, 9.995, 10.0 + dev_out

        ti = TimeInfo()

        def tick():
            ti.currentTime += blk / SR
            ti.inputBufferAdcTime = ti.currentTime - 0.005
            ti.outputBufferDacTime = ti.currentTime + dev_out

        played, k_in = [], 0

        def input_block():
            nonlocal k_in
            indata[:, 0] = x[k_in * blk : (k_in + 1) * blk]
            k_in += 1
            session._in_callback(indata, blk, ti, ok)
            session._work_once()

        def output_block(flags=ok):
            session._out_callback(outdata, blk, ti, flags)
            played.append(outdata[:, 0].copy())

        for _ in range(n_before):  # both, a block each
            input_block()
            output_block()
            tick()
        for _ in range(n_stall):  # the input alone: the output's callbacks are late
            input_block()
            tick()
        stall_end = ti.currentTime
        for i in range(n_burst):  # the output refills its drained buffer at once
            ti.outputBufferDacTime = stall_end + i * blk / SR
            output_block(under if i == 0 else ok)
        ti.outputBufferDacTime = ti.currentTime + dev_out
        assert session.trimmed == 0
        trim_at = None  # the output block the trim came before
        for _ in range(n_after):
            tick()
            input_block()
            output_block()
            if trim_at is None and session.trimmed:
                trim_at = len(played) - 1

        s = session.stats()
        jb = session.jb
        # start-up ends after 1 s of output (100 blocks), the first trim window 2 s later
        assert jb.startup_end == 100 * blk and trim_at == 100 + 200 - 2
        assert session.underruns_after_startup == 0 and jb.startup_topup == 0
        backlog = (n_stall - n_burst) * blk
        assert session.trimmed == backlog and s["trimmed"] == {"events": 1, "ms": 160.0}
        assert s["underruns"] == 1 and session.growth == 0  # the device's, not the rings'
        y = np.concatenate(played)
        ref = enhancer.proc.process_offline(x)
        p = session.prefill
        cut = trim_at * blk
        np.testing.assert_allclose(y[p:cut], ref[: cut - p], atol=1e-5)
        tail = slice(len(y) - 100 * blk, len(y))
        np.testing.assert_allclose(y[tail], ref[tail.start - p + backlog : tail.stop - p + backlog],
                                   atol=1e-5)  # fmt: skip
        lat = s["latency_ms"]
        assert lat["device_out"] == pytest.approx(dev_out * 1000, abs=0.01)
        assert lat["streams"] == pytest.approx(0.0, abs=0.01)
        assert lat["pipeline"] == pytest.approx(p / SR * 1000, abs=0.01)
    finally:
        session.close()


def _drive_callbacks(session, n, blk, seed, in_skip=lambda i: False, out_skip=lambda i: False):
    """Run ``n`` blocks through the session's callbacks and worker on a synthetic clock (the
    device times as PortAudio reports them), input then worker then output each block;
    ``in_skip(i)`` / ``out_skip(i)``: that block's input / output callback never comes."""
    import sounddevice as sd

    rng = np.random.default_rng(seed)
    indata = np.zeros((blk, 1), np.float32)
    outdata = np.zeros((blk, 1), np.float32)
    ok = sd.CallbackFlags()

    class TimeInfo:
        currentTime, inputBufferAdcTime, outputBufferDacTime = 10.0, 9.995, 10.03

    ti = TimeInfo()
    for i in range(n):
        ti.currentTime += blk / SR
        ti.inputBufferAdcTime, ti.outputBufferDacTime = ti.currentTime - 0.005, \
            ti.currentTime + 0.03  # fmt: skip
        if not in_skip(i):
            indata[:, 0] = 0.1 * rng.standard_normal(blk)
            session._in_callback(indata, blk, ti, ok)
            session._work_once()
        if not out_skip(i):
            session._out_callback(outdata, blk, ti, ok)


@pytest.mark.parametrize("follow", [True, False])
def test_clock_drift_is_followed_by_slipping_samples(pulse, enhancer, monkeypatch, follow):
    """The output stream's clock runs faster than the input's (here 400 ppm: one input
    block in 2500 never comes; issue 29's two null sinks drifted 72 ppm): the streams' offset
    falls a block every 25 s and would eat the reserve, then underrun again and again. The
    worker follows it by slipping single samples into the output (``slipped``), so after
    start-up nothing underruns; without following (a window longer than the session) the
    same drift underruns."""
    from qsa.apps.live import LiveOptions, LiveSession, engine

    portaudio_on(pulse, monkeypatch)
    if not follow:
        monkeypatch.setattr(engine, "DRIFT_WINDOW_S", 1e6)
    blk = 160
    opts = LiveOptions(input_device="pulse", output_device="pulse", channels=1, samplerate=SR)
    session = LiveSession(enhancer.proc, opts).open()
    try:
        enhancer.proc.reset()
        n = 10000  # 100 s of output; the input's clock is slower: one block in 2500 never comes
        _drive_callbacks(session, n, blk, 3, in_skip=lambda i: i % 2500 == 1249)
        lost = (n // 2500) * blk
        if follow:
            assert session.underruns_after_startup == 0, session.stats()["xruns"]
            assert lost - 2 * blk <= session.slipped <= lost
        else:
            assert session.underruns_after_startup > 0 and session.slipped == 0
    finally:
        session.close()


def test_drift_following_leaves_a_trimmed_backlog_alone(pulse, enhancer, monkeypatch):
    """An output stall (400 ms of no output callbacks while the input keeps delivering; the
    two clocks otherwise equal) leaves a backlog that the jitter buffer trims. The drift
    follower must not take the stall or the trim for drift: before the fix it put back what
    the trim had dropped (issue 29's run final10b: ~580 samples, +20 ms of latency), here
    it slips nothing, and nothing underruns after start-up."""
    from qsa.apps.live import LiveOptions, LiveSession

    portaudio_on(pulse, monkeypatch)
    blk = 160
    opts = LiveOptions(input_device="pulse", output_device="pulse", channels=1, samplerate=SR)
    session = LiveSession(enhancer.proc, opts).open()
    try:
        enhancer.proc.reset()
        # 60 s; 40 blocks at 15 s without an output callback
        _drive_callbacks(session, 6000, blk, 4, out_skip=lambda i: 1500 <= i < 1540)
        assert session.trims >= 1 and session.trimmed >= 30 * blk, session.stats()["xruns"]
        assert session.slipped == 0
        assert session.underruns_after_startup == 0
    finally:
        session.close()


def test_nonfinite_samples_never_reach_the_device(pulse, monkeypatch, tmp_path):
    """NaN/Inf from a broken capture (or a model that produced them) are zeros before the
    model and before the output ring, counted in the statistics; the recording holds the
    zeros too (issue 32: 6,144 NaN samples were played and recorded)."""
    from qsa.apps.live import LiveOptions, LiveSession
    from qsa.apps.live.processors import PassThrough

    class NanEvery3rd(PassThrough):  # the model's output goes bad on every third hop
        k = 0

        def process_hop(self, in_hop, out_hop):
            assert np.isfinite(in_hop).all(), "a non-finite sample reached the model"
            out_hop[:] = in_hop
            self.k += 1
            if self.k % 3 == 0:
                out_hop[::7] = np.nan

    portaudio_on(pulse, monkeypatch)
    rec = tmp_path / "rec.wav"
    opts = LiveOptions(input_device="pulse", output_device="pulse", channels=1, samplerate=SR,
                       record=str(rec))
    session = LiveSession(NanEvery3rd(), opts).open()
    try:
        session.out_ring.skip(session.out_ring.available())
        x = np.full(SR // 10, 0.25, np.float32)
        x[100:110] = np.nan  # what a capture delivered
        x[500] = np.inf
        session._process(x)
        out = np.zeros((session.out_ring.available(), 1), np.float32)
        session.out_ring.read_into(out)
        assert len(out) and np.isfinite(out).all()
        s = session.stats()
        assert s["nonfinite_samples"]["input"] == 11 and s["nonfinite_samples"]["output"] > 0
    finally:
        session.close()
    y, _ = sf.read(rec, dtype="float32")
    assert np.isfinite(y).all() and len(y) > 0


# -- the strength control and 48 kHz devices (issue 29) --------------------------------------
@pytest.mark.slow
def test_48k_session_equals_16k_session_with_atten_lim(pulse, enhancer, noisy, tmp_path):
    """The same file through a 16 kHz and a 48 kHz device session, both with --atten-lim 12:
    each recorded output is the limited enhancement of what the model received (exact), and
    the 48 kHz report names the resampler's share of the latency (0 at 16 kHz). The 48 kHz
    output equals the 16 kHz one within the resampler's error: with the reference low-pass
    (linear) that is the input's in-band error, < -40 dB below 6.5 kHz; a trained model's
    output also depends on the 7.3-8 kHz band that soxr HQ does not pass (qcgan-35k: about
    -15 dB, tests/test_atten_lim.py), so that model is held to -10 dB."""
    from qsa.apps.live.processors import AttenLimited

    path, x, _ = noisy
    outs, lines_of = {}, {}
    for rate, sink in ((16000, "loop"), (48000, "loop48")):
        rec = tmp_path / f"rec{rate}.wav"
        r = qsa_live(
            pulse.env_for(sink, f"{sink}.monitor"), *enhancer.live_args, "-i", "pulse",
            "-o", "pulse", "--samplerate", rate, "--channels", 1, "--input-file", path,
            "--record", rec, "--json-stats", "--atten-lim", 12,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        lines = json_lines(r.stdout)
        final = lines[-1]
        assert final["samplerate"] == rate and final["atten_lim_db"] == 12.0
        lat = final["latency_ms"]
        assert (lat["resampler"] > 0) == (rate != SR) and lat["resampler"] <= lat["pipeline"]
        y, sr = sf.read(rec, dtype="float32")
        inp, out = y[:, 0], y[:, 1]
        ref = AttenLimited(enhancer.proc, 12.0).process_offline(inp)
        np.testing.assert_allclose(out[: len(ref)], ref, atol=1e-5)
        outs[rate], lines_of[rate] = out[: len(x)], lines
    for lines in lines_of.values():  # input lost (zeros stood in): the outputs cannot agree
        x_runs = lines[-1]["xruns"]  # (output underruns leave the recording as it is)
        if x_runs["ring_overruns"] or x_runs["file_underruns"]:
            overloaded(lines[-1], "48 kHz vs 16 kHz")
    a, b = band(outs[16000]), band(outs[48000])
    err = rms_db(b - a) - rms_db(a)
    print(f"\n48 kHz vs 16 kHz session, enhanced output (band < 6.5 kHz): {err:.1f} dB; "
          f"resampler latency {lines_of[48000][-1]['latency_ms']['resampler']} ms")
    assert err < (-40 if enhancer.model != "qcgan-35k" else -10), err


def test_terminal_view_arrows_change_the_limit(pulse, enhancer, tmp_path):
    """On a real terminal (a pty): two down arrows take --atten-lim 6 to 0 dB while the
    stream runs (the output becomes the delayed input exactly) and do not toggle bypass
    (a down arrow's escape sequence ends in 'B')."""
    from qsa.apps.live.processors import AttenLimited

    returncode, screen, rec = live_on_a_pty(
        pulse, enhancer, tmp_path, seed=4, args=("--atten-lim", "6"), ready=b"at most 6 dB",
        keys=b"\x1b[B\x1b[B", changed=b"at most 0 dB")
    assert returncode == 0, screen[-2000:]
    assert b"at most 0 dB" in screen and b"BYPASS" not in screen
    y, _ = sf.read(rec, dtype="float32")
    inp, out = y[:, 0], y[:, 1]
    ref = AttenLimited(enhancer.proc, 6.0).process_offline(inp[:SR])
    np.testing.assert_allclose(out[: len(ref) // 2], ref[: len(ref) // 2], atol=1e-5)
    d = enhancer.proc.signal_delay_samples
    tail = slice(len(out) - SR // 2, len(out))
    np.testing.assert_array_equal(out[tail], inp[tail.start - d : tail.stop - d])
