"""Quaternion linear and convolution layers (Hamilton product), with a dense and a packed path.

A quaternion layer replaces a real layer with 4n_in inputs and 4n_out outputs by n_out x n_in
quaternion weights W = r + i x + j y + k z. Channels (or features) are laid out as four blocks
``[r | i | j | k]`` of n units each (see ``qsa.layers.hamilton``). The output is the sum over
input units of the Hamilton products W (x) x, i.e. the real layer whose weight is the 4x4 block
matrix

    [[ r, -i, -j, -k],
     [ i,  r, -k,  j],
     [ j,  k,  r, -i],
     [ k, -j,  i,  r]]

so it holds 1/4 of the dense layer's weights (bias aside: one bias per real output channel).

Two forward paths give the same numbers:

* ``dense``: build that block matrix and run one matmul / conv.
* ``packed``: stack the four components once (4 n_out x n_in, a view: no expansion), run one
  matmul / conv of the four input components against it (4 x 4 n_out x n_in MACs: exactly the
  dense count), then add/subtract the 16 products by the fixed sign table. This is the form
  that is stored, quantised (qsa.quantize) and exported.

Weights live in one parameter ``weight`` of shape (4, *component_shape), component order
(r, i, j, k); ``layer.r`` ... ``layer.k`` are views of it.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from .hamilton import BLOCK, recombine

Path = Literal["packed", "dense"]
_PATHS = ("packed", "dense")


def _tuple(v: int | tuple[int, ...], n: int, name: str) -> tuple[int, ...]:
    if isinstance(v, int):
        return (v,) * n
    t = tuple(int(x) for x in v)
    if len(t) != n:
        raise ValueError(f"{name}={v!r} needs {n} values for a {n}-d layer")
    return t


def quaternion_init_(weight: torch.Tensor, fan_in: int, fan_out: int, criterion: str = "glorot"):
    """Parcollet et al. (2019) quaternion initialisation, in place on a (4, ...) tensor.

    Each weight quaternion gets a modulus drawn from a chi distribution with 4 degrees of
    freedom scaled by sigma (glorot: 1/sqrt(2(fan_in+fan_out)), he: 1/sqrt(2 fan_in)), a phase
    uniform in [-pi, pi] and a random unit pure-quaternion axis:
    w = |w| (cos theta + u sin theta).
    """
    if criterion == "glorot":
        sigma = 1.0 / math.sqrt(2.0 * (fan_in + fan_out))
    elif criterion == "he":
        sigma = 1.0 / math.sqrt(2.0 * fan_in)
    else:
        raise ValueError(f"criterion={criterion!r}; expected 'glorot' or 'he'")
    shape = weight.shape[1:]
    with torch.no_grad():
        modulus = torch.randn((4, *shape)).pow(2).sum(0).sqrt() * sigma  # chi(4) * sigma
        phase = torch.empty(shape).uniform_(-math.pi, math.pi)
        axis = torch.empty((3, *shape)).uniform_(-1.0, 1.0)
        axis = axis / axis.norm(dim=0, keepdim=True).clamp_min(1e-4)
        weight[0].copy_(modulus * torch.cos(phase))
        weight[1:].copy_(modulus * torch.sin(phase) * axis)
    return weight


_CACHE_SLOTS = ("_dense_cache", "_qweight_cache", "_scale_cache")


def inference_cached(owner: nn.Module, slot: str, src: torch.Tensor, make, tag=None):
    """``make()``, a tensor derived from ``src`` alone, computed once and reused while autograd
    is off (``torch.no_grad`` / ``torch.inference_mode``) and ``src`` is the same tensor,
    unchanged since (same object, storage and version counter: an optimiser step, ``copy_``
    or ``load_state_dict`` makes it stale). With autograd on, under tracing or compilation, or
    for tensors that keep no version counter (made in inference mode), ``make()`` runs every
    call. Kept in ``owner.__dict__[slot]``: not a buffer, never in a state_dict.

    The streaming step of a small model calls each layer on one frame, where rebuilding the
    expanded quaternion weight (16 signed blocks, ~30 small ops a layer) cost more than the
    matmul itself: qcgan-35k's step took 5.3 ms per 8 ms hop on the packed path, 2.5 ms on the
    dense path with this cache (1 CPU thread).
    """
    if torch.is_grad_enabled() or torch.jit.is_tracing() or torch.compiler.is_compiling():
        return make()
    try:
        key = (src.data_ptr(), src._version, tag)
    except (RuntimeError, NotImplementedError):  # fake / functional / inference tensors
        return make()
    hit = owner.__dict__.get(slot)
    if hit is not None and hit[0] is src and hit[1] == key:
        return hit[2]
    with torch.inference_mode(False), torch.no_grad():
        out = make()  # a normal tensor (not an inference one): it keeps a version counter
    owner.__dict__[slot] = (src, key, out)
    return out


def _drop_caches(state: dict) -> dict:
    return {k: v for k, v in state.items() if k not in _CACHE_SLOTS}


class _QuaternionLayer(nn.Module):
    """Shared machinery: components, the two paths, dense-weight construction."""

    _transposed = False
    _spatial = 0

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: tuple[int, ...],
        groups: int,
        bias: bool,
        path: Path,
    ):
        super().__init__()
        for name, v in (("in", in_channels), ("out", out_channels)):
            if v <= 0 or v % 4:
                raise ValueError(
                    f"{type(self).__name__}: {name}_channels={v} must be a positive multiple of "
                    f"4 (four [r|i|j|k] blocks of quaternion units); use {max(4, (v + 3) // 4 * 4)}"
                )
        if path not in _PATHS:
            raise ValueError(f"path={path!r}; expected one of {_PATHS}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.n_in = in_channels // 4
        self.n_out = out_channels // 4
        self.kernel_size = kernel_size
        self.groups = groups
        self.path: Path = path
        if groups not in (1, self.n_in):
            raise ValueError(
                f"groups={groups}: quaternion layers support groups=1 or depthwise "
                f"groups=n_in={self.n_in} (one quaternion kernel per quaternion channel)"
            )
        if groups > 1 and (self.n_out != self.n_in or self._transposed):
            raise ValueError(
                "depthwise quaternion conv needs in_channels == out_channels and is not "
                f"transposed (got {in_channels} -> {out_channels})"
            )
        if self._transposed:
            comp = (self.n_in, self.n_out, *kernel_size)
        else:
            comp = (self.n_out, self.n_in // groups, *kernel_size)
        self.weight = nn.Parameter(torch.empty((4, *comp)))
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        rf = math.prod(kernel_size) if kernel_size else 1
        quaternion_init_(self.weight, fan_in=(self.n_in // groups) * rf, fan_out=self.n_out * rf)

    # -- components ----------------------------------------------------------------------
    @property
    def r(self) -> torch.Tensor:
        return self.weight[0]

    @property
    def i(self) -> torch.Tensor:
        return self.weight[1]

    @property
    def j(self) -> torch.Tensor:
        return self.weight[2]

    @property
    def k(self) -> torch.Tensor:
        return self.weight[3]

    @property
    def depthwise(self) -> bool:
        return self.groups > 1

    def dense_weight_numel(self) -> int:
        """Weights of the real layer this one replaces (4x more than ``weight.numel()``)."""
        return 4 * self.weight.numel()

    # -- the real op, overridden per layer kind ------------------------------------------
    def _op(self, x: torch.Tensor, w: torch.Tensor, groups: int) -> torch.Tensor:
        raise NotImplementedError

    # -- dense path ----------------------------------------------------------------------
    def dense_weight(self, weight: torch.Tensor | None = None) -> torch.Tensor:
        """The expanded 4x4 block weight of the equivalent real layer (for groups=1), or the
        interleaved (4n, 4, *k) grouped weight for depthwise layers."""
        w = self.weight if weight is None else weight
        blocks = [[w[a] if s > 0 else -w[a] for (a, s) in BLOCK[c]] for c in range(4)]
        if self.depthwise:
            # (n, 1, *k) blocks -> (n, 4 out-comp, 4 in-comp, *k) -> (4n, 4, *k), channel g*4+c
            rows = [torch.cat(blocks[c], dim=1) for c in range(4)]  # each (n, 4, *k)
            return torch.stack(rows, dim=1).reshape(4 * self.n_in, 4, *self.kernel_size)
        if self._transposed:  # weight dims (in, out, *k)
            cols = [torch.cat([blocks[c][b] for c in range(4)], dim=1) for b in range(4)]
            return torch.cat(cols, dim=0)
        return torch.cat([torch.cat(blocks[c], dim=1) for c in range(4)], dim=0)

    def __getstate__(self):  # pickling / deepcopy leave the inference cache behind
        return _drop_caches(super().__getstate__())

    def _forward_dense(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        wd = inference_cached(self, "_dense_cache", weight, lambda: self.dense_weight(weight))
        if not self.depthwise:
            return self._op(x, wd, 1)
        b, _, *sp = x.shape
        xi = x.reshape(b, 4, self.n_in, *sp).transpose(1, 2).reshape(b, 4 * self.n_in, *sp)
        y = self._op(xi, wd, self.n_in)  # (B, 4n, *S'), channel g*4+c
        b, _, *sp = y.shape
        return y.reshape(b, self.n_in, 4, *sp).transpose(1, 2).reshape(b, 4 * self.n_in, *sp)

    # -- packed path ---------------------------------------------------------------------
    def stacked_weight(self, weight: torch.Tensor | None = None) -> torch.Tensor:
        """The four components stacked on the output axis (a view where the layout allows)."""
        w = self.weight if weight is None else weight
        if self.depthwise:  # (4, n, 1, *k) -> (n, 4, 1, *k) -> (4n, 1, *k): channel g*4+a
            return w.transpose(0, 1).reshape(4 * self.n_in, 1, *self.kernel_size)
        if self._transposed:  # (4, n_in, n_out, *k) -> (n_in, 4 n_out, *k)
            return w.transpose(0, 1).reshape(self.n_in, 4 * self.n_out, *self.kernel_size)
        return w.reshape(4 * self.n_out, *w.shape[2:])  # (4 n_out, n_in, *k)

    def _forward_packed(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        b, _, *sp = x.shape
        xs = x.reshape(b, 4, self.n_in, *sp).transpose(0, 1).reshape(4 * b, self.n_in, *sp)
        p = self._op(xs, self.stacked_weight(weight), self.groups)  # (4B, 4 n_out, *S')
        sp2 = p.shape[2:]
        if self.depthwise:
            p = p.reshape(4, b, self.n_out, 4, *sp2)  # (in-comp, B, n, w-comp, *S')
            y = recombine(p, in_axis=0, weight_axis=3, out_axis=1)  # (B, 4, n, *S')
        else:
            p = p.reshape(4, b, 4, self.n_out, *sp2)  # (in-comp, B, w-comp, n_out, *S')
            y = recombine(p, in_axis=0, weight_axis=2, out_axis=1)  # (B, 4, n_out, *S')
        return y.reshape(b, self.out_channels, *sp2)

    # -- forward -------------------------------------------------------------------------
    def _check_input(self, x: torch.Tensor) -> None:
        want = 1 + self._spatial + 1
        if x.ndim != want or x.shape[1] != self.in_channels:
            raise ValueError(
                f"{type(self).__name__} expected input (B, {self.in_channels}"
                f"{', L' * min(1, self._spatial)}{', W' * max(0, self._spatial - 1)}) with "
                f"{want} dims, got {tuple(x.shape)}"
            )

    def forward_with(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        path: Path | None = None,
        out_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Forward with explicit component weights; ``out_scale`` (out_channels,) multiplies
        the output channels before the bias (the int8 layers pass their weight scales)."""
        self._check_input(x)
        path = self.path if path is None else path
        y = self._forward_packed(x, weight) if path == "packed" else self._forward_dense(x, weight)
        view = (1, -1, *([1] * (y.ndim - 2)))
        if out_scale is not None:
            y = y * out_scale.view(view)
        if self.bias is not None:
            y = y + self.bias.view(view)
        return y

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_with(x, self.weight)

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}"
        if self.kernel_size:
            s += f", kernel_size={self.kernel_size}"
        if self.groups > 1:
            s += f", groups={self.groups} (depthwise)"
        return s + f", bias={self.bias is not None}, path={self.path}"


