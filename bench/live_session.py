"""Benchmark: a long ``qsa live --input-file`` session at 10 ms blocks on a real audio stack.

Plays noisy speech (espeak-ng speech + noise, looped to ``--minutes``) as the microphone
through the full pipeline (an input and an output stream) into a private PulseAudio null
sink (its monitor is the microphone; nothing is audible) and reports xruns and the per-hop
processing time from the app's own ``--json-stats``. A benchmark, not a test: nothing is asserted.
The result (JSON, and a one-line ``summary:`` on stderr) gives the p99 per hop (the last ~33 s
and the whole session), ``underruns_after_startup`` (the app's ring, once its jitter buffer
ended start-up at ``jitter_buffer.startup_end_s`` of stream time) and the device underflows
after it, the end-to-end latency, and how idle the host was meanwhile (``load``: /proc/stat).
``QSA_LIVE_TRACE=PATH`` in the environment makes the app write a per-callback trace
(apps/live/trace.py).

    .venv/bin/python bench/live_session.py                      # 10 minutes, qcgan-35k
    .venv/bin/python bench/live_session.py --minutes 1 --model reference-lowpass
    .venv/bin/python bench/live_session.py --model qcgan-35k --runtime torch --precision int8
    .venv/bin/python bench/live_session.py --virtual-mic --minutes 10

``--runtime`` is the app's (default ``auto``, the app's default: LiteRT here). A non-torch
runtime exports the model in the app's first start on an empty cache (a fresh temporary
``XDG_CACHE_HOME``), inside the timed session; ``--cache-home DIR`` gives the app a cache that
holds the export already (e.g. one an earlier ``--virtual-mic`` run filled).

``--virtual-mic``: the app writes into its virtual microphone (``qsa live --virtual-mic``)
instead of the sink, and a second client (``parec``, as a call application would) records the
virtual source for the whole session. First the start-up is timed: one cold start (an empty
export cache: a non-torch ``--runtime`` exports the model) and ``--startup-runs`` warm starts
(the cache from the cold one), each from launching the command to the first enhanced sample
arriving in the virtual source (wall time, and the CPU time the app had used by then: on a
loaded host wall time stretches, CPU time much less), with the app's own account from its
``--json-stats`` (``startup_s``: model ready, stream started, first output, CPU by then).
``--startup-only`` stops there (no long session):

    .venv/bin/python bench/live_session.py --virtual-mic --startup-only --runtime onnx
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import soundfile as sf

SR = 16000
STARTUP_S = 1.0


def noisy_speech(seconds: float, seed: int = 0) -> np.ndarray:
    """espeak-ng sentences (several voices) + white noise at 5 dB SNR, ``seconds`` long."""
    import soxr

    rng = np.random.default_rng(seed)
    texts = [
        "The live enhancer removes the noise while you speak.",
        "Quaternion layers share their weights across four components.",
        "Every block of ten milliseconds must be ready before the next one arrives.",
    ]
    parts = []
    with tempfile.TemporaryDirectory() as d:
        for k, (text, voice) in enumerate(
            zip(texts, ["en-us", "en-gb+f3", "en-us+m3"], strict=True)
        ):
            wav = Path(d) / f"{k}.wav"
            subprocess.run(["espeak-ng", "-v", voice, "-w", str(wav), text], check=True)
            x, sr = sf.read(wav, dtype="float32")
            parts += [soxr.resample(x, sr, SR), np.zeros(SR // 2, np.float32)]
    s = np.concatenate(parts)
    s = np.tile(s, int(np.ceil(seconds * SR / len(s))))[: int(seconds * SR)]
    s = 0.3 * s / np.max(np.abs(s))
    n = rng.standard_normal(len(s)).astype(np.float32)
    n *= np.sqrt(np.mean(s**2) / 10 ** (5 / 10) / np.mean(n**2))
    return (s + n).astype(np.float32)


def host_reference(n: int = 400) -> dict:
    """How fast this host is right now: a fixed numpy workload (20 256x256 mat-vecs + tanh,
    ~1.3 MMAC) timed back to back and after a 7 ms sleep, as the app's worker sleeps between
    blocks. On a shared VM both drift by 50 % within an hour; compare sessions by this too."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(256).astype(np.float32)
    w = rng.standard_normal((256, 256)).astype(np.float32)

    def work():
        y = x
        for _ in range(20):
            y = np.tanh(w @ y * 0.01)
        return y

    out = {}
    for name, pause in (("back_to_back", 0.0), ("after_7ms_sleep", 0.007)):
        ts = []
        for _ in range(n):
            if pause:
                time.sleep(pause)
            t0 = time.perf_counter()
            work()
            ts.append(time.perf_counter() - t0)
        ts = np.asarray(ts[n // 10 :]) * 1e3
        out[name] = {"median_ms": round(float(np.median(ts)), 3),
                     "p99_ms": round(float(np.percentile(ts, 99)), 3)}  # fmt: skip
    return out


class SourceRecorder:
    """``parec`` on a source, read in a thread: sample count, the arrival time (monotonic)
    of the first sample above ``threshold``, and the number of non-finite or > 1 samples."""

    def __init__(self, env: dict, source: str, rate: int, threshold: float = 1e-3):
        self.proc = subprocess.Popen(
            ["parec", "-d", source, "--format=float32le", f"--rate={rate}", "--channels=1",
             "--raw", "--latency-msec=5"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.threshold = threshold
        self.samples = 0
        self.bad = 0
        self.peak = 0.0
        self.first_signal_t: float | None = None
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        rest = b""
        fd = self.proc.stdout.fileno()
        while chunk := os.read(fd, 4096):
            t = time.monotonic()
            chunk = rest + chunk
            n = len(chunk) // 4
            rest = chunk[n * 4 :]
            y = np.frombuffer(chunk[: n * 4], np.float32)
            self.samples += n
            ok = np.isfinite(y)
            self.bad += int((~ok).sum() + (np.abs(y[ok]) > 1.0).sum())
            if ok.any():
                self.peak = max(self.peak, float(np.abs(y[ok]).max()))
            if self.first_signal_t is None and (np.abs(y[ok]) > self.threshold).any():
                self.first_signal_t = t

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self._thread.join(timeout=10)


def clocked_microphone(pa, sink: str, rate: int) -> subprocess.Popen:
    """A silent playback client on ``sink`` with a 20 ms latency request, so that its
    monitor (the app's microphone here) delivers audio every few ms from the start, as a
    real microphone does. Without one, PulseAudio's null sink, idle, runs 2 s ahead and its
    monitor delivers 2 s blocks: the app's duplex stream then waits up to 2 s for its first
    input (and again after each reconnection), which no sound card does."""
    return subprocess.Popen(
        ["pacat", "--playback", "-d", sink, "--latency-msec=20", "--raw", "--format=s16le",
         f"--rate={rate}", "--channels=1", "--client-name=bench-microphone-clock", "/dev/zero"],
        env=pa.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _source_exists(env: dict, name: str) -> bool:
    out = subprocess.run(["pactl", "list", "short", "sources"], env=env, capture_output=True,
                         text=True).stdout  # fmt: skip
    return any(ln.split("\t")[1:2] == [name] for ln in out.splitlines())


def _cpu_s(pid: int) -> float | None:
    """CPU time (user + system, s) of a running process, from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def startup_time(pa, cmd: list[str], rate: int, name: str = "qsa_mic",
                 env: dict | None = None) -> dict:
    """One start of ``cmd`` (a --virtual-mic session on a file with signal from its first
    sample): seconds from launch to the virtual source's appearance and to the first enhanced
    sample in it (a parec client, connected as soon as the source exists), and the app's CPU
    seconds by then. The app is stopped with SIGINT once the signal has arrived; its last
    --json-stats line gives its own start-up account (``app``)."""
    t0 = time.monotonic()
    app = subprocess.Popen(cmd, env=env or pa.env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)  # fmt: skip
    rec = None
    try:
        while not _source_exists(pa.env, name):
            if app.poll() is not None:
                raise RuntimeError(f"qsa live ended before its source appeared: "
                                   f"{app.stderr.read()[-2000:]}")  # fmt: skip
            time.sleep(0.005)
        t_source = time.monotonic() - t0
        rec = SourceRecorder(pa.env, name, rate)
        cpu = None
        while rec.first_signal_t is None and app.poll() is None:
            time.sleep(0.002)
            cpu = _cpu_s(app.pid) if rec.first_signal_t is None else cpu
        if rec.first_signal_t is None:
            raise RuntimeError(f"no enhanced audio in the virtual source: "
                               f"{app.stderr.read()[-2000:]}")  # fmt: skip
        t_audio = rec.first_signal_t - t0
        app.send_signal(signal.SIGINT)
        out, _ = app.communicate(timeout=60)
    finally:
        app.kill()
        if rec is not None:
            rec.stop()
    lines = [json.loads(s) for s in out.splitlines() if s.startswith("{")]
    return {"source_s": round(t_source, 3), "enhanced_audio_s": round(t_audio, 3),
            "app_cpu_s": cpu, "app": lines[-1].get("startup_s") if lines else None}  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--model", default="qcgan-35k")
    p.add_argument("--runtime", default="auto", help="the app's --runtime (default: auto)")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--block-ms", type=float, default=10.0)
    p.add_argument("--latency", default="high", help="PortAudio latency (app default: high)")
    p.add_argument("--samplerate", type=int, default=SR, help="device rate (16000: no resampling)")
    p.add_argument("--jitter-ms", type=float, help="the app's --jitter-ms (default: one block)")
    p.add_argument("--virtual-mic", action="store_true",
                   help="write into `qsa live --virtual-mic` and record it with parec")
    p.add_argument("--startup-runs", type=int, default=3,
                   help="--virtual-mic: warm starts timed after the cold one (default: 3)")
    p.add_argument("--startup-only", action="store_true",
                   help="--virtual-mic: time the starts only, no long session")
    p.add_argument("--cache-home", type=Path, metavar="DIR",
                   help="the app's XDG_CACHE_HOME (its export cache: DIR/qsa/live); default: "
                   "a fresh temporary one, so the first start exports (cold)")
    p.add_argument("--out", type=Path, help="write the result as JSON here")
    args = p.parse_args(argv)

    from qsa.apps.live.pulse import PrivatePulse

    host = host_reference()

    with tempfile.TemporaryDirectory() as d, PrivatePulse({"loop": args.samplerate}) as pa:
        clock = clocked_microphone(pa, "loop", args.samplerate) if args.virtual_mic else None
        try:
            return _run(args, pa, Path(d), host)
        finally:
            if clock is not None:
                clock.terminate()
                clock.wait(timeout=10)


def _run(args, pa, d: Path, host: dict) -> int:
    wav = d / "noisy.wav"
    sf.write(wav, noisy_speech(args.minutes * 60), SR, subtype="FLOAT")
    route = ["--virtual-mic"] if args.virtual_mic else ["-i", "pulse", "-o", "pulse"]
    cache_home = args.cache_home or d / "cache"
    cmd = [
        sys.executable, "-m", "qsa.cli", "live", "--model", args.model,
        "--runtime", args.runtime, "--precision", args.precision, *route,
        "--samplerate", str(args.samplerate), "--block-ms",
        str(args.block_ms), "--latency", args.latency, "--input-file", str(wav),
        "--json-stats",
    ]  # fmt: skip
    if args.jitter_ms is not None:
        cmd += ["--jitter-ms", str(args.jitter_ms)]
    startup, rec = None, None
    if args.virtual_mic:
        short = d / "short.wav"
        sf.write(short, noisy_speech(5.0), SR, subtype="FLOAT")
        scmd = [str(short) if c == str(wav) else c for c in cmd]
        # an empty export cache for the cold start; the warm ones (and the session) reuse it
        env = dict(pa.env, XDG_CACHE_HOME=str(cache_home))
        runs = [startup_time(pa, scmd, args.samplerate, env=env)
                for _ in range(args.startup_runs + 1)]  # fmt: skip

        def median(key, sub=None):
            v = [r[key] if sub is None else (r[key] or {}).get(sub) for r in runs[1:]]
            v = [x for x in v if x is not None]
            return float(np.median(v)) if v else None

        startup = {"cold": runs[0], "cold_is_cold": args.cache_home is None,
                   "warm": runs[1:],
                   "warm_enhanced_audio_s_median": median("enhanced_audio_s"),
                   "warm_app_cpu_s_median": median("app_cpu_s"),
                   "warm_app_first_output_s_median": median("app", "first_output"),
                   "warm_app_first_output_cpu_s_median": median("app", "first_output_cpu"),
                   # the app's own: stream started -> first enhanced sample to the device
                   "warm_stream_to_first_output_s": [
                       None if not r["app"] or r["app"].get("first_output") is None
                       or r["app"].get("stream_started") is None
                       else round(r["app"]["first_output"] - r["app"]["stream_started"], 3)
                       for r in runs[1:]],
                   "load_average": os.getloadavg()}  # fmt: skip
        if args.startup_only:
            result = {"model": args.model, "runtime": args.runtime,
                      "precision": args.precision, "samplerate": args.samplerate,
                      "startup": startup, "host_reference": host}  # fmt: skip
            print(json.dumps(result, indent=2))
            if args.out:
                from qsa.fileio import atomic_write_text

                atomic_write_text(args.out, json.dumps(result, indent=2) + "\n")
            return 0
    t0 = time.monotonic()
    _CPU0["t"] = _cpu_times()
    app = subprocess.Popen(cmd, env=dict(pa.env_for("loop", "loop.monitor"),
                                         XDG_CACHE_HOME=str(cache_home)),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if args.virtual_mic:
        while not _source_exists(pa.env, "qsa_mic") and app.poll() is None:
            time.sleep(0.01)
        rec = SourceRecorder(pa.env, "qsa_mic", args.samplerate)
    out, err = app.communicate()
    if rec is not None:
        rec.stop()
    r = subprocess.CompletedProcess(cmd, app.returncode, out, err)
    wall = time.monotonic() - t0
    lines = [json.loads(s) for s in r.stdout.splitlines() if s.startswith("{")]
    if r.returncode != 0 or not lines:
        print(r.stderr[-2000:], file=sys.stderr)
        return r.returncode or 1
    final = lines[-1]
    hop_ms = final["hop"] / SR * 1000
    # the stream's start: PortAudio's ALSA -> PulseAudio path underflows once or twice in its
    # first second even with the passthrough model (measured 2026-12-02); counted apart
    started = [d for d in lines if d["t"] <= STARTUP_S]
    base = started[-1] if started else {"underruns": 0, "overruns": 0}
    result = {
        "model": args.model,
        "runtime": args.runtime,
        "precision": args.precision,
        "minutes": args.minutes,
        "block_ms": args.block_ms,
        "latency": args.latency,
        "jitter_ms": args.jitter_ms,
        "samplerate": args.samplerate,
        "wall_s": round(wall, 1),
        "stream_s": final["t"],
        "hops": final["hops"],
        "hop_ms": hop_ms,
        "hop_ms_median": final["hop_ms_median"],
        "hop_ms_p99": final["hop_ms_p99"],
        "hop_ms_max": final["hop_ms_max"],
        "p99_share_of_hop": round(final["hop_ms_p99"] / hop_ms, 4),
        "session_hop_ms_p99": final["session_hop_ms_p99"],
        "session_p99_share_of_hop": round(final["session_hop_ms_p99"] / hop_ms, 4),
        "session_hop_ms_max": final.get("session_hop_ms_max"),
        "rtf": final["rtf"],
        "underruns": final["underruns"],
        "overruns": final["overruns"],
        f"underruns_after_{STARTUP_S:g}_s": final["underruns"] - base["underruns"],
        f"overruns_after_{STARTUP_S:g}_s": final["overruns"] - base["overruns"],
        # the acceptance figure (issue 29): the output ring's underruns once the app's
        # jitter buffer ended its start-up (jitter_buffer.startup_end_s of stream time), plus
        # the device's own underflows after it
        "underruns_after_startup": final.get("underruns_after_startup"),
        "device_underflows_after_startup": final["xruns"]["device_output_underflows"]
        - base.get("xruns", {}).get("device_output_underflows", 0),
        "jitter_buffer": final.get("jitter_buffer"),
        "drift_slipped_samples": final.get("drift_slipped_samples"),
        "xruns": final["xruns"],
        "startup_shortfalls": final.get("startup_shortfalls"),
        "xrun_times_s": final.get("xrun_times_s"),
        "xrun_callback_gap_ms": final.get("xrun_callback_gap_ms"),
        "xrun_portaudio_gap_ms": final.get("xrun_portaudio_gap_ms"),
        "xrun_wakeup_gap_ms": final.get("xrun_wakeup_gap_ms"),
        "xrun_worker_quiet_ms": final.get("xrun_worker_quiet_ms"),
        "callback_gap_ms_max": final.get("callback_gap_ms_max"),
        "restarts": final["restarts"],
        # the output ring's backlog dropped after output stalls, and the jitter buffer's growth
        "trimmed": final.get("trimmed"),
        "jitter_growth_ms": final.get("jitter_growth_ms"),
        "latency_ms": final["latency_ms"],
        "priority": final.get("priority"),
        "host_reference": host,
        "virtual_mic": None if not args.virtual_mic else {
            "startup": startup,
            "second_client": {"samples": rec.samples,
                              "seconds": round(rec.samples / args.samplerate, 1),
                              "nonfinite_or_over_1": rec.bad, "peak": round(rec.peak, 4)},
        },  # fmt: skip
        "note": "hop_ms_* cover the last 4096 hops (~33 s); session_* every hop",
    }
    result["load"] = load_during(t0)
    print(json.dumps(result, indent=2))
    jbs = result["jitter_buffer"] or {}
    print(f"summary: {result['stream_s']:.1f} s stream, p99 per hop {result['hop_ms_p99']} ms "
          f"(last ~33 s) / {result['session_hop_ms_p99']} ms (session) of {hop_ms:g} ms, "
          f"underruns after start-up ({jbs.get('startup_end_s')} s): "
          f"{result['underruns_after_startup']} ring + "
          f"{result['device_underflows_after_startup']} device, all {result['underruns']}, "
          f"end-to-end {result['latency_ms']['end_to_end']} ms, "
          f"CPU idle during the session {result['load']['cpu_idle_pct']} %", file=sys.stderr)
    if args.out:
        from qsa.fileio import atomic_write_text

        atomic_write_text(args.out, json.dumps(result, indent=2) + "\n")
    return 0


def _cpu_times() -> list[int]:
    with open("/proc/stat") as f:
        return [int(v) for v in f.readline().split()[1:]]


_CPU0 = {}


def load_during(t0: float) -> dict:
    """How idle the host was while the session ran (/proc/stat since ``_run`` began): the
    issue's figure is for an idle host, and a shared VM rarely is."""
    now = _cpu_times()
    before = _CPU0.get("t", now)
    d = [a - b for a, b in zip(now, before, strict=True)]
    total = max(sum(d), 1)
    return {"cpu_idle_pct": round(100 * d[3] / total, 1),
            "cpu_steal_pct": round(100 * d[7] / total, 2) if len(d) > 7 else None,
            "load_average": os.getloadavg()}  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
