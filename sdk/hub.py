"""``qsa.load``: a shipped model by name, a preset (fresh weights) or a packed model file."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from torch import nn

from .errors import ConfigError


def shipped_weights(name: str) -> Path | None:
    """Path of the packed weights shipped in the package for ``name``, if any."""
    p = resources.files("qsa") / "weights" / f"{name}.qsa"
    return Path(str(p)) if p.is_file() else None


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
