"""Export-time rewrite of quaternion layers into a form converters quantise fully to int8.

The layers in ``qsa.layers`` compute W (x) x either from the expanded 4x4 block matrix (dense:
4x the weights in the artifact) or from four component products recombined with 16 signed
adds (packed: the adds/subs and sign flips are what the TFLite converter left in float).
``prepare_for_export`` swaps every quaternion layer for an equivalent module that moves the
signs to the *input* side, where they act on activations only:

    x (B, 4, n_in)                       the four input components [r|i|j|k]
    mix:   X[c, a] = s(c, a) x[b(c, a)]  a fixed +-1 matmul (16 x 4, exact in int8:
                                         every weight is +-1, i.e. +-127 at scale 1/127)
    X      (4B, 4 n_in)                  the 4 output components c stacked on the batch axis,
                                         the 4 weight components a concatenated on features
    y = X @ [W_r | W_i | W_j | W_k]^T    ONE matmul/conv against the components stored once,
                                         (n_out, 4 n_in): exactly the packed parameter count
    y      (B, 4 n_out)                  [r|i|j|k] output blocks, + bias

    since y_c = sum_a W_a (s(c, a) x_b(c, a)) is the Hamilton product row c.

Both ops are plain linear/conv ops that every PT2E quantizer annotates; per-output-channel
weight quantisation of the single matmul gives one scale per output quaternion unit shared by
its four components: bit for bit the packing of ``qsa.quantize.pack_weight``. The MAC count is
the dense count plus 64 per input unit and row (the +-1 mixing).

Depthwise convs (one quaternion kernel per quaternion channel) mix the same way, run one
depthwise conv with the four components on 4n channels and add the four partial products
(one tensor, one quantisation domain: the adds stay in int8).
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from qsa.layers.attention import QuaternionSelfAttention
from qsa.layers.hamilton import RECOMBINE
from qsa.layers.quaternion import (
    QuaternionConv1d,
    QuaternionConv2d,
    QuaternionConvTranspose1d,
    QuaternionConvTranspose2d,
    QuaternionLinear,
    _QuaternionLayer,
    is_quaternion_layer,
)
from qsa.models.qcgan import QuaternionUpsample
from qsa.models.qtransformer import QuaternionLayerNorm

from .errors import ExportError


def mixing_matrix(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(16, 4) signed selection M[(c, a), b] = s with W_a (x) x_b -> s e_c (Hamilton table)."""
    m = torch.zeros(16, 4, dtype=dtype)
    for c in range(4):
        for a, b, s in RECOMBINE[c]:
            m[c * 4 + a, b] = float(s)
    return m


def concat_components(weight: torch.Tensor, transposed: bool = False) -> torch.Tensor:
    """Components (4, n_out, n_in, *k) -> (n_out, 4 n_in, *k) with feature index (a, i); for
    transposed convs (4, n_in, n_out, *k) -> (4 n_in, n_out, *k)."""
    if transposed:
        return weight.reshape(weight.shape[0] * weight.shape[1], *weight.shape[2:])
    w = weight.transpose(0, 1)  # (n_out, 4, n_in, *k)
    return w.reshape(w.shape[0], 4 * w.shape[2], *w.shape[3:])  # (n_out, 4 n_in, *k)


MIX_MODES = ("conv", "matmul")


class _Mix(nn.Module):
    """x (B, 4 n, *S) -> (4B, 4 n, *S): the signed component selection as ONE real linear op.

    ``mode="conv"``: a 1x1 conv2d over (B, 4, n, prod S), a standard conv with constant +-1
    weights (quantised exactly) and no adds, subs or negations (ExecuTorch/XNNPACK, ONNX).
    ``mode="matmul"``: the same (16, 4) matrix as a batched matmul over (B, 4, n prod S); a
    channels-last converter (LiteRT/TFLite-Micro) wraps a conv in transposes, a matmul on the
    component axis needs none.
    """

    def __init__(self, mode: str = "conv"):
        super().__init__()
        if mode not in MIX_MODES:
            raise ExportError(f"mix={mode!r}; expected one of {MIX_MODES}")
        self.mode = mode
        self.register_buffer("weight", mixing_matrix().reshape(16, 4, 1, 1))

    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        b = x.shape[0]
        sp = x.shape[2:]
        if self.mode == "matmul":
            # (16, 4) @ (B, 4, n S): no layout change at all, so a channels-last converter
            # adds no transposes (TFLite: RESHAPE, BATCH_MATMUL, RESHAPE)
            xm = torch.matmul(self.weight.reshape(16, 4), x.reshape(b, 4, -1))
        else:
            x4 = x.reshape(b, 4, n, -1)  # (B, 4 comp b, n, S)
            xm = F.conv2d(x4, self.weight)  # (B, 16 = (c, a), n, S)
        return xm.reshape(b * 4, 4 * n, *sp)  # (4B: (B, c), 4n: (a, i), *S)


