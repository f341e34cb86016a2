"""Packed int8 quaternion weights.

A quaternion layer's weight is four component tensors (r, i, j, k), each (n_out, n_in, *k).
Packing quantises them to int8 with a symmetric scale *per output quaternion unit shared by
the four components*:

    s[o] = max_{a, in, k} |W_a[o, in, k]| / 127,   q_a = clamp(round(W_a / s[o]), -127, 127)

The expanded dense weight's output channels (c, o) for c in r,i,j,k hold exactly the values
+-W_a[o, ...] for all a, so their per-channel absmax is the same max: per-channel int8
quantisation of the expanded fp32 weight gives, bit for bit, the expansion of the packed int8
components (rounding is sign-symmetric). The packed form stores 1/4 of the int8 weights
and one scale per output unit (not per real channel).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from qsa.layers.quaternion import _QuaternionLayer, is_quaternion_layer

QMAX = 127


def unit_axis(layer: _QuaternionLayer) -> int:
    """Axis of the output unit in a component tensor (0, or 1 for transposed convs)."""
    return 1 if layer._transposed else 0


def symmetric_scale(amax: torch.Tensor) -> torch.Tensor:
    """Symmetric int8 scale from an absmax; zero rows get scale 1 (their weights are 0)."""
    amax = amax.to(torch.float32)
    return torch.where(amax > 0, amax / QMAX, torch.ones_like(amax))


def quantize_symmetric(w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """round(w / scale) clamped to [-127, 127] as int8 (scale broadcast against w)."""
    return torch.clamp(torch.round(w.to(torch.float32) / scale), -QMAX, QMAX).to(torch.int8)


def quantize_per_channel(w: torch.Tensor, axis: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel symmetric int8 quantisation of a real weight along ``axis``."""
    dims = [d for d in range(w.ndim) if d != axis]
    scale = symmetric_scale(w.abs().amax(dim=dims))
    shape = [1] * w.ndim
    shape[axis] = -1
    return quantize_symmetric(w, scale.view(shape)), scale


@dataclasses.dataclass
class PackedQuaternionWeight:
    """int8 components (4, *component_shape) and one fp32 scale per output quaternion unit."""

    qweight: torch.Tensor  # int8 (4, *component_shape)
    scale: torch.Tensor  # float32 (n_out,)
    unit_axis: int  # axis of the output unit inside a component tensor

    def scale_view(self) -> torch.Tensor:
        """Scale shaped to broadcast against the (4, *component_shape) tensor."""
        shape = [1] * self.qweight.ndim
        shape[1 + self.unit_axis] = -1
        return self.scale.view(shape)

    def dequantize(self) -> torch.Tensor:
        return self.qweight.to(torch.float32) * self.scale_view()


def pack_weight(
    layer: _QuaternionLayer, weight: torch.Tensor | None = None
) -> PackedQuaternionWeight:
    """Quantise one quaternion layer's components with per-output-unit shared scales."""
    w = (layer.weight if weight is None else weight).detach().to(torch.float32)
    ax = 1 + unit_axis(layer)  # axis of the output unit in (4, *component_shape)
    dims = [d for d in range(w.ndim) if d != ax]
    scale = symmetric_scale(w.abs().amax(dim=dims))  # (n_out,) over all four components
    shape = [1] * w.ndim
    shape[ax] = -1
    return PackedQuaternionWeight(quantize_symmetric(w, scale.view(shape)), scale, ax - 1)


def expand_packed(layer: _QuaternionLayer, packed: PackedQuaternionWeight):
    """Expanded int8 dense weight and its per-real-output-channel scale (4 n_out,)."""
    q = packed.qweight.to(torch.float32)  # exact: int8 values in fp32
    dense = layer.dense_weight(q).round().to(torch.int8)
    if layer.depthwise:  # interleaved channels g*4 + c
        return dense, packed.scale.repeat_interleave(4)
    return dense, packed.scale.repeat(4)  # [r|i|j|k] blocks of n_out channels


def pack_quaternion_weights(model: nn.Module) -> dict[str, PackedQuaternionWeight]:
    """Packed int8 weights of every quaternion layer in ``model``, keyed by module name."""
    return {name: pack_weight(m) for name, m in model.named_modules() if is_quaternion_layer(m)}


def unpack_quaternion_weights(model: nn.Module, packed: dict[str, PackedQuaternionWeight]) -> None:
    """Write the dequantised components of ``packed`` back into ``model``'s fp32 layers."""
    modules = dict(model.named_modules())
    for name, p in packed.items():
        m = modules.get(name)
        if m is None or not is_quaternion_layer(m):
            raise KeyError(f"{name!r} is not a quaternion layer of this model")
        if tuple(p.qweight.shape) != tuple(m.weight.shape):
            raise ValueError(
                f"{name}: packed weight {tuple(p.qweight.shape)} does not fit the layer's "
                f"{tuple(m.weight.shape)}"
            )
        with torch.no_grad():
            m.weight.copy_(p.dequantize())


unpack = unpack_quaternion_weights
