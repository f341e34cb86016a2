"""`qsa enhance IN OUT`: enhance a file or a folder with a shipped model or a model file.

Progress goes to stderr (a bar with ETA on a terminal, a line every few seconds otherwise);
stdout gets one line per finished file. A folder carries on past a file it cannot enhance
and lists the failures at the end (exit 1); ``--skip-existing`` resumes an interrupted run.
"""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("enhance", help="enhance speech in a file or folder")
    p.add_argument("input", help="audio file (wav/flac/ogg/mp3) or folder")
    p.add_argument("output", help="output file, or folder for a folder input")
    p.add_argument("--model", default="qcgan-35k",
                   help="qcgan-35k | qcgan-0.89m | a packed model file | a qsa train run "
                   "folder or checkpoint (default qcgan-35k)")
    p.add_argument("--force", action="store_true", help="overwrite existing outputs")
    p.add_argument("--skip-existing", action="store_true",
                   help="leave outputs that already exist as they are (resume a folder run)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (default 1: the fastest for these small models, 3-6x "
                   "faster than torch's own default on a busy 2-core machine; 0: torch's "
                   "default)")
    p.add_argument("--atten-lim", metavar="DB", default=None,
                   help="strength: the most the output may lie below the input, in dB (the "
                   "input mixed back in at -DB: 0 = the input unchanged, 12 = noise reduced "
                   "by at most 12 dB); 'none' (default): no limit, the model's full strength")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=run)


def terminate_cleanly() -> None:
    """SIGTERM unwinds like Ctrl-C (exit 143): the partial temporary file of an output being
    written is removed on the way out instead of staying behind."""
    import signal

    def _term(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _term)


class Progress:
    """Progress on stderr: per file (samples done / total, ETA) and for the folder."""

    def __init__(self, quiet: bool, n_files: int, total_s: float):
        import sys
        import time

        self.out, self.time = sys.stderr, time.monotonic
        self.quiet, self.tty = quiet, sys.stderr.isatty()
        self.n_files, self.total_s = n_files, max(total_s, 1e-9)
        self.done_s = 0.0  # seconds of audio in the finished files
        self.t0 = self.time()
        self.last = 0.0
        self.k = 0
        self.name = ""

    def start(self, k: int, name: str) -> None:
        self.k, self.name, self.file_t0 = k, name, self.time()
        self.shown = -1  # samples done at the last line printed for this file

    def update(self, done: int, total: int, sr: int) -> None:
        now = self.time()
        if self.quiet or done == self.shown or (
                now - self.last < (0.2 if self.tty else 5.0) and done < total):
            return  # the finished file's 100% line is printed once, not per late call
        self.last, self.shown = now, done
        frac = done / max(total, 1)
        el = now - self.file_t0
        eta = el / frac - el if frac > 0 else float("nan")
        line = f"  {self.name}: {100 * frac:5.1f}% ({done / sr:.0f}/{total / sr:.0f} s audio)"
        line += f", ETA {eta:.0f} s" if frac > 0 and done < total else ""
        if self.n_files > 1:
            all_done = self.done_s + done / sr
            t = now - self.t0
            left = t / (all_done / self.total_s) - t if all_done > 0 else float("nan")
            line += f"; folder [{self.k}/{self.n_files}] {100 * all_done / self.total_s:.0f}%"
            line += f", ETA {left:.0f} s" if all_done > 0 else ""
        if self.tty:
            print("\r" + line.ljust(100), end="", file=self.out, flush=True)
        else:
            print(line, file=self.out, flush=True)

    def finish(self, seconds: float) -> None:
        self.done_s += seconds
        if self.tty and not self.quiet:
            print("\r" + " " * 100 + "\r", end="", file=self.out, flush=True)


def _duration(path) -> float:
    import soundfile as sf

    try:
        i = sf.info(str(path))
        return i.frames / i.samplerate if i.samplerate else 0.0
    except Exception:  # noqa: BLE001 - only for the ETA; the real read reports the problem
        return 0.0


def run(args) -> int:
    import sys
    from pathlib import Path

    from qsa.errors import ConfigError, QsaError

    if args.threads < 0:
        raise ConfigError(f"--threads {args.threads}: expected a positive number of threads "
                          "(e.g. --threads 1, the default) or 0 for torch's default")
    if args.force and args.skip_existing:
        raise ConfigError("--force and --skip-existing contradict each other; pass one")
    from qsa.enhancement import check_atten_lim

    atten_lim = check_atten_lim(args.atten_lim, "--atten-lim")
    terminate_cleanly()
    import torch

    from qsa.enhancement import (
        check_enhancer,
        enhance_file,
        folder_inputs,
        folder_output,
    )
    from qsa.errors import AudioError
    from qsa.hub import load

    if args.threads:
        torch.set_num_threads(args.threads)
    src, dst = Path(args.input), Path(args.output)
    model = check_enhancer(load(args.model, allow_untrained=False))

    def notice(m: str) -> None:
        print(f"note: {m}", file=sys.stderr)

    if src.is_dir():
        jobs = [(p, folder_output(src, dst, p)) for p in folder_inputs(src, notice)]
        if not jobs:
            raise AudioError(f"{src}: folder holds no audio files (wav/flac/ogg/mp3)")
        if dst.exists() and not dst.is_dir():
            raise QsaError(f"{dst} exists and is not a folder; the input is a folder")
    elif not src.exists():
        raise AudioError(f"{src}: no such file or folder")
    else:
        jobs = [(src, dst / src.name if dst.is_dir() else dst)]
    folder = src.is_dir()
    if args.skip_existing:
        kept = [(s, d) for s, d in jobs if not d.exists()]
        if len(kept) < len(jobs):
            notice(f"skipped {len(jobs) - len(kept)} file(s) whose output exists "
                   "(--skip-existing)")
        jobs = kept
    prog = Progress(args.quiet, len(jobs), sum(_duration(s) for s, _ in jobs))
    failures = []
    for k, (s, d) in enumerate(jobs, 1):
        prog.start(k, s.name)
        try:
            r = enhance_file(model, s, d, args.force, notice=notice, progress=prog.update,
                             atten_lim_db=atten_lim)
        except (QsaError, RuntimeError) as e:  # RuntimeError: libsndfile mid-file
            if not folder:
                if isinstance(e, QsaError):
                    raise
                raise AudioError(f"{s}: cannot read it ({e})") from None
            prog.finish(0.0)
            failures.append((s, " ".join(str(e).split())))
            print(f"qsa enhance: {s}: FAILED: {e}", file=sys.stderr)
            continue
        prog.finish(r["seconds"])
        print(f"{r['input']} -> {r['output']} ({r['seconds']:.1f} s)", flush=True)
    if failures:
        print(f"qsa enhance: {len(failures)} of {len(jobs)} file(s) failed:", file=sys.stderr)
        for s, e in failures:
            print(f"  - {s}: {e}", file=sys.stderr)
        return 1
    return 0
