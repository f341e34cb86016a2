"""qsa's enhancers against the peers a user would pick instead, on the same utterances.

    .venv/bin/python bench/se_peers.py [DATA ...] [--limit N] [--throughput]

DATA: ``DIR``, ``synth:DIR``, ``voicebank:DIR`` or ``dns:DIR`` (qsa.data's readers). Default:
the synthetic test split ``data/synth/test``; when it is missing, one is made under ``--out``
(``qsa data synth``, or the generator's test items, or a small espeak-ng set).

Runs the noisy input, qcgan-35k, qcgan-0.89m (offline: torch only) and its streaming variant
qcgan-0.89m-causal (fp32 and int8 on each runtime that builds),
RNNoise, DeepFilterNet3 and noisereduce; each peer at its native rate, resampled with soxr,
delay-compensated, scored at 16 kHz. Writes ``--out``/results.json (default bench/out/se_peers,
git-ignored), the markdown report (``--md``, default docs/benchmarks.md for a run of every peer
and model, ``--out``/benchmarks.md for a subset; also printed) and the PNG plot next to it:
one table of quality and cost, PESQ-WB by SNR bucket and by noise type,
and with ``--throughput`` the evaluation pipeline's own PESQ/STOI throughput (serial vs pool).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.peers import PEER_NAMES, get_peer, scoring  # noqa: E402
from bench.peers import corpus as corpus_mod  # noqa: E402

SR = 16000
DEFAULT_DATA = "data/synth/test"
QSA_MODELS = ("qcgan-35k", "qcgan-0.89m", "qcgan-0.89m-causal")
HEADLINE = ("pesq_wb", "pesq_nb", "stoi", "si_sdr", "csig", "cbak", "covl", "dnsmos_sig",
            "dnsmos_bak", "dnsmos_ovrl")


# -- data -------------------------------------------------------------------------------------


def resolve_data(paths: list[str], out: Path, synth_hours: float, notes: list[str]) -> list[str]:
    """The data specs to score. Without any: ``data/synth/test`` when it exists, else a
    synthetic test split made under ``--out`` (never in data/, which training owns): the
    corpus generator's test items (qsa.data.synth), else ``qsa data synth``, else a small
    espeak-ng set (bench/peers/corpus.py)."""
    if paths:
        return list(paths)
    default = ROOT / DEFAULT_DATA
    if default.is_dir():
        return [str(default)]
    target = out / "synth"
    if (target / "test").is_dir() and (target / "manifest.jsonl").is_file():
        notes.append(
            f"data/synth/test is missing: scored the test split an earlier run wrote to {target}"
        )
        return [str(target / "test")]
    n = max(10, round(synth_hours * 3600 * 0.1 / 3.4))  # test split: 10 %, ~3.4 s/item
    try:  # only the test items: the same ones `qsa data synth` writes to OUT/test (seed 0)
        corpus_mod.make_test_split(target, n=n)
        notes.append(
            f"data/synth/test is missing: wrote the first {n} items of the synthetic corpus's "
            f"test split (qsa.data.synth.build_item, seed 0: the items `qsa data synth OUT "
            f"--hours {synth_hours}` puts in OUT/test) to {target}"
        )
        return [str(target / "test")]
    except ImportError:
        pass
    qsa = ROOT / ".venv" / "bin" / "qsa"
    exe = str(qsa) if qsa.exists() else shutil.which("qsa")
    synth_cli = [exe, "data", "synth", "--help"] if exe else None
    if synth_cli and subprocess.run(synth_cli, capture_output=True).returncode == 0:
        cmd = [exe, "data", "synth", str(target), "--hours", str(synth_hours)]
        subprocess.run(cmd, check=True, cwd=ROOT)
        notes.append(
            f"data/synth/test is missing: made one with `qsa data synth {target} "
            f"--hours {synth_hours}`"
        )
        return [str(target / "test")]
    small = out / "synth_small"
    if not (small / "test" / "manifest.jsonl").is_file():
        corpus_mod.make_small_synth(small, n=50)
    notes.append(
        f"no synthetic corpus generator available: scored a small espeak-ng set instead "
        f"({small / 'test'}: 50 utterances, 5 noise types x SNR -5..15 dB, "
        "bench/peers/corpus.py make_small_synth)"
    )
    return [str(small / "test")]


def speech_probe() -> np.ndarray:
    """espeak-ng speech for measuring the qsa entrants' delays."""
    x = corpus_mod.espeak(corpus_mod.SENTENCES[0])
    if x is None:  # deterministic fallback: a chirpy harmonic signal with pauses
        t = np.arange(2 * SR) / SR
        x = 0.3 * np.sin(2 * np.pi * (150 + 40 * t) * t) * (np.sin(2 * np.pi * 3 * t) > 0)
    return np.asarray(x, np.float32)


