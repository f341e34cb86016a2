"""Showing a running ``LiveSession``: a rich Live panel (b toggles bypass, up / down arrows or
+ / - change the attenuation limit in 3 dB steps, q quits) or JSON lines (``--json-stats``),
and the loop that runs a session until it is done or stopped."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import threading
import time

from .engine import LiveSession

ATTEN_STEP_DB = 3.0
ATTEN_TOP_DB = 60.0  # one step above this is "no limit" (at 60 dB the input mix is -60 dB)
# arrow keys in a terminal: normal and application cursor mode
_UP, _DOWN = ("\x1b[A", "\x1bOA"), ("\x1b[B", "\x1bOB")


def parse_keys(keys: str) -> tuple[str, int]:
    """Keys read from the terminal -> (the other keys, net steps of the attenuation limit:
    +1 per up arrow or '+', -1 per down arrow or '-'). The arrows' escape sequences are
    taken out first: a down arrow ends in 'B', which must not toggle bypass."""
    steps = 0
    for seqs, sign in ((_UP, 1), (_DOWN, -1)):
        for seq in seqs:
            steps += sign * keys.count(seq)
            keys = keys.replace(seq, "")
    steps += keys.count("+") - keys.count("-")
    return keys.replace("+", "").replace("-", ""), steps


def stepped_atten_lim(current: float | None, steps: int, step_db: float = ATTEN_STEP_DB,
                      top_db: float = ATTEN_TOP_DB) -> float | None:
    """The limit ``steps`` steps up (stronger) or down from ``current``: 0 dB at the bottom,
    None (no limit) one step above ``top_db``."""
    if steps == 0:
        return current
    db = top_db + step_db if current is None else float(current)
    db = max(0.0, db + steps * step_db)
    return None if db > top_db else db


def _fmt(v, unit="", nd=1):
    return "-" if v is None else f"{v:.{nd}f}{unit}"


def render(stats: dict):
    from rich.table import Table

    lat = stats["latency_ms"]
    t = Table(title=f"qsa live · {stats['model']}", show_header=False, expand=False)
    t.add_column(justify="right", style="bold")
    t.add_column()
    mode = "[yellow]BYPASS[/]" if stats["bypass"] else "[green]enhancing[/]"
    t.add_row("mode", f"{mode}   (b: toggle bypass, q: quit)")
    lim = stats.get("atten_lim_db")
    t.add_row(
        "strength",
        ("no limit" if lim is None else f"noise reduced by at most {lim:g} dB")
        + f"   (up/down or +/-: {ATTEN_STEP_DB:g} dB steps)",
    )
    t.add_row("devices", f"{stats['input_device']} -> {stats['output_device']}")
    t.add_row(
        "stream",
        f"{stats['samplerate']} Hz, {stats['block']}-frame blocks, hop {stats['hop']}, "
        f"{stats['t']:.1f} s",
    )
    t.add_row("input level", _fmt(stats["input_dbfs"], " dBFS"))
    t.add_row("output level", _fmt(stats["output_dbfs"], " dBFS"))
    t.add_row(
        "SNR gain (est.)",
        f"{_fmt(stats['snr_gain_db'], ' dB')}  (in {_fmt(stats['snr_in_db'], ' dB')}, "
        f"out {_fmt(stats['snr_out_db'], ' dB')})",
    )
    t.add_row(
        "time per hop",
        f"median {stats['hop_ms_median']:.3f} ms, p99 {stats['hop_ms_p99']:.3f} ms, "
        f"RTF {stats['rtf']:.3f}",
    )
    t.add_row(
        "latency",
        f"{lat['end_to_end']:.1f} ms = algorithmic {lat['algorithmic']:.1f} + buffering "
        f"{lat['buffering']:.1f} (device {lat['device']:.1f})",
    )
    x = stats["xruns"]
    t.add_row(
        "over/underruns",
        f"{stats['overruns']} / {stats['underruns']}  (ring {x['ring_overruns']}/"
        f"{x['ring_underruns']}, device {x['device_input_overflows']}/"
        f"{x['device_output_underflows']})",
    )
    st = stats.get("startup_s") or {}
    if st.get("first_output") is not None:
        t.add_row(
            "start-up",
            f"audio {st['first_output']:.2f} s after launch (CPU "
            f"{_fmt(st['first_output_cpu'], ' s', 2)}), model ready at "
            f"{_fmt(st['model_ready'], ' s', 2)}",
        )
    if stats["recorded_s"] is not None:
        t.add_row("recorded", f"{stats['recorded_s']:.1f} s")
    return t


@contextlib.contextmanager
def _keys():
    """Yield a function returning the keys pressed since the last call ('' when none);
    a terminal in cbreak mode while active, nothing when stdin is not a terminal."""
    if not sys.stdin.isatty():
        yield lambda: ""
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    old = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def read():
        out = ""
        while select.select([fd], [], [], 0)[0]:
            out += os.read(fd, 32).decode(errors="ignore")
        return out

    try:
        yield read
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)


@contextlib.contextmanager
def _stop_on_signals():
    """SIGINT (Ctrl-C) and SIGTERM (``kill``, a service manager) stop the session the same
    way: save, report, exit 0. Installed explicitly because a process started in the
    background by a shell (``cmd &``) inherits SIGINT *ignored*, and Python then never
    installs its KeyboardInterrupt handler: such a session would not stop on SIGINT at all.
    The previous handlers come back afterwards. Only the main thread may set handlers; from
    another thread this does nothing (stop with ``session.close()``). Only the first signal
    interrupts: a second Ctrl-C while the recording is being finalised is ignored, so it
    cannot cut the WAV short (closing is bounded: ``LiveSession.close``)."""
    stopping: list = []  # non-empty: stopping already, further signals are ignored
    if threading.current_thread() is not threading.main_thread():
        yield stopping
        return

    def stop(signum, frame):
        if not stopping:
            stopping.append(signum)
            raise KeyboardInterrupt(signal.Signals(signum).name)

    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stopping
    finally:
        for s, h in old.items():
            if h is not None:  # None: a handler set outside Python, which cannot be restored
                signal.signal(s, h)


def _json_line(stats: dict) -> None:
    """One --json-stats line in one write: ``print`` writes the text and its newline apart,
    and a Ctrl-C / SIGTERM between the two (the handler raises there) left the final line
    glued to the cut one."""
    sys.stdout.write(json.dumps(stats) + "\n")
    sys.stdout.flush()


def run_session(session: LiveSession, json_stats: bool = False, interval: float = 1.0) -> dict:
    """Start ``session`` and show it until done, 'q', Ctrl-C / SIGTERM or a device error
    (raised as QsaError after everything is saved). Returns the final statistics."""
    with _stop_on_signals() as stopping:
        return _run(session, json_stats, interval, stopping)


def _run(session: LiveSession, json_stats: bool, interval: float, stopping: list) -> dict:
    try:
        session.start()
        if json_stats:
            next_t = time.monotonic() + interval
            while not session.done:
                time.sleep(0.05)
                session.check_alive()
                if time.monotonic() >= next_t:
                    next_t = time.monotonic() + interval
                    _json_line(session.stats())
        else:
            from rich.live import Live

            with _keys() as keys, Live(render(session.stats()), refresh_per_second=4) as live:
                while not session.done:
                    time.sleep(0.1)
                    session.check_alive()
                    k, steps = parse_keys(keys())
                    k = k.lower()
                    proc = session.proc
                    if steps and hasattr(proc, "atten_lim_db"):
                        proc.atten_lim_db = stepped_atten_lim(proc.atten_lim_db, steps)
                    if "b" in k:
                        session.bypass = not session.bypass
                    if "q" in k:
                        break
                    live.update(render(session.stats()))
    except KeyboardInterrupt:
        pass  # Ctrl-C / SIGTERM is how a live session is stopped: save and report below
    finally:
        stopping.append("closing")  # a signal from here on must not cut the saving short
        session.close()
    final = session.stats()
    final["final"] = True
    if json_stats:
        _json_line(final)
    return final