class ExportQuaternionLayer(nn.Module):
    """A quaternion layer in the export form (see module docstring); same numbers as the
    source layer, components stored once as ``weight`` (n_out, 4 n_in, *k)."""

    def __init__(
        self, layer: _QuaternionLayer, weight: torch.Tensor | None = None, mix: str = "conv"
    ):
        super().__init__()
        w = (layer.weight if weight is None else weight).detach().to(torch.float32)
        self.kind = type(layer).__name__
        self.n_in, self.n_out = layer.n_in, layer.n_out
        self.in_channels, self.out_channels = layer.in_channels, layer.out_channels
        self.depthwise = layer.depthwise
        self.transposed = layer._transposed
        self.spatial = layer._spatial
        for name in ("stride", "padding", "dilation", "output_padding"):
            if hasattr(layer, name):
                setattr(self, name, getattr(layer, name))
        self.mix = _Mix(mix)
        # depthwise: the four partial products are summed by a 1x1 conv with weights 1
        self.register_buffer("sum_weight", torch.ones(1, 4, 1, 1))
        if self.depthwise:
            # (4, n, 1, *k) -> (4n, 1, *k), channel a * n + o holds W_a[o]
            self.weight = nn.Parameter(w.reshape(4 * self.n_in, 1, *w.shape[3:]).clone())
        else:
            self.weight = nn.Parameter(concat_components(w, self.transposed).clone())
        if self.transposed:
            self._polyphase_setup()
        b = layer.bias
        self.bias = None if b is None else nn.Parameter(b.detach().to(torch.float32).clone())

    def _op(self, x: torch.Tensor, groups: int) -> torch.Tensor:
        if self.spatial == 0:
            return F.linear(x, self.weight)
        if self.transposed:
            return self._transposed_as_conv(x)
        f = F.conv1d if self.spatial == 1 else F.conv2d
        return f(x, self.weight, None, self.stride, self.padding, self.dilation, groups)

    # -- transposed convs as one ordinary conv (polyphase) ---------------------------------
    def _polyphase_setup(self) -> None:
        """Rewrite the transposed conv (stride s on at most one axis, dilation 1) as a stride-1
        conv with s x n_out output channels (one per output phase) + interleave + crop.

        LiteRT lowers some conv_transpose2d shapes to RESIZE_BILINEAR with wrong shapes
        (qcgan's (1, 3) stride (1, 2) decoder); an ordinary conv converts and quantises
        everywhere. Output j + p = s q + r takes taps k = r + s t of input q - t.
        """
        w = self.weight.detach()  # (4 n_in, n_out, *k) transposed layout
        ks, st = tuple(w.shape[2:]), tuple(self.stride)
        if any(d != 1 for d in self.dilation):
            raise ExportError(f"{self.kind}: dilated transposed convs have no export form")
        axes = [d for d, v in enumerate(st) if v > 1]
        if len(axes) > 1:
            raise ExportError(f"{self.kind}: stride {st} on more than one axis has no export form")
        self.up_axis = axes[0] if axes else None
        s = st[self.up_axis] if axes else 1
        taps = []  # per axis: conv kernel length after the phase split
        for d, k in enumerate(ks):
            taps.append(-(-k // s) if d == self.up_axis else k)
        conv_w = torch.zeros(s, w.shape[1], w.shape[0], *taps)  # (phase, n_out, 4 n_in, *taps)
        for r in range(s):
            wr = w
            if self.up_axis is not None:
                idx = torch.arange(r, ks[self.up_axis], s)
                wr = w.index_select(2 + self.up_axis, idx)  # taps r + s t, t = 0..
            wr = wr.transpose(0, 1)  # (n_out, 4 n_in, *k_r)
            wr = wr.flip(dims=tuple(range(2, wr.ndim)))  # correlation order
            sl = [r, slice(None), slice(None)] + [
                slice(taps[d] - wr.shape[2 + d], None) for d in range(len(ks))
            ]
            conv_w[tuple(sl)] = wr
        self.weight = nn.Parameter(conv_w.reshape(s * w.shape[1], w.shape[0], *taps))
        self.phases, self.taps, self.kernel_t = s, tuple(taps), ks

    def _transposed_as_conv(self, x: torch.Tensor) -> torch.Tensor:
        s, sp_in = self.phases, x.shape[2:]
        pads, crops = [], []
        for d, (k, p, op) in enumerate(
            zip(self.kernel_t, self.padding, self.output_padding, strict=True)
        ):
            length_in = sp_in[d]
            if d == self.up_axis:
                length_out = (length_in - 1) * s - 2 * p + k + op
                q_hi = (p + length_out - 1) // s + 1  # phase-domain positions needed
                left = self.taps[d] - 1
                right = max(0, q_hi - length_in)
                pads.append((left, right))
                crops.append((p, length_out))
            else:
                length_out = length_in - 1 - 2 * p + k + op
                pads.append((k - 1 - p, k - 1 - p + op))
                crops.append(None)
        flat = [v for pr in reversed(pads) for v in pr]  # F.pad order: last axis first
        if any(v < 0 for v in flat):
            raise ExportError(f"{self.kind}: padding larger than kernel - 1 has no export form")
        f = F.conv1d if self.spatial == 1 else F.conv2d
        z = f(F.pad(x, flat), self.weight)  # (N, s n_out, *Q)
        if self.up_axis is not None:
            n = z.shape[0]
            q = z.shape[2:]
            z = z.reshape(n, s, self.n_out, *q)  # (N, phase, n_out, *Q)
            ax = 3 + self.up_axis  # the phase goes right after the upsampled axis
            order = [0, 2] + [3 + d for d in range(len(q))]
            order.insert(ax, 1)
            z = z.permute(*order)  # (N, n_out, ..., Q_up, phase, ...)
            shape = [n, self.n_out] + [v * s if d == self.up_axis else v for d, v in enumerate(q)]
            z = z.reshape(*shape)  # (N, n_out, ..., Q_up * s, ...): interleaved phases
            start, length = crops[self.up_axis]
            z = z.narrow(2 + self.up_axis, start, length)
        return z

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.spatial == 0:
            lead = x.shape[:-1]
            x2 = x.reshape(-1, self.in_channels, 1)  # (M, 4 n_in, 1)
            xm = self.mix(x2, self.n_in).reshape(-1, 4 * self.n_in)  # (4M, 4 n_in)
            y = self._op(xm, 1)  # (4M, n_out)
            if self.bias is not None and y.shape[0] == 4:
                # one row (a streaming step): rows are the components c, so the bias adds in
                # place, (4, n_out) + (4, n_out), without a reshape to (1, 4 n_out) first
                y = y + self.bias.view(4, self.n_out)
            else:
                y = y.reshape(-1, self.out_channels)  # (M, 4 n_out): [r|i|j|k] blocks
                if self.bias is not None:
                    y = y + self.bias
            return y.reshape(*lead, self.out_channels)
        b = x.shape[0]
        xm = self.mix(x, self.n_in)  # (4B, 4 n_in, *S)
        if self.depthwise:
            p = self._op(xm, 4 * self.n_in)  # (4B, 4n: (a, o), *S')
            sp = p.shape[2:]
            p = p.reshape(4 * b, 4, self.n_in, -1)  # (4B, a, n, prod S')
            if self.mix.mode == "matmul":
                # channels-last converters: a sum over a, on the (a, o) channels the
                # depthwise conv writes last (TFLite: RESHAPE + SUM, no transposes)
                y = p.sum(dim=1)  # (4B, n, prod S')
            else:
                y = F.conv2d(p, self.sum_weight)  # (4B, 1, n, prod S'): sum over a, exact +1s
            y = y.reshape(4 * b, self.n_in, *sp)  # (4B, n, *S')
        else:
            y = self._op(xm, 1)  # (4B, n_out, *S')
            sp = y.shape[2:]
        y = y.reshape(b, self.out_channels, *sp)  # (B, 4 n_out: (c, o), *S')
        if self.bias is not None:
            y = y + self.bias.view(1, -1, *([1] * len(sp)))
        return y

    def extra_repr(self) -> str:
        return (
            f"{self.kind} {self.in_channels}->{self.out_channels}, components once "
            f"{tuple(self.weight.shape)}{' depthwise' if self.depthwise else ''}"
        )


# the odd phase's 2-tap conv reads one bin past the end (only dropped outputs read it):
# "concat" appends a copy of bin 0 (ExecuTorch/ONNX: XNNPACK delegates a concat but leaves a
# quantised pad outside), "same" lets the conv pad it (torch padding="same": 0 left, 1 right,
# which is TFLite's SAME padding for a 2-tap kernel, so the converter adds no op at all)
UPSAMPLE_FILLERS = ("concat", "same")


class ExportQuaternionUpsample(nn.Module):
    """``QuaternionUpsample`` (qsa.models.qcgan: frequency F -> 2F - 1 as an even-bin 1-tap
    and an odd-bin 2-tap quaternion conv, interleaved) as ONE mixing and ONE conv: both phases
    are output channels of a 2-tap conv (the even phase's second tap is zero), their biases
    one add, and the interleave a reshape. The same numbers (fp32 rounding aside); the
    components are still stored once (plus the even phase's zero taps, n_out x 4 n_in bytes
    in int8). TFLite: one mixing, one conv, one bias add, one interleave and one filler
    concat per stage, where the two-layer form has two convs with their transposes, reshapes
    and bias adds, and a concat, two reshapes and a quantize to interleave (qcgan-35k: 8 ops
    fewer per stage, 6 stages)."""

    def __init__(self, up: nn.Module, mix: str = "conv", filler: str = "concat"):
        super().__init__()
        if filler not in UPSAMPLE_FILLERS:
            raise ExportError(f"filler={filler!r}; expected one of {UPSAMPLE_FILLERS}")
        self.filler = filler
        (even, we), (odd, wo) = _layer_weight(up.even), _layer_weight(up.odd)
        for layer, k in ((even, (1, 1)), (odd, (1, 2))):
            if (not isinstance(layer, QuaternionConv2d) or layer.depthwise
                    or tuple(layer.kernel_size) != k or tuple(layer.stride) != (1, 1)
                    or tuple(layer.padding) != (0, 0) or tuple(layer.dilation) != (1, 1)):
                raise ExportError(
                    f"ExportQuaternionUpsample expects a (1, 1) even and a (1, 2) odd "
                    f"quaternion conv (stride 1, no padding), got {layer}"
                )
        if (even.n_in, even.n_out) != (odd.n_in, odd.n_out):
            raise ExportError(
                f"ExportQuaternionUpsample: even {even.n_in}->{even.n_out} and odd "
                f"{odd.n_in}->{odd.n_out} quaternion channels differ"
            )
        self.n_in, self.n_out = even.n_in, even.n_out
        self.mix = _Mix(mix)
        ce = concat_components(we.detach().to(torch.float32))  # (n_out, 4 n_in, 1, 1)
        co = concat_components(wo.detach().to(torch.float32))  # (n_out, 4 n_in, 1, 2)
        w = torch.zeros(2, self.n_out, 4 * self.n_in, 1, 2)  # (phase, o, (a, i), 1, tap)
        w[0, ..., 0] = ce[..., 0]
        w[1] = co
        self.weight = nn.Parameter(w.reshape(2 * self.n_out, 4 * self.n_in, 1, 2))
        zero = torch.zeros(4 * self.n_out)
        be = zero if even.bias is None else even.bias.detach().to(torch.float32)
        bo = zero if odd.bias is None else odd.bias.detach().to(torch.float32)
        # (c, phase, o): the component c rides on the batch axis after the mixing
        b = torch.stack([be.view(4, self.n_out), bo.view(4, self.n_out)], dim=1)
        self.bias = nn.Parameter(b.reshape(4, 2 * self.n_out, 1, 1).clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, 4 n_in, T, F) -> (B, 4 n_out, T, 2F - 1)."""
        b, _, t, f = x.shape
        if self.filler == "same":  # the filler bin is the conv's own zero padding
            z = F.conv2d(self.mix(x, self.n_in), self.weight, padding="same")
        else:
            x = torch.cat([x, x[..., :1]], dim=-1)
            z = F.conv2d(self.mix(x, self.n_in), self.weight)  # (4B, 2 n_out: (phase, o), T, F)
        if b == 1:  # the streaming step: rows are the components, the bias adds in place
            z = z + self.bias
        else:
            z = (z.reshape(b, 4, 2 * self.n_out, t, f) + self.bias).reshape(z.shape)
        # the interleave in channels-last order, where it is a reshape: (F, (p, o)) is
        # (2F, o) bin-major. A channels-last converter's transpose after the conv cancels
        # the first permute, so one transpose back remains (TFLite: 2 ops fewer per stage)
        z = z.permute(0, 2, 3, 1).reshape(4 * b, t, 2 * f, self.n_out)  # (4B, T, 2F, o)
        z = z[:, :, : 2 * f - 1].permute(0, 3, 1, 2)  # bins 0, 1, .., 2F - 2: (4B, o, T, F')
        return z.reshape(b, 4 * self.n_out, t, 2 * f - 1)

    def extra_repr(self) -> str:
        return (
            f"QuaternionUpsample {4 * self.n_in}->{4 * self.n_out}, both phases one conv "
            f"{tuple(self.weight.shape)}"
        )


NORM_REDUCES = ("mean", "linear")


class ExportQuaternionLayerNorm(nn.Module):
    """``QuaternionLayerNorm`` with one mean over (component, unit) instead of a sum over the
    components then a mean over the units: sum_c mean_i q^2 = 4 mean_(c,i) q^2, so
    rsqrt(4 p + eps) = rsqrt(p + eps / 4) / 2 and the 1/2 goes into the gain. The same numbers.

    ``reduce="mean"``: the means are mean ops (TFLite: one MEAN per mean, one op fewer per
    norm than the source). ``reduce="linear"``: each mean is a linear op against a constant
    1/n row (exact in int8: one weight, its own scale). XNNPACK has no delegate for these
    means, so as mean ops they run on ExecuTorch's portable kernels and cut the graph into one
    delegate call per norm (qcgan-35k int8: 34 delegate calls, 10 with linear means)."""

    def __init__(self, norm: nn.Module, reduce: str = "mean"):
        super().__init__()
        if reduce not in NORM_REDUCES:
            raise ExportError(f"reduce={reduce!r}; expected one of {NORM_REDUCES}")
        self.n, self.eps, self.reduce = norm.n, norm.eps, reduce
        self.gain = nn.Parameter(0.5 * norm.gain.detach().clone())
        self.apply_gain = True  # False once ``fold_norm_gains`` moved it into the next layer
        if reduce == "linear":
            self.register_buffer("unit_mean", torch.full((1, self.n), 1.0 / self.n))
            self.register_buffer("all_mean", torch.full((1, 4 * self.n), 0.25 / self.n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # one token (a streaming step): (4, n) without lead axes, the shape the quaternion
        # linears around it produce and take, so a converter adds no reshapes around the norm;
        # tokens already (..., 4, n) (qsa.export.channels_last) stay as they are
        if x.dim() >= 2 and tuple(x.shape[-2:]) == (4, self.n):
            lead = x.shape[:-2]
        else:
            lead = x.shape[:-1] if x.numel() != 4 * self.n else ()
        q = x.reshape(*lead, 4, self.n)  # (..., 4, n)
        if self.reduce == "linear":
            q = q - F.linear(q, self.unit_mean)  # (..., 4, 1) means per component
            p = F.linear((q * q).reshape(*lead, 4 * self.n), self.all_mean).unsqueeze(-1)
        else:
            q = q - q.mean(dim=-1, keepdim=True)
            p = (q * q).mean(dim=(-2, -1), keepdim=True)  # (..., 1, 1)
        q = q * torch.rsqrt(p + self.eps / 4)
        if self.apply_gain:
            q = q * self.gain
        return q.reshape(x.shape)


class ExportSharedScoreAttention(QuaternionSelfAttention):
    """The streaming step of shared-score quaternion attention (causal, bounded window) in a
    form with no per-head layout moves, for channels-last converters (LiteRT/TFLite-Micro).

    The source step splits q and the cached keys and values into heads, (T, 4, H, d) ->
    (H, T, 4 d), with a reshape and a transpose each, and merges them back. Here every head
    reads the whole token: the scores are (q * S) @ K^T with S (H, E) selecting head h's
    features (and holding the 1/sqrt(4d) scale), so row h is head h's score; the output
    is (P @ V) * M summed over the heads, M (H, E) keeping head h's features from row h.
    The same numbers (the score and value products take H x the MACs: 2 x H x W x E instead
    of 2 x W x E per token); the cache keeps the source layout, so the state is the
    source's. The offline forward and everything else are the source's (the same
    projection modules)."""

    def __init__(self, attn: QuaternionSelfAttention):
        if attn.score != "shared" or not attn.causal or attn.window is None:
            raise ExportError(
                "ExportSharedScoreAttention needs shared-score, causal attention with a "
                f"bounded window, got score={attn.score!r} causal={attn.causal} "
                f"window={attn.window}"
            )
        super().__init__(attn.embed_dim, attn.num_heads, "shared", True, attn.window)
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            setattr(self, name, getattr(attn, name))
        self.mask_value = attn.mask_value
        h, d = attn.num_heads, attn.head_quaternions
        sel = torch.zeros(h, 4, h, d)  # (score head, component, head, unit)
        for i in range(h):
            sel[i, :, i, :] = 1.0
        sel = sel.reshape(h, attn.embed_dim)
        self.register_buffer("head_select", sel)
        self.register_buffer("head_scores", sel / math.sqrt(4 * d))

    def step(self, x: torch.Tensor, state):
        """One token x (B, 1, E) against the cache -> (y (B, 1, E), new state)."""
        k_cache, v_cache, valid = state
        k_all = torch.cat([k_cache, self.k_proj(x)], dim=1)  # (B, W, E)
        v_all = torch.cat([v_cache, self.v_proj(x)], dim=1)
        valid_all = torch.cat([valid, torch.ones_like(x[:, :, 0])], dim=1)  # (B, W)
        mask = ((1.0 - valid_all) * self.mask_value).unsqueeze(1)  # (B, 1, W)
        s = torch.matmul(self.q_proj(x) * self.head_scores, k_all.transpose(1, 2))  # (B, H, W)
        p = torch.softmax(s + mask, dim=-1)  # one softmax per head, shared by 4 components
        o = (torch.matmul(p, v_all) * self.head_select).sum(dim=1, keepdim=True)  # (B, 1, E)
        return self.out_proj(o), (k_all[:, 1:], v_all[:, 1:], valid_all[:, 1:])


class ExportPReLU(nn.Module):
    """PReLU as relu(x) - alpha * relu(-x): the LiteRT converter decomposes aten.prelu *after*
    quantisation (its pieces stay float); written out, each piece is an int8 op."""

    def __init__(self, prelu: nn.PReLU):
        super().__init__()
        self.weight = nn.Parameter(prelu.weight.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = [1] * x.ndim
        if self.weight.numel() > 1:
            shape[1] = -1  # one slope per channel (axis 1), as nn.PReLU
        return F.relu(x) - F.relu(-x) * self.weight.view(shape)


_SUPPORTED = (
    QuaternionLinear,
    QuaternionConv1d,
    QuaternionConv2d,
    QuaternionConvTranspose1d,
    QuaternionConvTranspose2d,
)


def _layer_weight(m: nn.Module) -> tuple[_QuaternionLayer, torch.Tensor]:
    """The float geometry and fp32 components of a quaternion or Int8QuaternionLayer."""
    from qsa.quantize import Int8QuaternionLayer

    if isinstance(m, Int8QuaternionLayer):
        return m.layer, m.packed.dequantize()
    return m, m.weight


def prepare_for_export(
    model: nn.Module,
    inplace: bool = False,
    mix: str = "conv",
    fold_norm: bool = False,
    norm_reduce: str = "mean",
    upsample_filler: str = "concat",
) -> nn.Module:
    """Copy of ``model`` (eval) with every quaternion layer (fp32 or packed int8 reference)
    replaced by ``ExportQuaternionLayer``; the numbers are unchanged (fp32 rounding aside).
    ``mix``: how the signed component selection is written ("conv" or "matmul", see _Mix).
    ``fold_norm``: quaternion layer norms as ``ExportQuaternionLayerNorm`` (their gains moved
    into the linears they feed where a module says so, ``fold_norm_gains``) with the means
    written as ``norm_reduce`` ("mean": mean ops, fewest TFLite ops; "linear": constant
    linear ops, which XNNPACK delegates). QC-GAN's polyphase upsampling stages become
    ``ExportQuaternionUpsample`` (one conv per stage instead of two; ``upsample_filler``: how
    its conv gets the bin past the end, see UPSAMPLE_FILLERS)."""
    if mix not in MIX_MODES:
        raise ExportError(f"mix={mix!r}; expected one of {MIX_MODES}")
    if norm_reduce not in NORM_REDUCES:
        raise ExportError(f"norm_reduce={norm_reduce!r}; expected one of {NORM_REDUCES}")
    if upsample_filler not in UPSAMPLE_FILLERS:
        raise ExportError(
            f"upsample_filler={upsample_filler!r}; expected one of {UPSAMPLE_FILLERS}"
        )
    from qsa.quantize import Int8QuaternionLayer

    if not inplace:
        model = copy.deepcopy(model)

    def visit(parent: nn.Module, prefix: str) -> None:
        for name, child in list(parent.named_children()):
            if is_quaternion_layer(child) or isinstance(child, Int8QuaternionLayer):
                layer, w = _layer_weight(child)
                if not isinstance(layer, _SUPPORTED):
                    raise ExportError(
                        f"{prefix}{name}: {type(layer).__name__} has no export form; "
                        f"supported: {[c.__name__ for c in _SUPPORTED]}"
                    )
                if layer.depthwise and layer._spatial != 1:
                    raise ExportError(
                        f"{prefix}{name}: depthwise {type(layer).__name__} has no export form "
                        "(depthwise is supported for QuaternionConv1d)"
                    )
                setattr(parent, name, ExportQuaternionLayer(layer, w, mix))
            elif isinstance(child, QuaternionUpsample):
                setattr(parent, name, ExportQuaternionUpsample(child, mix, upsample_filler))
            elif isinstance(child, nn.PReLU):
                setattr(parent, name, ExportPReLU(child))
            elif (isinstance(child, QuaternionSelfAttention) and mix == "matmul"
                  and child.score == "shared" and child.causal and child.window is not None):
                visit(child, f"{prefix}{name}.")
                setattr(parent, name, ExportSharedScoreAttention(child))
            elif fold_norm and isinstance(child, QuaternionLayerNorm):
                setattr(parent, name, ExportQuaternionLayerNorm(child, norm_reduce))
            else:
                visit(child, f"{prefix}{name}.")

    if is_quaternion_layer(model):
        raise ExportError("prepare_for_export needs a model containing quaternion layers")
    visit(model, "")
    if fold_norm:
        fold_norm_gains(model)
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()


def fold_norm_gains(model: nn.Module) -> int:
    """Move each folded norm's gain into the quaternion linears it feeds (in place); how many
    norms lost their gain MUL. A module names its norm -> linear pairs in ``norm_feeds``
    (("norm", ("up",)), ...): the norm's output goes only into those linears. The gain is
    one real scalar per quaternion unit, so scaling input unit i of every weight component
    is the same product: W (x) (g_i q_i) = (W g_i) (x) q_i."""
    folded = 0
    for m in model.modules():
        for norm_name, targets in getattr(m, "norm_feeds", ()):
            norm = m.get_submodule(norm_name)
            layers = [m.get_submodule(t) for t in targets]
            if not isinstance(norm, ExportQuaternionLayerNorm) or not norm.apply_gain:
                continue
            if not all(isinstance(q, ExportQuaternionLayer) and q.spatial == 0
                       and q.n_in == norm.n for q in layers):
                continue
            fold_gain(norm, layers)
            folded += 1
    return folded


def fold_gain(norm: ExportQuaternionLayerNorm, layers: list[nn.Module]) -> None:
    """``norm``'s gain moved into ``layers``, the only layers its output feeds (in place):
    their weights' input features (a, i) (axis 1: a linear's or a conv's input channels)
    scaled by the gain of unit i, the norm's gain MUL off."""
    g = norm.gain.detach().repeat(4)  # feature (a, i) -> gain of unit i
    with torch.no_grad():
        for q in layers:
            q.weight.mul_(g.view([1, -1] + [1] * (q.weight.dim() - 2)))
    norm.apply_gain = False


def export_layers(model: nn.Module) -> dict[str, ExportQuaternionLayer]:
    return {n: m for n, m in model.named_modules() if isinstance(m, ExportQuaternionLayer)}