# -- running ----------------------------------------------------------------------------------


def run_entrant(peer, utts, workers: int, rate: int = SR, dnsmos: int = 64) -> dict:
    """Enhance every utterance, time it (wall and CPU), score it; rows and totals.

    ``rate`` other than 16 kHz: each noisy item is resampled to ``rate`` (soxr HQ) and given
    to the system at that rate, as a 44.1 / 48 kHz file or device would; its output is
    resampled back to 16 kHz and scored against the same clean reference. ``dnsmos`` > 0
    adds the no-reference DNSMOS P.835 scores (qsa.metrics.dnsmos) of that many evenly
    spaced outputs (the same items for every system; -1: all): DNSMOS costs ~0.5 CPU s per
    9 s window and a short clip is repeated to 9 s and more, ~3 CPU s per item."""
    from bench.peers.base import resample

    outs, seconds, cpu = [], 0.0, 0.0
    for u in utts:
        if rate == SR:
            outs.append(peer.enhance(u.noisy, SR))
        else:
            y = peer.enhance(resample(u.noisy, SR, rate), rate)
            outs.append(resample(y, rate, SR)[: len(u.noisy)])
        seconds += peer.last_seconds
        cpu += peer.last_cpu_seconds
    scores = scoring.score_batch([u.clean for u in utts], outs, SR, workers=workers)
    if dnsmos:
        n = len(outs) if dnsmos < 0 else min(dnsmos, len(outs))
        for i in sorted(set(np.linspace(0, len(outs) - 1, n).round().astype(int))):
            scores[i].update(scoring.dnsmos_scores(outs[i], SR))
    audio_s = sum(len(u.noisy) for u in utts) / SR
    rows = [
        {"id": u.id, "snr": u.snr_db, "noise_type": u.noise_type, **s}
        for u, s in zip(utts, scores, strict=True)
    ]
    return {
        "rows": rows,
        "n": len(utts),
        "process_seconds": seconds,
        "cpu_seconds": cpu,
        "audio_seconds": audio_s,
        "rtf": seconds / audio_s,
        "rtf_cpu": cpu / audio_s,
    }


def subset_for(peer, utts, probe: np.ndarray, budget_s: float) -> list:
    """``utts``, or an evenly spaced subset when the peer's real-time factor on ``probe``
    says the whole set would take more than ``budget_s`` seconds to enhance (at least 10)."""
    peer.enhance(probe, SR)  # also warms the peer up
    rtf = peer.last_seconds / (len(probe) / SR)
    total = rtf * sum(len(u.noisy) for u in utts) / SR
    if budget_s <= 0 or total <= budget_s:
        return utts
    n = max(10, int(len(utts) * budget_s / total))
    if n >= len(utts):
        return utts
    return [utts[i] for i in np.linspace(0, len(utts) - 1, n).round().astype(int)]


def nanmean(v) -> float:
    a = np.asarray([x for x in v if x is not None], np.float64)
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else math.nan


def summarise(rows: list[dict]) -> dict:
    out = {"overall": {m: nanmean(r.get(m) for r in rows) for m in HEADLINE}, "n": len(rows)}
    for key, fn in (
        ("by_snr", lambda r: corpus_mod.snr_bucket(r["snr"])),
        ("by_noise", lambda r: r["noise_type"] or "unknown"),
    ):
        groups = defaultdict(list)
        for r in rows:
            groups[fn(r)].append(r)
        out[key] = {
            g: {"n": len(rs), **{m: nanmean(r.get(m) for r in rs) for m in HEADLINE}}
            for g, rs in groups.items()
        }
    return out


