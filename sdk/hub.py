"""``qsa.load``: a shipped model by name, a preset (fresh weights) or a packed model file."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import ConfigError

if TYPE_CHECKING:  # torch loads with the first model: `qsa info` lists models without it
    from torch import nn


def shipped_weights(name: str) -> Path | None:
    """Path of the packed weights shipped in the package for ``name``, if any."""
    p = resources.files("qsa") / "weights" / f"{name}.qsa"
    return Path(str(p)) if p.is_file() else None


# leading bytes of files people hand to `--model` / `qsa inspect` by mistake
_MAGIC = (
    (0, b"RIFF", "a RIFF file (WAV audio?)"),
    (0, b"fLaC", "FLAC audio"),
    (0, b"OggS", "Ogg audio"),
    (0, b"ID3\x03", "MP3 audio"),
    (0, b"ID3\x04", "MP3 audio"),
    (4, b"TFL3", "a TFLite model (.tflite, e.g. from `qsa export --target litert/tflm`)"),
    (4, b"ET12", "an ExecuTorch program (.pte, from `qsa export --target executorch`)"),
    (0, b"PK\x03\x04", "a zip archive (a torch.save checkpoint?)"),
)


def foreign_file(path: str | os.PathLike) -> str | None:
    """What ``path`` is when it is a known format other than a packed model file (its
    leading bytes, or the .onnx suffix), else None."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            head = f.read(16)
    except OSError:
        return None
    for at, magic, what in _MAGIC:
        if head[at : at + len(magic)] == magic:
            return what
    if p.suffix.lower() == ".onnx":
        return "an ONNX model (.onnx, from `qsa export --target onnx`)"
    # a packed file starts with its 8-byte little-endian header length: never all printable
    if head[:1] in (b"{", b"[", b"<") and len(head) >= 8 and all(32 <= c < 127 or c in b"\t\r\n"
                                                                 for c in head):
        return "a text file (JSON / XML / HTML)"
    return None


def check_packed(path: str | os.PathLike) -> None:
    """A :class:`FormatError` naming what ``path`` is when it is clearly not a packed model
    file (audio, an exported artifact, a pickle), before the packed-file reader sees it."""
    what = foreign_file(path)
    if what is not None:
        from .errors import FormatError

        raise FormatError(
            f"{path} is {what}, not a packed qsa model file (.qsa); pass a shipped model name "
            "(see `qsa info`) or a .qsa written by `qsa pack` / `qsa train`"
            + ("; exported artifacts run with `qsa live --model FILE` or `qsa compare`"
               if "export" in what else "")
        )


def load(
    name_or_path: str | os.PathLike, dequantize: bool = False, allow_untrained: bool = True
) -> nn.Module:
    """Load a model.

    * a path to a packed model file (``.qsa``): verified and rebuilt;
    * a ``qsa train`` run folder or its ``checkpoint.safetensors``: the generator as trained
      so far (fp32), built from the preset the run names;
    * a shipped model name (e.g. ``"qcgan-35k"``): its packed weights from the package;
    * any other registered preset: freshly initialised, with a warning saying so (for
      training; ``allow_untrained=False`` refuses).
    """
    from .models.registry import build_model, preset_config, preset_names
    from .quantize import load_packed

    s = str(name_or_path)
    p = Path(s)
    from .train.checkpoint import checkpoint_file, generator_from_checkpoint

    ckpt = checkpoint_file(p)
    if ckpt is not None:
        return generator_from_checkpoint(ckpt)
    if p.suffix in (".qsa", ".safetensors") or p.is_file():
        check_packed(p)
        return load_packed(p, dequantize=dequantize)
    w = shipped_weights(s)
    if w is not None:
        return load_packed(w, dequantize=dequantize)
    if s in preset_names():
        if not allow_untrained:
            raise ConfigError(
                f"{s!r} has no shipped weights in this install; train it with "
                f"`qsa train {s}` or pass a packed model file"
            )
        import warnings

        warnings.warn(
            f"{s!r} has no shipped weights in this install: returning a freshly initialised "
            "(untrained) model; load a packed model file for trained weights",
            UserWarning,
            stacklevel=2,
        )
        return build_model(preset_config(s)).eval()
    raise ConfigError(
        f"{s!r} is neither a model file nor a known model; known models: " f"{preset_names()}"
    )
