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
