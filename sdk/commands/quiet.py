"""Third-party log chatter kept out of the CLI's output unless ``--verbose``.

The runtimes and converters that ``qsa export`` / ``qsa compare`` drive write their own log
lines: the LiteRT converter's progress, absl / oneDNN / cpuinfo / XNNPACK lines from C++,
torchao's failed optional-kernel loads and Python warnings. ``third_party_quiet(verbose)``
sends everything written to file descriptors 1 and 2 while it is active (C++ and Python
alike) into a temporary file, keeps ``sys.stderr`` (qsa's progress bars and notes) on the
real stderr, and silences Python logging below ERROR and warnings. Native code that logs
through Python's ``sys.stderr`` (ExecuTorch's pybindings write ``[cpuinfo_utils.cpp:71] ...``
there, a piece at a time) is recognised by that ``[file.cpp:line]`` prefix and sent to the
temporary file with the rest. If the block raises, the captured lines are shown on stderr
(they usually say why); with ``verbose`` nothing is hidden and the native stdout goes to
stderr, so stdout stays qsa's own (``--json`` valid).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys

# a log line of native code: "[threadpool.cpp:66] Resetting threadpool to 1 threads."
_NATIVE_LINE = re.compile(r"\[[\w./-]+\.(?:c|cc|cpp|cxx|h|hpp):\d+\] ")


class _StderrRouter:
    """``sys.stderr`` while quiet: qsa's own output (progress bars, notes) goes straight to the
    real stderr; a line that starts with "[" is held until it is complete and goes to ``log``
    when it is a native ``[file.cpp:line]`` log line."""

    def __init__(self, real, log):
        self._real, self._log, self._held = real, log, ""

    def write(self, s: str) -> int:
        text, self._held = self._held + s, ""
        while text:
            if text.startswith("["):
                end = text.find("\n")
                if end < 0:
                    self._held = text  # wait for the rest of the line
                    break
                line, text = text[: end + 1], text[end + 1:]
                self._route(line)
            else:
                nxt = text.find("\n[")
                chunk, text = (text, "") if nxt < 0 else (text[: nxt + 1], text[nxt + 1:])
                self._real.write(chunk)
        return len(s)

    def _route(self, line: str) -> None:
        if _NATIVE_LINE.match(line):  # unbuffered, at the offset fds 1 and 2 share
            os.write(self._log.fileno(), line.encode("utf-8", "replace"))
        else:
            self._real.write(line)

    def close_held(self) -> None:
        if self._held:
            self._route(self._held)
            self._held = ""

    def flush(self) -> None:
        self._real.flush()

    def __getattr__(self, name):  # isatty, fileno, encoding, ... of the real stderr
        return getattr(self._real, name)


@contextlib.contextmanager
def third_party_quiet(verbose: bool = False, tail_bytes: int = 8000):
    import logging
    import tempfile
    import warnings

    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    real_err = os.fdopen(os.dup(saved_err), "w", buffering=1, encoding="utf-8",
                         errors="replace")
    log = None if verbose else tempfile.TemporaryFile()  # noqa: SIM115 - closed below
    env_keys = {"TF_CPP_MIN_LOG_LEVEL": "3", "GLOG_minloglevel": "2"}
    old_env = {k: os.environ.get(k) for k in env_keys}
    old_stderr = sys.stderr
    if verbose:
        os.dup2(saved_err, 1)  # native stdout chatter to stderr: stdout stays qsa's
    else:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        sys.stderr = _StderrRouter(real_err, log)
        os.environ.update({k: v for k, v in env_keys.items() if old_env[k] is None})
        logging.disable(logging.WARNING)
    ok = False
    try:
        with warnings.catch_warnings():
            if not verbose:
                warnings.simplefilter("ignore")
            yield
        ok = True
    finally:
        sys.stdout.flush()
        if isinstance(sys.stderr, _StderrRouter):
            sys.stderr.close_held()
        sys.stderr.flush()
        sys.stderr = old_stderr
        os.dup2(saved_out, 1)
        os.dup2(saved_err, 2)
        os.close(saved_out)
        os.close(saved_err)
        real_err.close()
        if log is not None:
            logging.disable(logging.NOTSET)
            for k, v in old_env.items():
                if v is None:
                    os.environ.pop(k, None)
            if not ok:
                log.seek(0)
                data = log.read()
                tail = data[-tail_bytes:].decode(errors="replace").strip()
                if tail:
                    print("--- the runtimes' own output before the error (--verbose shows it "
                          f"always) ---\n{tail}\n---", file=sys.stderr)
            log.close()
