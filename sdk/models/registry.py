"""Registry of model kinds: name -> (config class, model class, named presets).

Models register themselves with ``register_model``; ``qsa.load(name_or_file)`` and the packed
model file use it to rebuild a model from its saved config.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable

from torch import nn

from ..config import ModelConfig
from ..errors import ConfigError


@dataclasses.dataclass(frozen=True)
class ModelEntry:
    kind: str
    config_cls: type[ModelConfig]
    model_cls: Callable[[ModelConfig], nn.Module]


_REGISTRY: dict[str, ModelEntry] = {}
_PRESETS: dict[str, Callable[[], ModelConfig]] = {}
# Modules that register models when imported (kept lazy: importing qsa stays cheap).
MODEL_MODULES: list[str] = [
    "qsa.models.qtransformer",
    "qsa.models.lm",
    "qsa.models.qcgan",
    "qsa.models.discriminator",
]


def register_model(config_cls: type[ModelConfig], model_cls) -> None:
    if not config_cls.kind:
        raise ConfigError(f"{config_cls.__name__} needs a non-empty class attribute 'kind'")
    _REGISTRY[config_cls.kind] = ModelEntry(config_cls.kind, config_cls, model_cls)


def register_preset(name: str, make_config: Callable[[], ModelConfig]) -> None:
    """A named configuration such as 'qcgan-35k'."""
    _PRESETS[name] = make_config


def _load_all() -> None:
    for m in MODEL_MODULES:
        importlib.import_module(m)


def get_model_entry(kind: str) -> ModelEntry:
    if kind not in _REGISTRY:
        _load_all()
    if kind not in _REGISTRY:
        raise ConfigError(f"unknown model kind {kind!r}; known: {sorted(_REGISTRY)}")
    return _REGISTRY[kind]


def preset_names() -> list[str]:
    _load_all()
    return sorted(_PRESETS)


def preset_config(name: str) -> ModelConfig:
    _load_all()
    if name not in _PRESETS:
        raise ConfigError(f"unknown model {name!r}; choose one of {sorted(_PRESETS)} or a file")
    return _PRESETS[name]()


def build_model(cfg: ModelConfig) -> nn.Module:
    return get_model_entry(type(cfg).kind).model_cls(cfg)
