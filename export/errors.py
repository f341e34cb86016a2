"""Errors raised by the exporters (a ``qsa.errors.QsaError``, printed cleanly by the CLI)."""

from __future__ import annotations

from qsa.errors import QsaError


class ExportError(QsaError, RuntimeError):
    """An export stage failed: an op the target cannot run, a float op left in an int8 graph,
    a budget exceeded, or an artifact whose outputs do not match PyTorch."""
