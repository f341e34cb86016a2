"""torchao-shaped quantisation API: ``quantize_(model, Int8Config(...), filter_fn=...)``.

Swaps quaternion layers, in place, for ``Int8QuaternionLayer`` modules that run straight from
the packed int8 components (one scale per output quaternion unit). This is the reference int8
path every exported runtime is compared with.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Literal

import torch
from torch import nn

from qsa.errors import ConfigError
from qsa.layers.quaternion import (
    _drop_caches,
    _QuaternionLayer,
    inference_cached,
    is_quaternion_layer,
)

from .packing import QMAX, PackedQuaternionWeight, expand_packed, pack_weight, symmetric_scale


class AOBaseConfig:
    """Base of quantisation configs (the shape of torchao's ``AOBaseConfig``)."""


@dataclasses.dataclass(frozen=True)
class Int8Config(AOBaseConfig):
    """int8 symmetric weights, scale per output quaternion unit shared by its 4 components.

    activation: ``None`` keeps fp32 activations (weight-only int8); ``"dynamic"`` also
    quantises each input to int8 per tensor at run time (symmetric), integer products
    accumulated exactly, as an int8 x int8 kernel would.
    path: ``"packed"`` (four-component matmul + recombination) or ``"dense"`` (expanded),
    the initial path of the layer (``qsa.layers.set_quaternion_path`` switches it later).
    """

    activation: Literal["dynamic"] | None = None
    path: Literal["packed", "dense"] = "packed"
    version: int = 1

    def __post_init__(self):
        if self.activation not in (None, "dynamic"):
            raise ConfigError(f"activation={self.activation!r}; expected None or 'dynamic'")
        if self.path not in ("packed", "dense"):
            raise ConfigError(f"path={self.path!r}; expected 'packed' or 'dense'")


class Int8QuaternionLayer(nn.Module):
    """A quaternion layer running from packed int8 components (4, *component_shape)."""

    def __init__(self, layer: _QuaternionLayer, packed: PackedQuaternionWeight, config: Int8Config):
        super().__init__()
        # keep the geometry (stride, padding, ...) of the float layer, without its fp32 weight
        geometry = layer
        del geometry.weight
        geometry.register_buffer("weight", torch.empty(0), persistent=False)
        geometry.path = config.path  # from here on set_quaternion_path() switches it
        self.layer = geometry
        self.config = config
        self.register_buffer("qweight", packed.qweight.contiguous())  # int8 (4, ...)
        self.register_buffer("scale", packed.scale.contiguous())  # fp32 (n_out,)
        self.unit_axis = packed.unit_axis

    def __getattr__(self, name: str):
        # geometry (in_channels, kernel_size, groups, ...) reads through to the float layer
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name in ("layer", "_modules", "_parameters", "_buffers"):
                raise
            return getattr(self._modules["layer"], name)

    @property
    def packed(self) -> PackedQuaternionWeight:
        return PackedQuaternionWeight(self.qweight, self.scale, self.unit_axis)

    @property
    def bias(self):
        return self.layer.bias

    def channel_scale(self) -> torch.Tensor:
        """One scale per real output channel; outputs are [r|i|j|k] blocks of n_out units."""
        return self.scale.repeat(4)

    def expanded_int8(self):
        """Expanded dense int8 weight + per-channel scales (what a dense int8 kernel holds)."""
        return expand_packed(self.layer, self.packed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.qweight  # int8 values, exact in fp32 (converted once while autograd is off)
        w = inference_cached(self, "_qweight_cache", q, lambda: q.to(x.dtype), tag=x.dtype)
        out_scale = inference_cached(self, "_scale_cache", self.scale, self.channel_scale)
        if self.config.activation == "dynamic":
            s_x = symmetric_scale(x.detach().abs().amax())
            x = torch.clamp(torch.round(x / s_x), -QMAX, QMAX)
            out_scale = out_scale * s_x
        return self.layer.forward_with(x, w, path=self.layer.path, out_scale=out_scale)

    def __getstate__(self):  # pickling / deepcopy leave the inference cache behind
        return _drop_caches(super().__getstate__())

    def extra_repr(self) -> str:
        return f"int8 packed {tuple(self.qweight.shape)}, activation={self.config.activation}"


def _int8_transform(module: _QuaternionLayer, config: Int8Config) -> nn.Module:
    return Int8QuaternionLayer(module, pack_weight(module), config)


_HANDLERS: dict[type, Callable[[nn.Module, AOBaseConfig], nn.Module]] = {
    Int8Config: _int8_transform,
}


def register_quantize_module_handler(config_type: type):
    """Decorator registering ``fn(module, config) -> module`` for a config type."""

    def deco(fn):
        _HANDLERS[config_type] = fn
        return fn

    return deco


def _default_filter(module: nn.Module, fqn: str) -> bool:
    return is_quaternion_layer(module)


def quantize_(
    model: nn.Module,
    config: AOBaseConfig,
    filter_fn: Callable[[nn.Module, str], bool] | None = None,
) -> nn.Module:
    """Quantise ``model`` in place: each module for which ``filter_fn(module, fqn)`` holds
    (default: every quaternion layer) is replaced by its quantised form."""
    handler = _HANDLERS.get(type(config))
    if handler is None:
        raise ConfigError(
            f"no quantisation handler for {type(config).__name__}; known: "
            f"{[c.__name__ for c in _HANDLERS]}"
        )
    filter_fn = filter_fn or _default_filter

    def visit(parent: nn.Module, prefix: str):
        for name, child in list(parent.named_children()):
            fqn = f"{prefix}{name}"
            if is_quaternion_layer(child) and filter_fn(child, fqn):
                setattr(parent, name, handler(child, config))
            elif not isinstance(child, Int8QuaternionLayer):
                visit(child, fqn + ".")

    if is_quaternion_layer(model):
        raise ConfigError(
            "quantize_ works on a model that contains quaternion layers; "
            "wrap a single layer in nn.Sequential"
        )
    visit(model, "")
    return model


def int8_layers(model: nn.Module) -> dict[str, Int8QuaternionLayer]:
    return {n: m for n, m in model.named_modules() if isinstance(m, Int8QuaternionLayer)}