class QuaternionLinear(_QuaternionLayer):
    """y = W (x) x + b over the last axis; in/out features are multiples of 4 ([r|i|j|k])."""

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, path: Path = "packed"
    ):
        super().__init__(in_features, out_features, (), 1, bias, path)

    @property
    def in_features(self) -> int:
        return self.in_channels

    @property
    def out_features(self) -> int:
        return self.out_channels

    def _op(self, x, w, groups):
        return F.linear(x, w)

    def _check_input(self, x):
        if x.ndim < 1 or x.shape[-1] != self.in_channels:
            raise ValueError(
                f"QuaternionLinear expected (..., {self.in_channels}) input, got {tuple(x.shape)}"
            )

    def forward_with(self, x, weight, path=None, out_scale=None):
        self._check_input(x)
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_channels)  # (M, 4 n_in)
        path = self.path if path is None else path
        y = (
            self._forward_packed(x2, weight)
            if path == "packed"
            else self._forward_dense(x2, weight)
        )
        if out_scale is not None:
            y = y * out_scale
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_channels)  # (..., 4 n_out)


class _QuaternionConvNd(_QuaternionLayer):
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        path: Path = "packed",
        output_padding=0,
    ):
        n = self._spatial
        if isinstance(padding, str):
            if padding not in ("same", "valid") or self._transposed:
                raise ValueError(f"padding={padding!r}; use an int, 'same' or 'valid'")
            self.padding = padding
        else:
            self.padding = _tuple(padding, n, "padding")
        self.stride = _tuple(stride, n, "stride")
        self.dilation = _tuple(dilation, n, "dilation")
        self.output_padding = _tuple(output_padding, n, "output_padding")
        super().__init__(
            in_channels, out_channels, _tuple(kernel_size, n, "kernel_size"), groups, bias, path
        )


