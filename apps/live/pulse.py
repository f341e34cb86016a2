"""A private PulseAudio server with null sinks: a real audio stack for tests, benchmarks
and demos on machines without a sound card.

Runs ``pulseaudio`` in its own XDG_RUNTIME_DIR (0700) with flags that work as root too
(``-n`` no default script, native protocol, ``module-always-sink``); each null sink's
``<name>.monitor`` source is a microphone that hears what is played into the sink. Programs
reach it with ``env`` (``PULSE_SERVER``), ``PULSE_SINK`` / ``PULSE_SOURCE`` select the sink and
the source behind the ALSA ``pulse`` device.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from qsa.errors import QsaError


class PrivatePulse:
    """``with PrivatePulse(sinks={"loop": 16000}) as pa: subprocess.run(..., env=pa.env_for(
    "loop", "loop.monitor"))``; the server and its folder are removed on exit."""

    def __init__(self, sinks: dict[str, int] | None = None, fmt: str = "float32le"):
        if shutil.which("pulseaudio") is None:
            raise QsaError("pulseaudio is not installed (apt-get install pulseaudio)")
        self.sinks = dict(sinks or {"loop": 16000})
        self.dir = Path(tempfile.mkdtemp(prefix="qsa-pulse-"))
        os.chmod(self.dir, 0o700)
        self.env = dict(os.environ, XDG_RUNTIME_DIR=str(self.dir), HOME=str(self.dir))
        self.env.pop("PULSE_SERVER", None)
        cmd = [
            "pulseaudio",
            "-n",
            "--daemonize=yes",
            "--exit-idle-time=-1",
            "--high-priority=yes",
            "--realtime=yes",  # effective when allowed (root)
            "-L",
            "module-native-protocol-unix",
            "-L",
            "module-always-sink",
        ]
        for name, rate in self.sinks.items():
            cmd += ["-L", f"module-null-sink sink_name={name} rate={rate} format={fmt} channels=1"]
        r = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=30)
        pid_file = self.dir / "pulse" / "pid"
        if r.returncode != 0 or not pid_file.is_file():
            shutil.rmtree(self.dir, ignore_errors=True)
            raise QsaError(f"pulseaudio did not start: {r.stderr.strip()[-500:]}")
        self.pid = int(pid_file.read_text())
        self.env["PULSE_SERVER"] = f"unix:{self.dir / 'pulse' / 'native'}"

    def env_for(self, sink: str, source: str) -> dict:
        """Environment for a program whose ALSA ``pulse`` device plays into ``sink`` and
        records ``source`` (e.g. ``"loop.monitor"``)."""
        return dict(self.env, PULSE_SINK=sink, PULSE_SOURCE=source)

    def stop(self) -> None:
        """Stop the server (idempotent) and remove its folder."""
        try:
            os.kill(self.pid, signal.SIGTERM)
            for _ in range(100):
                os.kill(self.pid, 0)
                time.sleep(0.05)
        except ProcessLookupError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
