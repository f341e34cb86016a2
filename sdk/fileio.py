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


class OutputError(QsaError, OSError):
    """An output location that cannot be created or written (a file in the way, no
    permission, a read-only or full file system)."""


def _why(folder: Path, e: OSError) -> str:
    """Why ``folder`` could not be created, with the fix."""
    if isinstance(e, FileExistsError | NotADirectoryError):
        blocker = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()),
                       folder)
        return f"{blocker} is a file, not a folder; choose another path or move the file away"
    return f"cannot create {folder} ({e.strerror or e}); choose a folder you can write to"


def ensure_dir(path: str | os.PathLike, what: str = "output folder") -> Path:
    """Create ``path`` (and its parents) if needed and return it; an :class:`OutputError`
    naming the path, the reason and the fix when that is impossible."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{what} {path}: {_why(path, e)}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise OutputError(f"{what} {path}: not writable; choose a folder you can write to")
    return path


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, force: bool = True) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it is fsynced and renamed over it.

    With ``force=False`` an existing ``path`` is an error (nothing is overwritten).
    """
    path = Path(path)
    if not force and path.exists():
        raise QsaError(f"{path} already exists; pass --force to overwrite it")
    if path.is_dir():
        raise OutputError(f"{path} is a folder; give a file name for the output")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot write {path}: {_why(path.parent, e)}") from None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise OutputError(
            f"cannot write {path} ({e.strerror or e}); choose a folder you can write to"
        ) from None
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