class QuaternionConv1d(_QuaternionConvNd):
    """Quaternion Conv1d on (B, 4n, L); ``groups=n`` gives the depthwise form."""

    _spatial = 1

    def _op(self, x, w, groups):
        return F.conv1d(x, w, None, self.stride, self.padding, self.dilation, groups)


class QuaternionConv2d(_QuaternionConvNd):
    """Quaternion Conv2d on (B, 4n, H, W); ``groups=n`` gives the depthwise form."""

    _spatial = 2

    def _op(self, x, w, groups):
        return F.conv2d(x, w, None, self.stride, self.padding, self.dilation, groups)


class QuaternionConvTranspose1d(_QuaternionConvNd):
    """Quaternion ConvTranspose1d on (B, 4n, L) (groups=1)."""

    _spatial = 1
    _transposed = True

    def _op(self, x, w, groups):
        return F.conv_transpose1d(
            x, w, None, self.stride, self.padding, self.output_padding, groups, self.dilation
        )


class QuaternionConvTranspose2d(_QuaternionConvNd):
    """Quaternion ConvTranspose2d on (B, 4n, H, W) (groups=1)."""

    _spatial = 2
    _transposed = True

    def _op(self, x, w, groups):
        return F.conv_transpose2d(
            x, w, None, self.stride, self.padding, self.output_padding, groups, self.dilation
        )


