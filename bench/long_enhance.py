"""An 8-hour file through `qsa enhance`: wall time, real-time factor, peak RSS, RSS growth.

    .venv/bin/python bench/long_enhance.py --hours 8 --out bench_out/long_enhance

Writes OUT/in.wav (16 kHz mono PCM_16, generated 10 s at a time: noise whose level changes
every 10 s, a gliding tone, a minute of digital silence every hour), runs `qsa enhance` on it
as a user does (a subprocess, default allocator, ``--threads`` torch threads), samples the
child's RSS from /proc every 0.2 s and takes its peak from wait4. Then checks the output: the
input's length and rate, no temp file left, and windows at the start, around a 10 s chunk
boundary in the middle and at the end equal to offline processing (the model run once over
the window with more context than its receptive field) within one PCM_16 step.

Progress is read from the size of the temporary output file. RSS growth: median RSS while
70-100 % of the audio is written minus that at 10-30 % (before 10 %: model loading); trend:
the least-squares slope of RSS over the audio position (MB per hour of audio); peak growth:
the final peak minus the peak reached when 25 % was written. Writes OUT/results.json; the two
audio files (1.8 GB for 8 h) are removed unless --keep.

Measured (2-core x86 VM, one thread): 8 h in 416 s wall (RTF 0.0145), peak RSS 454 MB,
RSS growth -0.5 MB, trend -0.15 MB/h, peak growth 3.2 MB, output = offline within 3.1e-5.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SR = 16000
PCM16_STEP = 1.0 / 32768


def block(start: int, n: int) -> np.ndarray:
    """Samples [start, start + n) of the input: a minute of digital silence every hour."""
    from qsa.data.synth import long_signal

    return long_signal(start, n, SR, silence_s=(3540, 3600))


def write_input(path: Path, frames: int) -> None:
    import soundfile as sf

    with sf.SoundFile(str(path), "w", samplerate=SR, channels=1, subtype="PCM_16") as f:
        for s in range(0, frames, 10 * SR):
            f.write(block(s, min(10 * SR, frames - s)))


def _proc_kb(pid: int) -> tuple[int, int] | None:
    """(VmRSS, VmHWM) of ``pid`` in kB, None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            v = dict(line.split(":", 1) for line in f if line.startswith(("VmRSS", "VmHWM")))
        return int(v["VmRSS"].split()[0]), int(v["VmHWM"].split()[0])
    except (OSError, KeyError, ValueError):
        return None


def _text(f) -> str:
    f.seek(0)
    return f.read().decode(errors="replace")


def _sample(p: subprocess.Popen, out: Path, frames: int) -> tuple[int, object, list]:
    """Wait for ``p``, sampling its RSS; returns (wait status, its rusage, samples)."""
    samples = []  # (fraction of the audio written, VmRSS kB, VmHWM kB)
    t0, next_report = time.perf_counter(), 60.0
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)  # the child's own rusage
        if pid:
            return status, usage, samples
        kb = _proc_kb(p.pid)
        tmp = [q.stat().st_size for q in out.parent.glob(f".{out.name}.*.tmp") if q.exists()]
        if kb and tmp:  # progress: the PCM_16 samples in the temp output so far
            samples.append((max(0, tmp[0] - 44) / 2 / frames, *kb))
        now = time.perf_counter() - t0
        if now >= next_report and samples:
            print(f"  {now:.0f} s: {100 * samples[-1][0]:.0f} % written, RSS "
                  f"{samples[-1][1] / 1024:.0f} MB", flush=True)
            next_report += 60.0
        time.sleep(0.2)


def run_enhance(src: Path, out: Path, frames: int, threads: int) -> dict:
    qsa = str(Path(sys.executable).with_name("qsa"))
    cmd = [qsa, "enhance", str(src), str(out), "--force", "--threads", str(threads)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONWARNINGS": "ignore"}
    # logs in files, not pipes: nobody reads a pipe while the child runs
    with tempfile.TemporaryFile() as log_out, tempfile.TemporaryFile() as log_err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, stdout=log_out, stderr=log_err)
        status, usage, samples = _sample(p, out, frames)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        stdout, stderr = _text(log_out), _text(log_err)

    def median_rss(lo: float, hi: float) -> float:
        v = [r for q, r, _ in samples if lo <= q < hi]
        return float(np.median(v)) / 1024 if v else float("nan")

    steady = [(q, r) for q, r, _ in samples if q >= 0.1]
    hours = frames / SR / 3600
    slope = (float(np.polyfit([q * hours for q, _ in steady], [r / 1024 for _, r in steady],
                              1)[0]) if len(steady) > 2 else float("nan"))
    hwm25 = min((h for q, _, h in samples if q >= 0.25), default=0) / 1024
    peak = usage.ru_maxrss / 1024
    early, late = median_rss(0.1, 0.3), median_rss(0.7, 1.01)
    return {
        "returncode": p.returncode, "stderr": stderr.strip()[-2000:], "stdout": stdout.strip(),
        "wall_s": round(wall, 1), "rss_samples": len(samples),
        "peak_rss_mb": round(peak, 1),
        "rss_10_30pct_mb": round(early, 1),
        "rss_70_100pct_mb": round(late, 1),
        "rss_growth_mb": round(late - early, 1),
        "rss_trend_mb_per_hour": round(slope, 2),
        "peak_at_25pct_mb": round(hwm25, 1),
        "peak_growth_mb": round(peak - hwm25, 1),
    }


