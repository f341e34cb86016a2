"""QC-GAN's network step in a bin-major layout for channels-last converters (the TFLite-Micro
exporter; qcgan-35k int8 67,584 B, 286 ops, arena 94.6 KB, against 74,272 B, 351 ops for the
source layout with the same compactor of 12-05 evening).

The source step keeps feature maps NCHW, (1, 4 n, 1, F): the [r|i|j|k] blocks on the
channel axis. A channels-last converter wraps every conv in NCHW <-> NHWC transposes, and the
component-batched layout a quaternion layer's mixing produces ((4, ...) with the output
component on the batch axis) needs a transpose back to the blocks after every conv; the
frequency Conformer wants tokens (bins) first, so it transposes in and out of each block too.

Here every feature map is (1, F, 4, n): bin, component, unit (row-major, so (F, 4 n) is the
[r|i|j|k] blocks of each bin). A quaternion layer on it is

    mix:   (16, 4) @ (1, F, 4, n) -> (1, F, 16, n) = (bin, output component c, weight
                                   component a, unit): exactly the NHWC input (1, F, 4, 4 n)
                                   of ONE conv along the bins (width 1 over the 4
                                   components), or the rows (4 F, 4 n) of one linear
    conv:  (1, F, 4, 4 n) -> (1, F', 4, n_out): the layout again, no moves
    bias:  + (4, n_out), PReLU slopes (4, n_out): broadcasts, no moves

so a conv stage is mix, reshape, conv, bias add, PReLU (the NCHW form: 9 ops), the frequency
Conformer runs on its tokens as they are, and its linears are mix, linear, bias add. The
parameters are the export form's (``qsa.export.rewrite``), re-viewed (the conv kernels' (1, k)
becomes (k, 1)) and, where a norm feeds nothing else, with the norm's gain folded in; the
numbers are the source's up to fp32 rounding; inputs, outputs and the state are the source
step's. The time Conformer runs its own step (the band projections take and give the
[r|i|j|k] blocks, one transpose each way) except for the conv module's depthwise sum, written
as (4, n) tokens. An upsampling stage's phase interleave keeps one transpose between two
reshapes; several frequency heads keep the source's per-head attention (see _attention).
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from qsa.models.qtransformer import QuaternionLayerNorm

from .errors import ExportError
from .rewrite import (
    ExportPReLU,
    ExportQuaternionLayer,
    ExportQuaternionLayerNorm,
    ExportQuaternionUpsample,
    fold_gain,
)


def _mix(layer: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """(..., 4, n) -> (..., 16, n): the signed component selection of ``layer`` (its _Mix)."""
    return torch.matmul(layer.mix.weight.reshape(16, 4), h)


def _nhwc_conv(z: torch.Tensor, weight: torch.Tensor, **kw) -> torch.Tensor:
    """z (1, H, W, C) channels-last -> conv2d with an NCHW ``weight`` -> (1, H', W', C_out).

    Written NCHW for torch; a channels-last converter's own transposes around the conv
    cancel the two permutes here."""
    return F.conv2d(z.permute(0, 3, 1, 2), weight, **kw).permute(0, 2, 3, 1)


def _linear(layer: ExportQuaternionLayer, h: torch.Tensor) -> torch.Tensor:
    """A quaternion linear on tokens (..., L, 4, n_in) -> (..., L, 4, n_out)."""
    y = F.linear(_mix(layer, h).reshape(-1, 4 * layer.n_in), layer.weight)
    y = y.reshape(*h.shape[:-1], layer.n_out)
    if layer.bias is not None:
        y = y + layer.bias.view(4, layer.n_out)
    return y


def _prelu(act: ExportPReLU, h: torch.Tensor) -> torch.Tensor:
    """PReLU with one slope per (component, unit) channel on (1, F, 4, n)."""
    w = act.weight
    w = w.view(4, -1) if w.numel() > 1 else w.view(1, 1)
    return F.relu(h) - F.relu(-h) * w


def _conv_stage(layer: ExportQuaternionLayer, h: torch.Tensor) -> torch.Tensor:
    """A (1, k) quaternion conv along the bins, (1, F, 4, n_in) -> (1, F', 4, n_out)."""
    if layer.spatial != 2 or layer.depthwise or layer.transposed:
        raise ExportError(f"the channels-last step expects a 2-d quaternion conv, got {layer}")
    kh, kw = layer.weight.shape[2:]
    sh, sw = layer.stride
    ph, pw = layer.padding
    if kh != 1 or sh != 1 or ph != 0 or tuple(layer.dilation) != (1, 1):
        raise ExportError(f"the channels-last step expects (1, k) convs along the bins: {layer}")
    z = _mix(layer, h).reshape(1, h.shape[1], 4, 4 * layer.n_in)  # NHWC (1, F, 4, (a, i))
    y = _nhwc_conv(z, layer.cl_weight, stride=(sw, 1), padding=(pw, 0))
    if layer.bias is not None:
        y = y + layer.bias.view(4, layer.n_out)
    return y  # (1, F', 4, n_out)


def _upsample(up: ExportQuaternionUpsample, h: torch.Tensor) -> torch.Tensor:
    """F -> 2F - 1 bins, (1, F, 4, n_in) -> (1, 2F - 1, 4, n_out): both phases one conv."""
    if up.filler != "same":
        raise ExportError(
            f"the channels-last step expects upsample_filler='same', got {up.filler!r}"
        )
    f, n = h.shape[1], up.n_out
    z = _mix(up, h).reshape(1, f, 4, 4 * up.n_in)
    y = _nhwc_conv(z, up.cl_weight, padding="same")  # (1, F, 4, (phase, o))
    y = y + up.bias.view(4, 2 * n)
    y = y.reshape(f, 4, 2, n).transpose(1, 2).reshape(1, 2 * f, 4, n)  # interleaved phases
    return y[:, : 2 * f - 1]


def _depthwise(layer: ExportQuaternionLayer, h: torch.Tensor) -> torch.Tensor:
    """The conv module's depthwise quaternion conv1d along the tokens, (1, L, 4, n) -> same."""
    k = layer.weight.shape[-1]
    if (layer.spatial != 1 or not layer.depthwise or layer.transposed or layer.stride[0] != 1
            or layer.dilation[0] != 1 or 2 * layer.padding[0] != k - 1):
        raise ExportError(
            f"the channels-last step expects a 'same'-padded stride-1 depthwise conv1d: {layer}"
        )
    n, c = h.shape[1], 4 * layer.n_in
    z = _mix(layer, h).reshape(1, n, 4, c)  # (1, L, c', (a, u))
    # one (k, 1) kernel per (a, u) channel
    y = _nhwc_conv(z, layer.cl_weight, padding=(layer.padding[0], 0), groups=c)  # (L, 4, (a, u))
    y = y.reshape(1, n, 4, 4, layer.n_in).sum(dim=3)  # the four partial products
    if layer.bias is not None:
        y = y + layer.bias.view(4, layer.n_in)
    return y


def _attention(attn: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """Shared-score quaternion attention over all tokens (non-causal, no window), (1, L, 4, n).

    The output projection's component mixing is taken before the weighted sum (it acts on
    the components, the attention weights on the tokens, so they commute): the values are
    mixed as the (1, L, 4, n) tokens they are, P @ mix(V) is (L, (c, a, u)) and the
    projection's linear reads it as rows directly (no reshapes back to tokens between)."""
    if attn.score != "shared" or attn.causal or attn.window is not None:
        raise ExportError(
            "the channels-last step runs unmasked shared-score attention only, got "
            f"score={attn.score!r} causal={attn.causal} window={attn.window}"
        )
    n, e = h.shape[1], attn.embed_dim
    hq, d = attn.num_heads, attn.head_quaternions
    out = attn.out_proj
    if hq > 1:
        # several heads: the source's per-head form. A head-select constant instead (every
        # head reads the whole token, as ExportSharedScoreAttention does for one token) is
        # the same in fp32 but quantises badly over many tokens: qcgan-0.89m-causal's int8
        # step 15.6 dB against fp32 in PT2E simulation, 29.5 dB with this (12-05)
        return attn(h.reshape(1, n, e)).reshape(h.shape)
    scale = 1.0 / math.sqrt(4 * d)
    q, k = (_linear(p, h).reshape(n, e) for p in (attn.q_proj, attn.k_proj))
    vm = _mix(out, _linear(attn.v_proj, h)).reshape(n, 4 * e)  # (L, (c, a, u)): mixed values
    p = torch.softmax(torch.matmul(q * scale, k.t()), dim=-1)  # (L, L)
    o = torch.matmul(p, vm)  # (L, (c, a, u))
    y = F.linear(o.reshape(1, n, 4, e), out.weight)  # rows (token, c), features (a, u)
    if out.bias is not None:
        y = y + out.bias.view(4, out.n_out)
    return y


def _time_conv_step(cm: nn.Module, x: torch.Tensor, cache: torch.Tensor):
    """QuaternionConvModule.step of the time Conformer, x (1, 1, C), cache (1, C, k - 1) (the
    source's layout) -> (y (1, 1, C), new cache): the depthwise conv's partial products
    summed to (4, n) tokens with the bias added there, so no moves follow it."""
    dw = cm.dw
    z = torch.cat([cache, cm._pre(x)], dim=-1)  # (1, C, k)
    n, k = dw.n_in, z.shape[-1]
    if (dw.spatial != 1 or not dw.depthwise or dw.transposed or dw.stride[0] != 1
            or dw.dilation[0] != 1 or dw.padding[0] != 0 or k != dw.weight.shape[-1]):
        raise ExportError(f"the channels-last step expects the causal depthwise conv1d: {dw}")
    zm = torch.matmul(dw.mix.weight.reshape(16, 4), z.reshape(4, n * k))  # (c', (a, u, t))
    y = F.conv2d(zm.reshape(4, 4 * n, 1, k), dw.cl_weight_w, groups=4 * n)  # (4, (a, u), 1, 1)
    y = y.reshape(4, 4, n).sum(dim=1)  # (4, n): the four partial products
    if dw.bias is not None:
        y = y + dw.bias.view(4, n)
    y = cm.norm2(y)  # one token as (4, n)
    y = cm.pw2((y * torch.sigmoid(y)).reshape(1, 1, 4 * n))
    return y, z[..., 1:]


def _time_step(c: nn.Module, x: torch.Tensor, state):
    """QuaternionConformer.step of the time Conformer with ``_time_conv_step``."""
    k_cache, v_cache, valid, conv_cache = state
    x = x + 0.5 * c.ff1(x)
    a, (k_cache, v_cache, valid) = c.attn.step(c.attn_norm(x), (k_cache, v_cache, valid))
    x = x + a
    y, conv_cache = _time_conv_step(c.conv, x, conv_cache)
    x = x + y
    return c.norm(x + 0.5 * c.ff2(x)), (k_cache, v_cache, valid, conv_cache)


def _ffn(ff: nn.Module, h: torch.Tensor) -> torch.Tensor:
    z = _linear(ff.up, ff.norm(h))
    return _linear(ff.down, z * torch.sigmoid(z))


def _conv_module(cm: nn.Module, h: torch.Tensor) -> torch.Tensor:
    if cm.causal or not cm._conv_pads:
        raise ExportError("the channels-last step expects the non-causal, odd-kernel conv module")
    z = _linear(cm.pw1, cm.norm(h))
    z = _depthwise(cm.dw, z * torch.sigmoid(z))
    z = cm.norm2(z)
    return _linear(cm.pw2, z * torch.sigmoid(z))


def _conformer(c: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """QuaternionConformer.forward on the tokens (1, L, 4, n) of one frame."""
    h = h + 0.5 * _ffn(c.ff1, h)
    h = h + _attention(c.attn, c.attn_norm(h))
    h = h + _conv_module(c.conv, h)
    return c.norm(h + 0.5 * _ffn(c.ff2, h))


def _decoder(dec: nn.Module, h: torch.Tensor, skips: list[torch.Tensor]) -> torch.Tensor:
    """(1, F', 4, n) and the encoder skips -> the 1x1 head's (1, 1, F, out) (channels-last)."""
    for i, up in enumerate(dec.ups):
        h = _upsample(up, h) + skips[-1 - i]
        if i < len(dec.acts):
            h = _prelu(dec.acts[i], h)
    head = dec.head
    return F.linear(h.reshape(1, 1, h.shape[1], -1), head.cl_weight, head.bias)


def channels_last_reason(net: nn.Module) -> str | None:
    """Why ``net`` (a prepared network step) has no channels-last form; None if it has."""
    from qsa.models.qcgan import NetworkStep

    if not isinstance(net, NetworkStep):
        return f"{type(net).__name__} is not QC-GAN's network step"
    cfg = net.model.config
    if getattr(cfg, "df_taps", 0):
        return (f"df_taps={cfg.df_taps}: deep filtering is not exported to the channels-last "
                "form (TFLite-Micro, C) yet")  # fmt: skip
    if cfg.time_path != "band":
        return f"time_path={cfg.time_path!r} (the channels-last form takes 'band')"
    for m in net.modules():
        if isinstance(m, ExportQuaternionLayerNorm) and m.reduce != "mean":
            return f"norm_reduce={m.reduce!r} (the channels-last form takes 'mean')"
        if isinstance(m, ExportQuaternionUpsample) and m.filler != "same":
            return f"upsample_filler={m.filler!r} (the channels-last form takes 'same')"
        if isinstance(m, QuaternionLayerNorm):
            return "unfolded QuaternionLayerNorm (prepare with fold_norm=True)"
    return None


class ChannelsLastNetworkStep(nn.Module):
    """forward(x (1, 4, 1, F), *block_state) -> (mask (1, 1, F), residual (1, 2, 1, F),
    *new_block_state), as ``NetworkStep`` of the prepared (export-form) model ``net``."""

    n_outputs = 2

    def __init__(self, net: nn.Module):
        super().__init__()
        reason = channels_last_reason(net)
        if reason is not None:
            raise ExportError(f"no channels-last network step: {reason}")
        self.net = net = copy.deepcopy(net)  # the folds and re-viewed kernels are its own
        self.model = net.model
        self.folded_gains = self._fold_output_gains()
        # the kernels re-viewed once, as parameters of their own (a view taken in forward would
        # be an op on the weight, which quantisers then treat as an activation)
        for m in net.modules():
            w = getattr(m, "weight", None)
            if isinstance(m, ExportQuaternionLayer) and m.spatial == 2:
                m.cl_weight = nn.Parameter(w.detach().transpose(2, 3).contiguous(), False)
            elif isinstance(m, ExportQuaternionLayer) and m.spatial == 1 and m.depthwise:
                k = w.shape[-1]
                m.cl_weight = nn.Parameter(w.detach().reshape(-1, 1, k, 1).clone(), False)
                m.cl_weight_w = nn.Parameter(w.detach().reshape(-1, 1, 1, k).clone(), False)
            elif isinstance(m, ExportQuaternionUpsample):
                m.cl_weight = nn.Parameter(w.detach().transpose(2, 3).contiguous(), False)
            elif isinstance(m, nn.Conv2d) and tuple(m.kernel_size) == (1, 1):
                m.cl_weight = nn.Parameter(w.detach().flatten(1).clone(), False)

    def _fold_output_gains(self) -> int:
        """Each time Conformer's final norm gain into its band_out, and the last frequency
        Conformer's into the decoders' first upsampling convs: the only layers those norms
        feed, so scaling their input unit i by g_i is the same product (one MUL op fewer
        each, fp32-identical). How many norms lost their gain."""
        n = 0
        blocks = list(self.model.blocks)
        for i, blk in enumerate(blocks):
            pairs = [(blk.time.norm, [blk.band_out])]
            if i == len(blocks) - 1:
                pairs.append((blk.freq.norm, [self.model.mask_decoder.ups[0],
                                              self.model.complex_decoder.ups[0]]))
            for norm, layers in pairs:
                if isinstance(norm, ExportQuaternionLayerNorm) and norm.apply_gain:
                    fold_gain(norm, layers)
                    n += 1
        return n

    def init_state(self, batch: int = 1) -> tuple[torch.Tensor, ...]:
        return self.net.init_state(batch)

    def forward(self, x: torch.Tensor, *state: torch.Tensor):
        m = self.model
        if x.shape[0] != 1 or x.shape[2] != 1:
            raise ExportError(
                f"the channels-last step takes one frame (1, 4, 1, F), got {tuple(x.shape)}"
            )
        f = x.shape[-1]
        h = x.permute(0, 3, 1, 2)  # (1, F, 4, 1): one quaternion per bin
        skips = [h]
        for conv, act in zip(m.enc, m.enc_acts, strict=True):
            h = _prelu(act, _conv_stage(conv, h))
            skips.append(h)
        skips = skips[:-1]
        new_state: list[torch.Tensor] = []
        for i, blk in enumerate(m.blocks):
            fi, u = h.shape[1], h.shape[3]
            z = blk.band_in(h.permute(0, 2, 3, 1).reshape(1, 1, 4 * u * fi))  # [c][(u, f)]
            z, st = _time_step(blk.time, z, tuple(state[4 * i : 4 * i + 4]))
            new_state.extend(st)
            z = blk.band_out(z).reshape(1, 4, u, fi).permute(0, 3, 1, 2)  # (1, F', 4, u)
            h = _conformer(blk.freq, h + z)
        mask = m.mask_act(_decoder(m.mask_decoder, h, skips).reshape(1, 1, f))
        res = _decoder(m.complex_decoder, h, skips).permute(0, 3, 1, 2)  # (1, 2, 1, F)
        return (mask, res, *new_state)
