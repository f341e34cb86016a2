"""The numpy host DSP of the DSP / network split equals the model's torch DSP.

int8 artifacts hold only the network; ``SplitRuntime`` runs the STFT, power-law compression
and their inverses on the host with ``StepModule.host_dsp()`` (numpy). Streamed through the
same fp32 network, every network input and every output hop must equal the torch path's
within float32 rounding.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from qsa.models.qcgan import QCGAN, qcgan_35k


@pytest.fixture(scope="module", params=[(0, 1.0), (2, 1.0), (0, 1.6)],
                ids=["plain", "df_taps=2", "gain_exponent=1.6"])
def step(request):
    """qcgan-35k, with deep filtering (df_taps=2: a third DSP state, the X_c history), its
    taps randomised (a fresh model's are 0), and with the post-filter (gain_exponent=1.6), its
    mask head made to attenuate (a fresh model's mask is ~1, where the filter does nothing)."""
    taps, g = request.param
    torch.manual_seed(0)
    m = QCGAN(dataclasses.replace(qcgan_35k(), df_taps=taps, gain_exponent=g)).eval()
    with torch.no_grad():
        if taps:
            m.complex_decoder.head.weight[2:].normal_(0.0, 0.5)
            m.complex_decoder.head.bias[2:].normal_(0.0, 0.3)
        if g != 1.0:
            m.mask_decoder.head.bias.fill_(-0.3)
    return m.step_module()


def _wave(n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    t = np.arange(n) / 16000
    x = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(n)
    x[n // 2 : n // 2 + 2000] = 0.0  # digital silence: the +eps paths
    return x.astype(np.float32)


@torch.no_grad()
def test_host_dsp_streams_like_the_torch_dsp(step):
    net, dsp, k = step.network(), step.host_dsp(), step.n_dsp_state
    state = tuple(step.init_state(1))
    t_dsp, n_dsp, net_state = state[:k], [s.numpy().copy() for s in state[:k]], state[k:]
    wave = _wave(16000)
    worst_x = worst_y = 0.0
    outs_t, outs_n = [], []
    for t in range(len(wave) // step.hop):
        frame = wave[t * step.hop : (t + 1) * step.hop][None]  # (1, hop)
        x_t, aux_t, t_dsp = step.analysis(torch.from_numpy(frame), *t_dsp)
        x_n, aux_n, n_dsp = dsp.analysis(frame, *n_dsp)
        assert x_n.shape == tuple(x_t.shape) and x_n.dtype == np.float32
        worst_x = max(worst_x, float(np.abs(x_n - x_t.numpy()).max()))
        o = net(x_t, *net_state)
        net_out, net_state = o[: net.n_outputs], o[net.n_outputs :]
        y_t, t_dsp = step.synthesis(net_out, aux_t, t_dsp)
        y_n, n_dsp = dsp.synthesis([v.numpy() for v in net_out], aux_n, n_dsp)
        assert y_n.shape == tuple(y_t.shape) and y_n.dtype == np.float32
        outs_t.append(y_t.numpy())
        outs_n.append(y_n)
        for a, b in zip(n_dsp, t_dsp, strict=True):  # the DSP state travels the same way
            assert a.shape == tuple(b.shape)
    y_t, y_n = np.concatenate(outs_t, 1), np.concatenate(outs_n, 1)
    worst_y = float(np.abs(y_n - y_t).max())
    assert np.all(np.isfinite(y_n))
    assert worst_x < 1e-4, worst_x  # |X|^0.3 of ~10-magnitude bins: float32 rounding
    assert worst_y < 1e-5, worst_y
    assert np.abs(y_t).max() > 1e-3  # the comparison is of real signal, not of zeros


def test_split_runtime_uses_the_host_dsp(step):
    """SplitRuntime picks the numpy DSP and streams like the torch DSP around the same
    network (an fp32 torch "runtime" of the network: only the DSP differs)."""
    from qsa.export.runtimes import Runtime
    from qsa.export.split import SplitRuntime

    net = step.network()

    class TorchNetwork(Runtime):
        kind = "torch"

        def __init__(self):
            shapes = [tuple(s.shape) for s in net.init_state(1)]
            super().__init__(step.hop, shapes)

        def _run(self, inputs):
            with torch.no_grad():
                outs = net(*(torch.from_numpy(np.asarray(a)) for a in inputs))
            return [o.numpy() for o in outs]

    rt_np, rt_torch = SplitRuntime(TorchNetwork(), step), SplitRuntime(TorchNetwork(), step)
    assert rt_np.host_dsp is not None
    rt_torch.host_dsp = None  # the torch analysis / synthesis
    wave = _wave(8000)
    s_np, s_torch = rt_np.init_state(), rt_torch.init_state()
    for t in range(len(wave) // step.hop):
        frame = wave[t * step.hop : (t + 1) * step.hop][None]
        y_np, s_np = rt_np.step(frame, s_np)
        y_torch, s_torch = rt_torch.step(frame, s_torch)
        np.testing.assert_allclose(y_np, y_torch, atol=1e-5)
    # a warm qsa live start rebuilds the same numpy DSP from the recorded numbers (with
    # deep filtering: df_taps and the third DSP state) and streams bit for bit the same
    from qsa.apps.live.warm import HostSplitRuntime, spec_of

    spec = spec_of(rt_np)
    assert spec is not None and spec.get("df_taps", 0) == step.model.config.df_taps
    assert spec.get("gain_exponent", 1.0) == step.model.config.gain_exponent
    net_rt = TorchNetwork()
    net_rt.source = "torch"
    warm = HostSplitRuntime(net_rt, spec)
    s_np, s_warm = rt_np.init_state(), warm.init_state()
    for t in range(8):
        frame = wave[t * step.hop : (t + 1) * step.hop][None]
        y_np, s_np = rt_np.step(frame, s_np)
        y_warm, s_warm = warm.step(frame, s_warm)
        np.testing.assert_array_equal(y_np, y_warm)