def check_output(src: Path, out: Path, frames: int) -> dict:
    """Length and rate, and windows of the output against the model run offline."""
    import soundfile as sf
    import torch

    import qsa

    torch.set_num_threads(1)
    info = sf.info(str(out))
    model = qsa.load("qcgan-35k")
    hop, rf = model.hop, model.receptive_field_samples
    win, left, right = 7 * SR, rf + SR, SR
    mid_boundary = (frames // 2) // (10 * SR) * (10 * SR)  # a chunk boundary of qsa enhance
    starts = sorted({0, max(0, (mid_boundary - win // 2) // hop * hop),
                     max(0, (frames - win) // hop * hop)})
    worst = 0.0
    with sf.SoundFile(str(out)) as f:
        for s in starts:
            a, b = max(0, s - left), min(frames, s + win + right)
            x, _ = sf.read(str(src), start=a, stop=b, dtype="float32")
            with torch.no_grad():
                ref = model(torch.from_numpy(x)[None])[0].numpy()
            ref = np.clip(ref[s - a : s - a + min(win, frames - s)], -1, 1)
            f.seek(s)
            got = f.read(len(ref), dtype="float32")
            worst = max(worst, float(np.max(np.abs(got - ref))) if len(got) == len(ref)
                        else float("inf"))
    return {
        "frames_in": frames, "frames_out": info.frames, "samplerate_out": info.samplerate,
        "length_ok": info.frames == frames and info.samplerate == SR and info.channels == 1,
        "windows_checked_s": [round(s / SR, 1) for s in starts],
        "max_diff_vs_offline": worst,
        "offline_ok": worst <= PCM16_STEP + 1e-5,
        "temp_files_left": sorted(p.name for p in out.parent.glob(f".{out.name}.*.tmp")),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=8.0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of qsa enhance")
    ap.add_argument("--out", default="bench_out/long_enhance")
    ap.add_argument("--keep", action="store_true", help="keep in.wav and out.wav")
    args = ap.parse_args(argv)
    from qsa.fileio import atomic_write_text

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    src, dst = out_dir / "in.wav", out_dir / "out.wav"
    frames = int(round(args.hours * 3600 * SR))
    t0 = time.perf_counter()
    write_input(src, frames)
    gen_s = time.perf_counter() - t0
    print(f"wrote {src}: {frames / SR:.0f} s ({src.stat().st_size / 1e6:.0f} MB) "
          f"in {gen_s:.1f} s", flush=True)
    dst.unlink(missing_ok=True)
    r = {"hours": args.hours, "audio_s": frames / SR, "threads": args.threads,
         "input_mb": round(src.stat().st_size / 1e6, 1), "generate_s": round(gen_s, 1)}
    r.update(run_enhance(src, dst, frames, args.threads))
    r["rtf"] = round(r["wall_s"] / r["audio_s"], 4)
    r["hours_for_8h_estimate"] = round(8 * r["rtf"], 2)
    if r["returncode"] == 0:
        r.update(check_output(src, dst, frames))
    r["ok"] = bool(r["returncode"] == 0 and r.get("length_ok") and r.get("offline_ok")
                   and not r.get("temp_files_left") and r["peak_growth_mb"] < 16)
    if not args.keep:
        src.unlink(missing_ok=True)
        dst.unlink(missing_ok=True)
    atomic_write_text(out_dir / "results.json", json.dumps(r, indent=2) + "\n")
    print(f"{r['audio_s']:.0f} s of audio: wall {r['wall_s']} s, RTF {r['rtf']}, peak RSS "
          f"{r['peak_rss_mb']} MB, RSS growth {r['rss_growth_mb']} MB (peak growth "
          f"{r['peak_growth_mb']} MB), length ok {r.get('length_ok')}, max diff vs offline "
          f"{r.get('max_diff_vs_offline', float('nan')):.2e}, ok {r['ok']}", flush=True)
    if r["returncode"]:
        print(r["stderr"], file=sys.stderr)
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
