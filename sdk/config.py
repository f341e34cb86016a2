"""Frozen, typed model configs saved with the weights (JSON with a ``version`` field).

Every model config is a frozen dataclass deriving from ``ModelConfig``; ``config_to_dict`` /
``config_from_dict`` round-trip it through JSON-able dicts, keyed by the registered
model kind (see ``qsa.models.registry``).
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, ClassVar

from .errors import ConfigError


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Base class: subclasses set ``kind`` (registry key) and ``VERSION``."""

    kind: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1

    def to_dict(self) -> dict[str, Any]:
        return config_to_dict(self)


def config_to_dict(cfg: ModelConfig) -> dict[str, Any]:
    if not dataclasses.is_dataclass(cfg):
        raise ConfigError(f"{cfg!r} is not a config dataclass")
    fields = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        fields[f.name] = list(v) if isinstance(v, tuple) else v
    return {"kind": type(cfg).kind, "version": type(cfg).VERSION, "fields": fields}


def config_from_dict(d: dict[str, Any]) -> ModelConfig:
    from .models.registry import get_model_entry

    if not isinstance(d, dict) or "kind" not in d or "fields" not in d:
        raise ConfigError(f"config {d!r} lacks 'kind'/'fields'; was it written by qsa?")
    cls = get_model_entry(d["kind"]).config_cls
    if d.get("version") != cls.VERSION:
        raise ConfigError(
            f"config for {d['kind']!r} has version {d.get('version')!r}, this qsa reads version "
            f"{cls.VERSION}; re-export the model with this qsa version"
        )
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(d["fields"]) - names
    if unknown:
        raise ConfigError(f"config for {d['kind']!r} has unknown fields {sorted(unknown)}")
    kwargs = {}
    for k, v in d["fields"].items():
        if isinstance(v, list) and "tuple" in str(hints.get(k, "")):
            v = tuple(v)
        kwargs[k] = v
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise ConfigError(f"config for {d['kind']!r} does not fit {cls.__name__}: {e}") from e


def config_with(cfg: ModelConfig, assignments) -> ModelConfig:
    """``cfg`` with fields replaced from ``KEY=VALUE`` strings (``qsa train --set``), each
    value parsed by the field's type: ``window=64``, ``enc_channels=8,8,16``,
    ``causal=false``, ``window=none``. The new config is validated like any other."""
    hints = typing.get_type_hints(type(cfg))
    names = [f.name for f in dataclasses.fields(cfg)]
    changes: dict[str, Any] = {}
    for a in assignments:
        key, sep, text = str(a).partition("=")
        key, text = key.strip(), text.strip()
        if not sep or not key:
            raise ConfigError(f"--set {a!r}: expected KEY=VALUE, e.g. window=64")
        if key not in names:
            raise ConfigError(f"--set {a!r}: {type(cfg).__name__} has no field {key!r}; "
                              f"its fields are {', '.join(names)}")
        changes[key] = _parse_field(key, text, hints[key], a)
    try:
        return dataclasses.replace(cfg, **changes)
    except TypeError as e:
        raise ConfigError(f"--set {list(assignments)}: {e}") from None


def _parse_field(key: str, text: str, hint, given: str):
    hint_s = str(hint)
    optional = "None" in hint_s
    if optional and text.lower() in ("none", "null", ""):
        return None
    try:
        if "tuple" in hint_s:
            return tuple(int(t) for t in text.split(",") if t.strip())
        if "bool" in hint_s:
            low = text.lower()
            if low not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(text)
            return low in ("true", "1", "yes")
        if "int" in hint_s:
            return int(text)
        if "float" in hint_s:
            return float(text)
    except ValueError:
        raise ConfigError(f"--set {given!r}: {text!r} is not a valid {hint_s} for {key!r}; "
                          "e.g. window=64, enc_channels=8,8,16, causal=false, window=none"
                          ) from None
    return text