QUATERNION_LAYERS = (
    QuaternionLinear,
    QuaternionConv1d,
    QuaternionConv2d,
    QuaternionConvTranspose1d,
    QuaternionConvTranspose2d,
)


def is_quaternion_layer(m: nn.Module) -> bool:
    return isinstance(m, _QuaternionLayer)


def set_quaternion_path(model: nn.Module, path: Path) -> int:
    """Set every quaternion layer in ``model`` to ``path``; returns how many were set.

    Both paths compute the same function. Training takes ``dense``: one matmul / conv against
    the expanded weight (built from the components each forward, so gradients still reach
    only the four components) instead of the packed path's 16 partial products and their
    recombination, about 3-4x faster per step on a CPU (qcgan-0.89m fwd+bwd of 8 x 1.5 s:
    1.2 s dense vs 5.3 s packed, 1 thread). Export keeps ``packed``. The eager streaming
    runners (``qsa.export.runtimes.TorchRuntime``, the live app's ``TorchStepProcessor``)
    take ``dense`` too: with autograd off the expanded weight is built once and cached
    (``inference_cached``), 2x faster per step for qcgan-35k. int8 layers (qsa.quantize)
    follow the path of the float layer they wrap.
    """
    if path not in _PATHS:
        raise ValueError(f"path={path!r}; expected one of {_PATHS}")
    n = 0
    for m in model.modules():
        if isinstance(m, _QuaternionLayer):
            m.path = path
            n += 1
    return n


def dense_inference_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with every quaternion layer (int8 ones included) on the ``dense``
    path, for eager inference (streaming steps); ``model`` itself is left as it is. Models
    without quaternion layers come back as they are, uncopied."""
    import copy

    if not any(isinstance(m, _QuaternionLayer) for m in model.modules()):
        return model
    model = copy.deepcopy(model)
    set_quaternion_path(model, "dense")
    return model
