"""STFT helpers: WOLA perfect reconstruction, DFT-basis path == torch.stft, streaming == offline."""

import pytest
import torch

from qsa.audio.stft import Stft
from qsa.errors import ConfigError

CASES = [(256, 128, "sqrt_hann"), (320, 160, "sqrt_hann"), (400, 100, "hann"), (512, 128, "hann")]


@pytest.mark.parametrize("n_fft,hop,window", CASES)
@pytest.mark.parametrize("basis", [False, True])
def test_perfect_reconstruction(n_fft, hop, window, basis):
    torch.manual_seed(0)
    x = torch.randn(2, 4001)
    s = Stft(n_fft, hop, window)
    re, im = s.stft(x, basis=basis)
    assert re.shape == (2, s.num_frames(4001), n_fft // 2 + 1)
    y = s.istft(re, im, x.shape[-1], basis=basis)
    assert y.shape == x.shape
    assert (y - x).abs().max() < 1e-5


@pytest.mark.parametrize("n_fft,hop,window", CASES)
def test_dft_basis_equals_torch_stft(n_fft, hop, window):
    torch.manual_seed(1)
    x = torch.randn(3, 3000)
    s = Stft(n_fft, hop, window)
    re, im = s.stft(x)
    re_b, im_b = s.stft(x, basis=True)
    scale = torch.sqrt(re**2 + im**2).max()
    assert (re - re_b).abs().max() / scale < 1e-6
    assert (im - im_b).abs().max() / scale < 1e-6
    # the basis synthesis of a given spectrum equals the irfft path
    y = s.istft(re, im, 3000)
    y_b = s.istft(re, im, 3000, basis=True)
    assert (y - y_b).abs().max() < 1e-5


@pytest.mark.parametrize("n_fft,hop,window", CASES)
def test_streaming_equals_offline(n_fft, hop, window):
    torch.manual_seed(2)
    steps = 3 * n_fft // hop + 5
    x = torch.randn(2, steps * hop)
    s = Stft(n_fft, hop, window)
    re_off, im_off = s.stft(x)
    in_buf, ola = s.init_state(2)
    outs = []
    for t in range(steps):
        re, im, in_buf = s.analysis_step(x[:, t * hop : (t + 1) * hop], in_buf)
        assert (re[:, 0] - re_off[:, t]).abs().max() < 1e-4
        assert (im[:, 0] - im_off[:, t]).abs().max() < 1e-4
        out, ola = s.synthesis_step(re, im, ola)
        assert in_buf.shape == ola.shape == (2, n_fft - hop)
        outs.append(out)
    y = torch.cat(outs, 1)  # delayed by n_fft - hop
    d = s.delay
    assert (y[:, d:] - x[:, : x.shape[1] - d]).abs().max() < 1e-5
    assert y[:, :d].abs().max() < 1e-6  # the delay line starts silent


def test_bad_window_and_hop_raise():
    with pytest.raises(ConfigError, match="divide"):
        Stft(256, 100)
    with pytest.raises(ConfigError, match="WOLA"):
        Stft(256, 256)  # sqrt-Hann without overlap is not WOLA-constant
    with pytest.raises(ConfigError, match="multiple of 4"):
        Stft(258, 129)
    with pytest.raises(ConfigError, match="window"):
        Stft(256, 128, "kaiser")