# -- throughput of the evaluation pipeline ----------------------------------------------------


def throughput(n: int, workers: int) -> dict:
    """PESQ-WB + STOI on ``n`` short (1.5 s) synthetic noisy/enhanced pairs: serial, then in a
    process pool of ``workers``; utterances per second and the speed-up."""
    rng = np.random.default_rng(0)
    base = [
        corpus_mod.espeak(s, v)
        for s, v in zip(corpus_mod.SENTENCES, corpus_mod.VOICES * 2, strict=True)
    ]
    base = [b for b in base if b is not None] or [speech_probe()]
    want = int(1.5 * SR)
    refs, degs = [], []
    for i in range(n):
        c = np.pad(base[i % len(base)], (0, want))[:want]
        kind = corpus_mod.NOISE_TYPES[i % len(corpus_mod.NOISE_TYPES)]
        noise = corpus_mod.synth_noise(kind, want, rng)
        c, d = corpus_mod.mix(c, noise, float(rng.uniform(-5, 20)))
        refs.append(c)
        degs.append(d)
    which = ("pesq_wb", "stoi")
    res = {"n": n, "seconds_per_pair": 1.5, "metrics": list(which), "workers": workers}
    import resource

    def cpu_now() -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # pool workers, once joined
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    for label, w in (("serial", 1), ("parallel", workers)):
        t0, c0 = time.perf_counter(), cpu_now()
        s = scoring.score_batch(refs, degs, SR, workers=w, which=which)
        dt, cpu = time.perf_counter() - t0, cpu_now() - c0
        res[label] = {
            "seconds": dt,
            "cpu_seconds": cpu,
            "utt_per_s": n / dt,
            "mean_pesq_wb": nanmean(r["pesq_wb"] for r in s),
        }
    res["speedup"] = res["serial"]["seconds"] / res["parallel"]["seconds"]
    return res


# -- report -----------------------------------------------------------------------------------


def fmt_num(v, digits=2) -> str:
    return (
        "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{digits}f}"
    )


def fmt_si(v, unit="") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "?"
    if v == 0:
        return "0"
    for div, suf in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(v) >= div:
            return f"{v / div:.3g}{suf}{unit}"
    return f"{v:.3g}{unit}"


