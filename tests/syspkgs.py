"""Missing system packages in tests: skip where the user could not have installed them, fail
where `make setup` would have (it installs them when run as root, as CI does)."""

from __future__ import annotations

import os

import pytest


def require(missing, what: str) -> None:
    """Nothing when ``missing`` is empty; else fail as root (setup should have installed
    them: a broken install must not pass as a skip), skip otherwise."""
    if not missing:
        return
    msg = f"{what}: {missing} not installed (make setup installs them as root)"
    if os.geteuid() == 0:
        pytest.fail(msg)
    pytest.skip(msg)
