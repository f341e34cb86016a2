"""qsa.workers: the spawned pools behind PESQ, metrics and corpus synthesis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

CHILD = """
import os, sys
from qsa.workers import spawn_pool
ex = spawn_pool(2)
pids = sorted(set(ex.submit(os.getpid).result() for _ in range(8)))
print(" ".join(map(str, pids)), flush=True)
sys.stdin.read()  # wait to be killed
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie still answers kill 0; it has exited
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_workers_exit_when_their_parent_is_killed(sig):
    """A run killed without shutting its pool down (SIGKILL, or SIGTERM's default action)
    leaves no worker behind: each watches its parent and exits once it is gone (before,
    the PESQ workers of killed training runs stayed as orphans)."""
    p = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(x) for x in p.stdout.readline().split()]
        assert pids and all(_alive(w) for w in pids)
        p.send_signal(sig)
        p.wait(timeout=30)
        deadline = time.monotonic() + 30  # generous: the workers poll every 0.5 s
        while any(_alive(w) for w in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [w for w in pids if _alive(w)]
        for w in left:
            os.kill(w, signal.SIGKILL)
        assert not left, f"workers {left} outlived their parent"
    finally:
        if p.poll() is None:
            p.kill()