def fmt_latency(ms) -> str:
    return "offline" if ms is None else f"{ms:g} ms"


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main_table(results: dict) -> list[str]:
    lines = [
        "| system | n | PESQ-WB | PESQ-NB | STOI | SI-SDR dB | CSIG | CBAK | COVL | DNSMOS "
        "SIG / BAK / OVRL | params | MAC/s | latency | RTF wall / CPU | artifact bytes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        o, d = r["summary"]["overall"], r["peer"]
        lines.append(
            f"| {name} | {r['n']} | {fmt_num(o['pesq_wb'])} | {fmt_num(o['pesq_nb'])} | "
            f"{fmt_num(o['stoi'], 3)} | {fmt_num(o['si_sdr'], 1)} | {fmt_num(o['csig'])} | "
            f"{fmt_num(o['cbak'])} | {fmt_num(o['covl'])} | {fmt_num(o.get('dnsmos_sig'))} / "
            f"{fmt_num(o.get('dnsmos_bak'))} / {fmt_num(o.get('dnsmos_ovrl'))} | "
            f"{fmt_si(d['params'])} | "
            f"{fmt_si(d['macs_per_second'])} | {fmt_latency(d['algorithmic_latency_ms'])} | "
            f"{r['rtf']:.3f} / {r['rtf_cpu']:.3f} | {fmt_si(d['artifact_bytes'], 'B')} |"
        )
    return lines


def group_table(results: dict, key: str, metric: str, order=None, digits: int = 2) -> list[str]:
    groups = sorted({g for r in results.values() for g in r["summary"][key]})
    if order:
        groups = [g for g in order if g in groups] + [g for g in groups if g not in order]
    first = next(iter(results.values()))["summary"][key]
    head = " | ".join(f"{g} (n={first.get(g, {}).get('n', 0)})" for g in groups)
    lines = [f"| system | {head} |", "|---|" + "---:|" * len(groups)]
    for name, r in results.items():
        cells = " | ".join(
            fmt_num(r["summary"][key].get(g, {}).get(metric), digits) for g in groups
        )
        lines.append(f"| {name} | {cells} |")
    return lines


SNR_ORDER = ("<0", "0-5", "5-10", "10-15", ">=15", "unknown")


def verdict_lines(results: dict) -> list[str]:
    """The issue's bar, checked on these numbers: qcgan-35k int8 vs RNNoise / noisereduce per
    SNR bucket, and how far DeepFilterNet3 stays ahead."""
    ours = [n for n in results if n.startswith("qcgan-35k int8")]
    if not ours:
        return ["- qcgan-35k int8 was not run (see the skip lines): the bar is not checked."]
    ours_name = ours[0]
    lines = []
    mine = results[ours_name]["summary"]["by_snr"]
    for peer in ("RNNoise", "noisereduce", "DeepFilterNet3"):
        if peer not in results:
            continue
        theirs = results[peer]["summary"]["by_snr"]
        diffs = {
            b: mine[b]["pesq_wb"] - theirs[b]["pesq_wb"]
            for b in SNR_ORDER
            if b in mine and b in theirs
        }
        cells = ", ".join(f"{b}: {d:+.2f}" for b, d in diffs.items())
        wins = sum(d > 0 for d in diffs.values())
        lines.append(
            f"- {ours_name} minus {peer}, PESQ-WB by SNR bucket: {cells} "
            f"(ahead in {wins}/{len(diffs)} buckets)"
        )
    if "RNNoise" in results:
        p_ours = results[ours_name]["peer"]["params"]
        p_rnn = results["RNNoise"]["peer"]["params"]
        lines.append(f"- parameters: {fmt_si(p_ours)} vs RNNoise {fmt_si(p_rnn)}")
    return lines


def _first_row(results: dict, *prefixes: str) -> str | None:
    for p in prefixes:
        for name in results:
            if name.startswith(p) and "@" not in name:
                return name
    return None


def real_voice_lines(results: dict) -> list[str]:
    """The bar of issue 28 (real voices), checked on these numbers; each line says met or
    not met with the numbers behind it."""
    def o(name, m):
        return results[name]["summary"]["overall"].get(m, math.nan)

    def mark(ok):
        return "met" if ok else "NOT met"

    lines = []
    noisy = _first_row(results, "noisy")
    rnn = _first_row(results, "RNNoise")
    dfn = _first_row(results, "DeepFilterNet3")
    for rt in ("tflm", "litert", "torch"):
        ours = _first_row(results, f"qcgan-35k int8 ({rt})")
        if ours is None or rnn is None or noisy is None:
            continue
        dp = o(ours, "pesq_wb") - o(rnn, "pesq_wb")
        st, st_n, st_r = o(ours, "stoi"), o(noisy, "stoi"), o(rnn, "stoi")
        lines.append(
            f"- {ours}: PESQ-WB {o(ours, 'pesq_wb'):.3f} = RNNoise {dp:+.3f} (bar +0.15: "
            f"{mark(dp >= 0.15)}); STOI {st:.3f} vs noisy {st_n:.3f} and RNNoise {st_r:.3f} "
            f"({mark(st > st_n and st >= st_r)})"
        )
        cats = results[ours]["summary"]["by_noise"]
        ncats = results[noisy]["summary"]["by_noise"]
        below = [
            f"{c} {cats[c]['stoi']:.3f} < {ncats[c]['stoi']:.3f}"
            for c in cats
            if c in ncats and cats[c]["stoi"] < ncats[c]["stoi"]
        ]
        lines.append(
            f"  - STOI below the noisy input's in a noise category: "
            f"{'; '.join(below) if below else 'none'} ({mark(not below)})"
        )
    big = _first_row(results, "qcgan-0.89m fp32 (torch)", "qcgan-0.89m int8 (torch)")
    if big and dfn:
        dp, ds = o(big, "pesq_wb") - o(dfn, "pesq_wb"), o(big, "stoi") - o(dfn, "stoi")
        lines.append(
            f"- {big} minus DeepFilterNet3: PESQ-WB {dp:+.3f}, STOI {ds:+.4f} "
            f"({mark(dp >= 0 and ds >= 0)})"
        )
    causal = _first_row(results, "qcgan-0.89m-causal fp32", "qcgan-0.89m-causal int8")
    small = _first_row(results, "qcgan-35k fp32", "qcgan-35k int8")
    if causal and small:
        dp = o(causal, "pesq_wb") - o(small, "pesq_wb")
        lines.append(f"- {causal} minus {small}: PESQ-WB {dp:+.3f} ({mark(dp > 0)})")
    for name in results:
        base, at, rate = name.partition(" @")
        if at and base in results:
            dp = o(name, "pesq_wb") - o(base, "pesq_wb")
            lines.append(
                f"- {base} through {rate}: PESQ-WB {o(name, 'pesq_wb'):.3f}, {dp:+.3f} against "
                f"16 kHz (bar: within 0.05: {mark(abs(dp) <= 0.05)})"
            )
    return lines or ["- no qsa model and peer pair to check"]


def plot(results: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(8, 4.8))
    placed: dict[int, int] = {}
    for name, r in results.items():
        p, y = r["peer"]["params"], r["summary"]["overall"]["pesq_wb"]
        if not math.isfinite(y):
            continue
        if p > 0:
            k = placed.get(p, 0)  # variants of one model share x: stack their labels
            placed[p] = k + 1
            ax.scatter([p], [y], s=40, marker="o" if name.startswith("qcgan") else "s")
            ax.annotate(
                name, (p, y), textcoords="offset points", xytext=(5, 4 - 10 * k), fontsize=8
            )
        else:  # nothing to place on a log axis: a reference line
            ax.axhline(y, ls="--", lw=1, color="grey")
            ax.text(
                1.02,
                y,
                f" {name} (no params)",
                transform=ax.get_yaxis_transform(),
                fontsize=8,
                va="center",
                color="grey",
            )
    ax.set_xscale("log")
    ps = [r["peer"]["params"] for r in results.values() if r["peer"]["params"] > 0]
    ax.set_xlim(min([1e4, *ps]) / 2, max([1e7, *ps]) * 2)  # whole decades, 10K..10M at least
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("parameters (log)")
    ax.set_ylabel("PESQ-WB (mean)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def render(report: dict) -> str:
    L = [
        "# Speech enhancement: qsa vs the peers",
        "",
        "Made by:",
        "",
        "```",
        report["command"],
        "```",
        "",
        f"{report['date']} on {report['cpu']} ({report['cores']} cores, load average "
        f"{report['load_start']} at the start and {report['load_end']} at the end of the run: "
        "the machine is shared, so wall-clock RTF and throughput are upper bounds; the CPU "
        "columns count only this run's own CPU time). torch runs on one thread; the peers' C "
        "runtimes as shipped. Metrics backend: "
        f"{report['metrics_backend']}. Every system is scored at 16 kHz against the clean "
        "reference after removing its own delay; peers run at their native rate (RNNoise and "
        "DeepFilterNet3 at 48 kHz via soxr HQ). RTF: processing seconds per audio second "
        "(resampling included; DeepFilterNet3's per-utterance model load excluded). Latency: "
        "frame + output delay; offline = needs the whole utterance. n: utterances scored (a "
        "system too slow for the whole set within --budget-s gets an evenly spaced subset; its "
        "means are then over that subset only). DNSMOS P.835 (no reference; qsa.metrics.dnsmos, "
        "the DNS Challenge's ONNX models from the speechmos wheel) is the mean over the evenly "
        "spaced items --dnsmos-items names, the same ones for every system. A row named "
        "'@48k' gave the system each item resampled to 48 kHz (soxr HQ), as a 48 kHz file or "
        "device would, and scored its output resampled back to 16 kHz.",
        "",
    ]
    for note in report["notes"]:
        L.append(f"- {note}")
    if report["skipped"]:
        L += ["", "Not run:", ""] + [f"- {s}" for s in report["skipped"]]
    for ds in report["datasets"]:
        res = ds["results"]
        L += ["", f"## {ds['name']} ({ds['n']} utterances, {ds['hours']:.2f} h)", ""]
        L += main_table(res)
        L += ["", "PESQ-WB by SNR bucket (dB):", ""]
        L += group_table(res, "by_snr", "pesq_wb", SNR_ORDER)
        L += ["", "PESQ-WB by noise type:", ""]
        L += group_table(res, "by_noise", "pesq_wb")
        L += ["", "STOI by noise type:", ""]
        L += group_table(res, "by_noise", "stoi", digits=3)
        if any(math.isfinite(r["summary"]["overall"].get("dnsmos_ovrl", math.nan))
               for r in res.values()):
            L += ["", "DNSMOS OVRL by noise type:", ""]
            L += group_table(res, "by_noise", "dnsmos_ovrl")
        L += ["", "SI-SDR (dB) by SNR bucket:", ""]
        L += group_table(res, "by_snr", "si_sdr", SNR_ORDER)
        L += ["", "Against the bar of issue 7:", ""] + verdict_lines(res)
        L += ["", "Against the bar of issue 28 (real voices):", ""] + real_voice_lines(res)
        L += ["", f"![PESQ-WB vs parameters]({ds['plot']})", ""]
    t = report.get("throughput")
    if t:
        L += [
            "## Evaluation pipeline throughput",
            "",
            f"PESQ-WB + STOI on {t['n']} pairs of {t['seconds_per_pair']} s at 16 kHz "
            f"(bench/peers/scoring.py -> {report['metrics_backend']}).",
            "",
            "| mode | workers | wall s | CPU s | utterances/s (wall) |",
            "|---|---:|---:|---:|---:|",
            f"| serial | 1 | {t['serial']['seconds']:.1f} | {t['serial']['cpu_seconds']:.1f} | "
            f"{t['serial']['utt_per_s']:.1f} |",
            f"| process pool | {t['workers']} | {t['parallel']['seconds']:.1f} | "
            f"{t['parallel']['cpu_seconds']:.1f} | {t['parallel']['utt_per_s']:.1f} |",
            "",
            f"Wall-clock speed-up {t['speedup']:.2f}x on {report['cores']} cores at the load "
            f"above (identical mean PESQ-WB: {t['serial']['mean_pesq_wb']:.4f} vs "
            f"{t['parallel']['mean_pesq_wb']:.4f}). The pool costs "
            f"{t['parallel']['cpu_seconds'] / t['serial']['cpu_seconds']:.2f}x the serial CPU "
            "time (worker start-up, imports, transfers), so on an idle machine with "
            f"{t['workers']} free cores it can reach at most about "
            f"{t['workers'] * t['serial']['cpu_seconds'] / t['parallel']['cpu_seconds']:.2f}x "
            f"({t['serial']['cpu_seconds'] / t['n'] * 1000:.0f} CPU ms per pair serially).",
            "",
        ]
    L += [
        "## Caveats",
        "",
        "- The synthetic corpus speaks with espeak-ng voices (formant synthesis), the domain "
        "qsa's models are trained on; RNNoise and DeepFilterNet3 were trained on recorded "
        "speech and can mistake synthetic voices for noise (RNNoise removes some utterances "
        "almost entirely). The fair comparison for the peers is recorded speech: run "
        "`bench/se_peers.py voicebank:DIR` on a local VoiceBank+DEMAND copy (none on this "
        "machine; nothing is downloaded).",
        "- Half of the synthetic items are reverberant and their clean reference is the "
        "early-reverb target (direct path + 50 ms): enhancers that do not dereverberate lose "
        "points there, the noisy input included.",
        "- The RNNoise that `pyrnnoise` bundles is the RNNoise 0.2 model (2.89M parameters, "
        "stored dense), not the 2017 88K-parameter model often quoted for RNNoise.",
        "- noisereduce needs the whole utterance (non-causal smoothing / global statistics), so "
        "it has no streaming latency; its MAC/s is an estimate.",
        "",
    ]
    L += ["## Where the cost figures come from", ""]
    seen = set()
    for ds in report["datasets"]:
        for name, r in ds["results"].items():
            if name in seen:
                continue
            seen.add(name)
            src = "; ".join(f"{k}: {v}" for k, v in r["peer"]["sources"].items())
            L.append(f"- **{name}**: {src}")
    return "\n".join(L) + "\n"


# -- main -------------------------------------------------------------------------------------


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "data",
        nargs="*",
        help=f"data: DIR, synth:DIR, voicebank:DIR or dns:DIR (default {DEFAULT_DATA})",
    )
    ap.add_argument("--limit", type=int, default=None, help="score at most N utterances per set")
    ap.add_argument("--out", default="bench/out/se_peers", help="results.json and plots go here")
    ap.add_argument(
        "--md",
        default=None,
        help="markdown report path (default: docs/benchmarks.md for a run of every peer and "
        "model, OUT/benchmarks.md for a run of a subset, so it never replaces the full page)",
    )
    ap.add_argument(
        "--peers",
        default=",".join(PEER_NAMES),
        help=f"comma-separated, from {','.join(PEER_NAMES)}",
    )
    ap.add_argument(
        "--models",
        default=",".join(QSA_MODELS),
        help="qsa models (shipped names or packed files; NAME@RT+RT gives one model its own "
        "runtimes, e.g. qcgan-0.89m@torch); empty for none",
    )
    ap.add_argument(
        "--runtimes",
        default="torch,onnx,executorch,litert,tflm",
        help="runtimes for the qsa models (exported on first use)",
    )
    ap.add_argument("--precisions", default="fp32,int8")
    ap.add_argument(
        "--allow-untrained",
        action="store_true",
        help="bench registered presets without shipped weights (smoke test only)",
    )
    ap.add_argument(
        "--workers", type=int, default=os.cpu_count() or 1, help="processes for scoring"
    )
    ap.add_argument(
        "--throughput",
        action="store_true",
        help="also time PESQ/STOI on --throughput-n pairs, serial vs parallel",
    )
    ap.add_argument("--throughput-n", type=int, default=1000)
    ap.add_argument(
        "--rate",
        type=int,
        action="append",
        default=None,
        help="also run systems at this input rate (repeatable, e.g. --rate 48000): each item "
        "resampled to it, given to the system at that rate, scored at 16 kHz",
    )
    ap.add_argument(
        "--rate-systems",
        default="qsa",
        choices=("qsa", "all"),
        help="which systems --rate runs: the qsa models (default) or every system",
    )
    ap.add_argument(
        "--dnsmos-items",
        type=int,
        default=64,
        help="DNSMOS P.835 (qsa.metrics.dnsmos) on this many evenly spaced items per system "
        "(the same items for each; -1: all, 0: none); ~3 CPU s per item",
    )
    ap.add_argument("--from-json", help="re-render --md (and plots) from a results.json")
    ap.add_argument(
        "--budget-s",
        type=float,
        default=900,
        help="enhancing seconds per system; slower systems get an evenly spaced subset "
        "(0: no limit)",
    )
    ap.add_argument(
        "--synth-hours",
        type=float,
        default=1.2,
        help="size of the synthetic corpus made when the default split is missing",
    )
    args = ap.parse_args(argv)
    if args.md is None:
        full = args.peers == ",".join(PEER_NAMES) and args.models == ",".join(QSA_MODELS)
        args.md = "docs/benchmarks.md" if full else str(Path(args.out) / "benchmarks.md")
    return args


def model_runtimes(models: list[str], default: str) -> list[tuple[str, list[str]]]:
    """``NAME`` runs on ``--runtimes``; ``NAME@RT+RT`` on its own list (e.g.
    ``qcgan-0.89m-causal@torch``), so one run can give each model the runtimes that matter."""
    out = []
    for m in models:
        name, sep, rts = m.partition("@")
        chosen = [r for r in (rts.split("+") if sep else default.split(",")) if r]
        if not name or not chosen:
            raise SystemExit(f"--models {m!r}: expected NAME or NAME@RUNTIME+RUNTIME "
                             "(e.g. qcgan-0.89m-causal@torch+litert)")
        out.append((name, chosen))
    return out


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.from_json:  # re-render the markdown and plots of a finished run
        report = json.loads(Path(args.from_json).read_text())
        md = Path(args.md)
        for ds in report["datasets"]:
            plot(ds["results"], md.parent / ds["plot"], f"PESQ-WB vs parameters: {ds['name']}")
        text = render(report)
        _write_text(md, text)
        print(text)
        return report
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    md = Path(args.md)
    md.parent.mkdir(parents=True, exist_ok=True)
    command = ".venv/bin/python bench/se_peers.py " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    notes: list[str] = []
    data_dirs = resolve_data(args.data, out, args.synth_hours, notes)

    probe = speech_probe()
    load_start = _loadavg()
    peers = [get_peer(p) for p in args.peers.split(",") if p]
    models = [m for m in args.models.split(",") if m]
    entrants, skipped = [], ["qsa models: none requested (--models '')"]
    if models:  # imports torch
        from bench.peers.qsa_models import build_entrants

        entrants, skipped = [], []
        for name, rts in model_runtimes(models, args.runtimes):
            e, s = build_entrants(
                [name],
                runtimes=rts,
                precisions=[p for p in args.precisions.split(",") if p],
                artifact_dir=out / "artifacts",
                allow_untrained=args.allow_untrained,
                speech=probe,
            )
            entrants += e
            skipped += s
    systems = peers[:1] + entrants + peers[1:]  # noisy first, then ours, then the peers

    report = {
        "command": command,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "metrics_backend": scoring.backend(),
        "notes": notes,
        "skipped": skipped,
        "datasets": [],
    }
    for d in data_dirs:
        utts = corpus_mod.load_pairs(d, limit=args.limit)
        hours = sum(len(u.noisy) for u in utts) / SR / 3600
        kind, sep, rest = d.partition(":")
        p = Path(rest if sep and kind in ("synth", "real", "voicebank", "dns", "folder") else d)
        name = str(p.resolve().relative_to(ROOT) if p.resolve().is_relative_to(ROOT) else p)
        print(f"[{name}] {len(utts)} utterances, {hours:.2f} h", flush=True)
        results = {}
        for peer in systems:
            rates = [SR]
            if args.rate_systems == "all" or peer in entrants:
                rates += [r for r in (args.rate or []) if r != SR]
            subset = subset_for(peer, utts, probe, args.budget_s)
            for rate in rates:
                t0 = time.perf_counter()
                r = run_entrant(peer, subset, args.workers, rate, dnsmos=args.dnsmos_items)
                r["summary"] = summarise(r["rows"])
                r["peer"] = peer.describe()
                r["rate"] = rate
                name = peer.name if rate == SR else f"{peer.name} @{rate // 1000}k"
                results[name] = r
                o = r["summary"]["overall"]
                print(
                    f"  {name:36s} PESQ-WB {o['pesq_wb']:.3f}  STOI {o['stoi']:.3f}  "
                    f"SI-SDR {o['si_sdr']:6.2f}  OVRL {o['dnsmos_ovrl']:.2f}  "
                    f"RTF {r['rtf']:.3f}  ({time.perf_counter() - t0:.0f} s)",
                    flush=True,
                )
        tag = "_".join(Path(name).parts[-2:])
        tag = "".join(c if c.isalnum() else "_" for c in tag).strip("_")
        png = md.parent / f"{md.stem}_pesq_vs_params_{tag}.png"
        plot(results, png, f"PESQ-WB vs parameters: {name}")
        report["datasets"].append(
            {
                "name": name,
                "n": len(utts),
                "hours": hours,
                "results": results,
                "plot": png.name,
            }
        )
    if args.throughput:
        print(
            f"throughput: {args.throughput_n} pairs, serial vs {args.workers} workers", flush=True
        )
        report["throughput"] = throughput(args.throughput_n, args.workers)

    report["load_start"], report["load_end"] = load_start, _loadavg()
    text = render(report)
    _write_text(md, text)
    _write_text(out / "results.json", json.dumps(_json_safe(report), indent=1))
    print(text)
    return report


def _loadavg() -> str:
    try:
        return "/".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:
        return "?"


def _json_safe(obj):
    """NaN/inf -> None, numpy scalars -> Python, recursively (strict JSON)."""
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _write_text(path: Path, text: str) -> None:
    """Atomic write (qsa.fileio when importable)."""
    try:
        from qsa.fileio import atomic_write_text

        atomic_write_text(path, text)
    except ImportError:
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)


if __name__ == "__main__":
    main()
