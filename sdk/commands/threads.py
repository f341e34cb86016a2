"""``--threads N``: one argparse type for every command that sets torch's thread count.

A negative count (and 0 where the command needs a count) is refused while the arguments are
parsed, with the usual ``qsa CMD: error: argument --threads: ...`` line and exit 2, instead
of a ``RuntimeError`` traceback from ``torch.set_num_threads`` minutes later.
"""

from __future__ import annotations

import argparse


def thread_count(value: str) -> int:
    """N >= 0 (0: torch's own default, a thread per core)."""
    n = _int(value)
    if n < 0:
        raise argparse.ArgumentTypeError(
            f"{value}: expected a positive number of threads (e.g. --threads 1) or 0 for "
            "torch's default")
    return n


def positive_thread_count(value: str) -> int:
    """N >= 1, for commands that always set the count (no 'torch default' meaning for 0)."""
    n = _int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(
            f"{value}: expected a positive number of threads (e.g. --threads 1)")
    return n


def _int(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r}: expected a whole number of threads (e.g. --threads 1)") from None
