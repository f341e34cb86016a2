"""The packed model file: one safetensors file + a JSON metadata block (``qsa.safefile``).

Contents: format name and version, the model config (``qsa.config``), precision, for int8
files the int8 components of every quaternion layer stored under the layer's own
``<name>.weight`` key with its per-output-unit scales in the JSON (exact float32 values), all
other tensors in fp32, an optional model card, and the sha256 of the payload. Loading
verifies every part and rejects a truncated, altered or wrong-version file with
``qsa.errors.FormatError``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from qsa import safefile
from qsa._version import __version__
from qsa.config import ModelConfig, config_from_dict, config_to_dict
from qsa.errors import ConfigError, FormatError
from qsa.layers.quaternion import is_quaternion_layer
from qsa.models.registry import build_model

from .api import Int8Config, Int8QuaternionLayer
from .packing import PackedQuaternionWeight, pack_weight

FORMAT = "qsa.packed"
FORMAT_VERSION = 1


def _model_config(model: nn.Module) -> ModelConfig:
    cfg = getattr(model, "config", None)
    if not isinstance(cfg, ModelConfig):
        raise ConfigError(
            f"{type(model).__name__} has no .config (a qsa.config.ModelConfig); only registered "
            "qsa models can be saved as packed files"
        )
    return cfg


def packed_state(model: nn.Module, precision: str = "int8"):
    """(tensors, quantized-json) for ``model`` at ``precision`` ('int8' or 'fp32')."""
    if precision not in ("int8", "fp32"):
        raise ConfigError(f"precision={precision!r}; expected 'int8' or 'fp32'")
    tensors: dict[str, torch.Tensor] = {}
    quantized: dict[str, Any] = {}
    activation = None
    skip_prefixes: list[str] = []  # state-dict keys written explicitly below
    for name, m in model.named_modules():
        if any(name.startswith(p) for p in skip_prefixes):
            continue  # the float geometry inside an Int8QuaternionLayer
        if isinstance(m, Int8QuaternionLayer):
            skip_prefixes.append(f"{name}.")
            if precision == "fp32":
                tensors[f"{name}.weight"] = m.packed.dequantize()
            else:
                tensors[f"{name}.weight"] = m.qweight
                quantized[name] = {"scale": m.scale.tolist(), "unit_axis": m.unit_axis}
                activation = m.config.activation
            if m.layer.bias is not None:
                tensors[f"{name}.bias"] = m.layer.bias.detach()
        elif is_quaternion_layer(m) and precision == "int8":
            p = pack_weight(m)
            tensors[f"{name}.weight"] = p.qweight
            quantized[name] = {"scale": p.scale.tolist(), "unit_axis": p.unit_axis}
    for key, t in model.state_dict().items():
        if key in tensors or any(key.startswith(p) for p in skip_prefixes):
            continue
        tensors[key] = t.detach().to(torch.float32) if t.is_floating_point() else t.detach()
    return tensors, quantized, activation


def save_packed(
    model: nn.Module,
    path: str | os.PathLike,
    precision: str = "int8",
    card: dict[str, Any] | None = None,
    force: bool = True,
) -> Path:
    """Write ``model`` as a packed model file (atomically)."""
    cfg = _model_config(model)
    if card is None:  # a model loaded from a packed file keeps its card
        card = (getattr(model, "packed_meta", None) or {}).get("card", {})
    tensors, quantized, activation = packed_state(model, precision)
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "qsa_version": __version__,
        "config": config_to_dict(cfg),
        "precision": precision,
        "activation": activation,
        "quantized": quantized,
        "params": sum(int(t.numel()) for t in tensors.values() if t.dtype != torch.bool),
        "card": card or {},
    }
    return safefile.save(path, tensors, meta, force=force)


def read_packed(path: str | os.PathLike):
    """Verify a packed model file; returns (tensors, meta)."""
    tensors, meta = safefile.load(path, kind=FORMAT)
    v = meta.get("format_version")
    if v != FORMAT_VERSION:
        raise FormatError(
            f"{path}: format version {v!r}, this qsa {__version__} reads version "
            f"{FORMAT_VERSION}; re-export the model with this qsa or upgrade qsa"
        )
    if meta.get("precision") not in ("int8", "fp32"):
        raise FormatError(f"{path}: unknown precision {meta.get('precision')!r}")
    return tensors, meta


def load_packed(path: str | os.PathLike, dequantize: bool = False) -> nn.Module:
    """Rebuild the model stored in ``path``. int8 files load with Int8QuaternionLayer modules
    (the reference int8 path) unless ``dequantize=True`` (fp32 components = q * scale)."""
    tensors, meta = read_packed(path)
    try:
        cfg = config_from_dict(meta["config"])
        model = build_model(cfg)
    except (ConfigError, KeyError, TypeError, ValueError) as e:
        raise FormatError(f"{path}: the stored model config cannot be built: {e}") from None
    quantized = meta.get("quantized") or {}
    modules = dict(model.named_modules())
    packed: dict[str, PackedQuaternionWeight] = {}
    for name, q in quantized.items():
        layer = modules.get(name)
        key = f"{name}.weight"
        if layer is None or not is_quaternion_layer(layer) or key not in tensors:
            raise FormatError(f"{path}: quantised entry {name!r} does not match the model")
        qw = tensors.pop(key)
        try:
            scale = torch.tensor(q["scale"], dtype=torch.float32)
            axis = int(q["unit_axis"])
        except (KeyError, TypeError, ValueError):
            raise FormatError(f"{path}: scales of {name!r} are malformed") from None
        n_units = layer.weight.shape[1 + axis] if axis in (0, 1) else -1
        if qw.dtype != torch.int8 or qw.shape != layer.weight.shape or scale.numel() != n_units:
            raise FormatError(f"{path}: int8 weight/scales of {name!r} do not fit the layer")
        packed[name] = PackedQuaternionWeight(qw, scale, axis)
        tensors[key] = layer.weight.detach().clone()  # placeholder, replaced below
    expected = model.state_dict()
    missing = sorted(set(expected) - set(tensors))
    extra = sorted(set(tensors) - set(expected))
    if missing or extra:
        raise FormatError(
            f"{path}: tensors do not match the model (missing {missing[:5]}, "
            f"unexpected {extra[:5]})"
        )
    for k, t in tensors.items():
        if tuple(t.shape) != tuple(expected[k].shape):
            raise FormatError(
                f"{path}: tensor {k!r} has shape {tuple(t.shape)}, the model "
                f"needs {tuple(expected[k].shape)}"
            )
    model.load_state_dict(tensors, strict=True)
    if packed:
        config = Int8Config(activation=meta.get("activation"))
        for name, p in packed.items():
            parent_name, _, attr = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            if dequantize:
                with torch.no_grad():
                    getattr(parent, attr).weight.copy_(p.dequantize())
            else:
                setattr(parent, attr, Int8QuaternionLayer(getattr(parent, attr), p, config))
    model.packed_meta = meta
    return model.eval()
