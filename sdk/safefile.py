"""A strict safetensors container: tensors + one JSON metadata block, verified on load.

Written byte for byte by us (canonical compact JSON header, space padding to 8 bytes, tensors
in name order) so the loader can insist on the exact canonical form: any altered byte of the
header is caught (parse error, non-canonical header or metadata hash mismatch), any altered
payload byte by its sha256, any truncation by the sizes. Only after every check passes does
the ``safetensors`` library parse the buffer. No pickle anywhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .errors import FormatError
from .fileio import atomic_write_bytes

_DTYPES = {
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.float64: "F64",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.int16: "I16",
    torch.int32: "I32",
    torch.int64: "I64",
    torch.bool: "BOOL",
}
_SIZES = {
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "F64": 8,
    "I8": 1,
    "U8": 1,
    "I16": 2,
    "I32": 4,
    "I64": 8,
    "BOOL": 1,
}
_MAX_HEADER = 64 * 1024 * 1024
META_KEY = "qsa"
META_HASH_KEY = "qsa_sha256"


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def dumps(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> bytes:
    """Serialise ``tensors`` and ``meta`` (JSON-able) into safetensors bytes.

    ``meta`` gets ``payload_sha256`` added; its JSON text is hashed into ``qsa_sha256``.
    """
    names = sorted(tensors)
    chunks, entries, offset = [], {}, 0
    for name in names:
        t = tensors[name].detach().contiguous().cpu()
        if t.dtype not in _DTYPES:
            raise FormatError(f"tensor {name!r} has dtype {t.dtype}, which the file cannot hold")
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        entries[name] = {
            "dtype": _DTYPES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        chunks.append(raw)
        offset += len(raw)
    payload = b"".join(chunks)
    meta = dict(meta)
    meta["payload_sha256"] = hashlib.sha256(payload).hexdigest()
    meta_text = _canonical(meta).decode()
    header = {
        "__metadata__": {
            META_KEY: meta_text,
            META_HASH_KEY: hashlib.sha256(meta_text.encode()).hexdigest(),
        },
        **entries,
    }
    hb = _canonical(header)
    hb += b" " * (-len(hb) % 8)
    return struct.pack("<Q", len(hb)) + hb + payload


def save(
    path: str | os.PathLike,
    tensors: dict[str, torch.Tensor],
    meta: dict[str, Any],
    force: bool = True,
) -> Path:
    """Write atomically (temp + fsync + rename)."""
    return atomic_write_bytes(path, dumps(tensors, meta), force=force)


def loads(data: bytes, source: str = "<bytes>", kind: str | None = None):
    """Verify and parse; returns (tensors, meta). Raises FormatError on any problem."""

    def bad(msg: str) -> FormatError:
        return FormatError(f"{source}: {msg}")

    if len(data) < 8:
        raise bad(f"file is {len(data)} bytes, too short to be a qsa file (truncated?)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > _MAX_HEADER or 8 + n > len(data):
        raise bad(f"header length {n} does not fit the file of {len(data)} bytes (truncated?)")
    hb = data[8 : 8 + n]
    body = hb.rstrip(b" ")
    try:
        header = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise bad(f"header is not valid JSON ({e}); the file is corrupted") from None
    if not isinstance(header, dict):
        raise bad("header is not a JSON object; the file is corrupted")
    try:
        canonical = _canonical(header)
    except (ValueError, TypeError):
        canonical = b""
    if canonical != body or n % 8 or len(hb) - len(body) >= 8:
        raise bad("header is not in canonical form; the file was altered or corrupted")
    md = header.pop("__metadata__", None)
    if not isinstance(md, dict) or not isinstance(md.get(META_KEY), str):
        raise bad("no qsa metadata block: not a file written by qsa")
    meta_text = md[META_KEY]
    if hashlib.sha256(meta_text.encode()).hexdigest() != md.get(META_HASH_KEY):
        raise bad("metadata hash mismatch; the file was altered or corrupted")
    meta = json.loads(meta_text)
    if not isinstance(meta, dict):
        raise bad("metadata is not a JSON object")
    if kind is not None and meta.get("format") != kind:
        raise bad(f"this is a {meta.get('format')!r} file, expected {kind!r}")
    payload = data[8 + n :]
    end = 0
    specs = []
    for name in sorted(header):
        e = header[name]
        try:
            dtype, shape, (b0, b1) = e["dtype"], e["shape"], e["data_offsets"]
            ok = dtype in _SIZES and all(isinstance(s, int) and s >= 0 for s in shape)
            ok = ok and isinstance(b0, int) and isinstance(b1, int)
        except (TypeError, KeyError, ValueError):
            ok = False
        if not ok:
            raise bad(f"tensor entry {name!r} is malformed")
        if b0 != end or b1 - b0 != int(np.prod(shape, dtype=np.int64)) * _SIZES[dtype]:
            raise bad(f"tensor {name!r} offsets {b0}..{b1} are inconsistent")
        end = b1
        specs.append(name)
    if end != len(payload):
        raise bad(f"payload is {len(payload)} bytes, the header describes {end} (truncated?)")
    if hashlib.sha256(payload).hexdigest() != meta.get("payload_sha256"):
        raise bad("payload sha256 mismatch; the weights were altered or corrupted")
    from safetensors.torch import load as st_load

    try:
        tensors = st_load(bytes(data))
    except Exception as e:  # the library's own parser: should never trigger after our checks
        raise bad(f"safetensors could not parse the file: {e}") from None
    if sorted(tensors) != specs:
        raise bad("tensor names do not match the header")
    return tensors, meta


def peek_meta(path: str | os.PathLike) -> dict[str, Any] | None:
    """The qsa metadata of a file from its header alone (no payload read, nothing verified:
    ``load`` verifies), or None when it is not a readable qsa file. For telling file kinds
    apart (a packed model from a training checkpoint) before the one real load."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return None
            (n,) = struct.unpack("<Q", head)
            if n > _MAX_HEADER:
                return None
            meta = json.loads(json.loads(f.read(n))["__metadata__"][META_KEY])
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    return meta if isinstance(meta, dict) else None


def load(path: str | os.PathLike, kind: str | None = None):
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise FormatError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise FormatError(f"{path} is a folder; expected a .qsa/.safetensors file") from None
    return loads(data, source=str(path), kind=kind)
