"""Atomic file writes: temp file in the target folder + fsync + rename.

A crash or ``kill -9`` at any point leaves either the old file or the complete new one, never
a partial file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .errors import QsaError


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, force: bool = True) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it is fsynced and renamed over it.

    With ``force=False`` an existing ``path`` is an error (nothing is overwritten).
    """
    path = Path(path)
    if not force and path.exists():
        raise QsaError(f"{path} already exists; pass --force to overwrite it")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; outputs get the usual permissions
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp_path, path)
        with contextlib.suppress(OSError):
            dfd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes, force: bool = True) -> Path:
    """Write ``data`` to ``path`` atomically."""
    with atomic_path(path, force=force) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike, text: str, force: bool = True) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"), force=force)
