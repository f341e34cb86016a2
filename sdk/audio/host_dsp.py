"""The QC-GAN host DSP in numpy, without torch: what a host runs per hop around an exported
int8 network (``qsa.export.split``) and what a warm ``qsa live`` start runs without importing
torch (``qsa.apps.live.warm``).

``HostDSP`` is ``qsa.models.qcgan.StepModule``'s ``analysis`` / ``synthesis`` in numpy float32,
batch 1: a real FFT (pocketfft) in place of the exportable DFT-basis matmuls, the same window,
power-law compression and overlap-add; equal to the torch DSP within float32 rounding
(tests/test_split_dsp.py). It has no trained parameters: its numbers (FFT size, hop, the two
windows, the compression exponent, the magnitude floor) are all it is built from.

    analysis(frame (1, hop), in_buf (1, N - hop), ola (1, N - hop))
        -> x (1, 4, 1, F), aux (|X|^c, cos, sin) each (F,), (in_buf', ola)
    synthesis((mask (1, 1, F), res (1, 2, 1, F)), aux, (in_buf, ola)) -> out (1, hop), state

With deep filtering (``df_taps`` K > 0, ``QCGANConfig.df_taps``) the DSP state has a third
tensor, the compressed noisy spectra X_c of the K past frames, hist (1, 2, K, F) ((re, im) x
frames t-K .. t-1, oldest first); ``res`` is (1, 2 + 2K, 1, F) (residual, then Re C_k, Im C_k)
and the synthesis adds sum_k C_k X_c(t - k):

    analysis(frame, in_buf, ola, hist) -> x, aux (|X|^c, cos, sin, hist), (in_buf', ola, hist')

``gain_exponent`` g > 1 (``QCGANConfig.gain_exponent``, the post-filter): before
decompression each bin's Y_c is scaled by min(1, |Y_c| / |X_c|)^(g - 1), so its linear gain
G = |Y| / |X| below 1 becomes G^g.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError


class HostDSP:
    """The STFT analysis / synthesis of a QC-GAN step in numpy (see the module doc)."""

    def __init__(self, n_fft: int, hop: int, window, synthesis_window, compress: float,
                 eps: float, df_taps: int = 0, gain_exponent: float = 1.0):  # fmt: skip
        self.n_fft, self.hop = int(n_fft), int(hop)
        self.df_taps = int(df_taps)
        if self.df_taps < 0:
            raise ConfigError(f"host DSP: df_taps={df_taps}; expected >= 0 past frames")
        self.gain_exponent = float(gain_exponent)
        if not 1.0 <= self.gain_exponent <= 4.0:
            raise ConfigError(f"host DSP: gain_exponent={gain_exponent}; expected a number in "
                              "[1, 4] (1 = no post-filter)")  # fmt: skip
        self.window = np.asarray(window, np.float32)
        self.synthesis_window = np.asarray(synthesis_window, np.float32)
        self.c = float(compress)
        self.eps = float(eps)
        self.n_freq = self.n_fft // 2 + 1
        if self.window.shape != (self.n_fft,) or self.synthesis_window.shape != (self.n_fft,):
            raise ConfigError(
                f"host DSP: windows of shapes {self.window.shape} / "
                f"{self.synthesis_window.shape} for n_fft {self.n_fft}; expected ({self.n_fft},)"
            )
        self._x = np.zeros((1, 4, 1, self.n_freq), np.float32)  # channel 0 stays 0

    @classmethod
    def from_model(cls, model) -> HostDSP:
        """The DSP of a ``qsa.models.qcgan.QCGAN`` (its STFT windows and compression)."""
        from ..models.qcgan import _EPS

        st = model.stft
        return cls(st.n_fft, st.hop, st.window.detach().numpy(),
                   st.synthesis_window.detach().numpy(), model.config.compress, _EPS,
                   model.config.df_taps, model.config.gain_exponent)

    @property
    def n_state(self) -> int:
        """DSP state tensors: in_buf, ola (+ the X_c history with deep filtering)."""
        return 3 if self.df_taps else 2

    def analysis(self, frame: np.ndarray, in_buf: np.ndarray, ola: np.ndarray, *history):
        buf = np.concatenate([in_buf, frame], axis=-1)  # (1, N)
        z = np.fft.rfft(buf[0] * self.window)  # (F,) complex
        re, im = z.real.astype(np.float32), z.imag.astype(np.float32)
        mag = np.sqrt(re * re + im * im + np.float32(self.eps))
        mag_c = np.exp(np.float32(self.c) * np.log(mag))
        cos, sin = re / mag, im / mag
        x = self._x.copy()
        x[0, 1, 0] = mag_c
        x[0, 2, 0] = mag_c * cos
        x[0, 3, 0] = mag_c * sin
        in_buf = np.ascontiguousarray(buf[:, self.hop :])
        if not self.df_taps:
            return x, (mag_c, cos, sin), (in_buf, ola)
        (hist,) = history  # (1, 2, K, F), oldest first
        new_hist = np.empty_like(hist)
        new_hist[:, :, :-1] = hist[:, :, 1:]
        new_hist[0, :, -1] = x[0, 2:4, 0]  # this frame's (re_c, im_c)
        return x, (mag_c, cos, sin, hist), (in_buf, ola, new_hist)

    def synthesis(self, net_out, aux, dsp_state):
        kk = self.df_taps
        mask, res = net_out[0].reshape(-1), net_out[1].reshape(2 + 2 * kk, -1)  # (F,), (2+2K, F)
        mag_c, cos, sin = aux[:3]
        m = mask * mag_c
        re_c, im_c = m * cos + res[0], m * sin + res[1]
        for k in range(1, kk + 1):  # + C_k X_c(t - k); X_c(t - k) is hist[.., K - k, :]
            xr, xi = aux[3][0, 0, kk - k], aux[3][0, 1, kk - k]  # (F,) each
            cr, ci = res[2 * k], res[2 * k + 1]
            re_c = re_c + cr * xr - ci * xi
            im_c = im_c + cr * xi + ci * xr
        mag = np.sqrt(re_c * re_c + im_c * im_c + np.float32(self.eps))
        if self.gain_exponent != 1.0:  # the post-filter: min(1, |Y_c| / |X_c|)^(g - 1)
            ratio = np.minimum(mag / mag_c, np.float32(1.0))
            f = np.exp(np.float32(self.gain_exponent - 1.0) * np.log(ratio))
            re_c, im_c = re_c * f, im_c * f
            mag = np.sqrt(re_c * re_c + im_c * im_c + np.float32(self.eps))
        scale = np.exp(np.float32(1.0 / self.c - 1.0) * np.log(mag))
        frame = np.fft.irfft((re_c * scale) + 1j * (im_c * scale), n=self.n_fft)  # (N,)
        acc = (frame * self.synthesis_window).astype(np.float32)
        in_buf, ola = dsp_state[:2]
        acc[: self.n_fft - self.hop] += ola[0]
        return acc[None, : self.hop].copy(), (in_buf, acc[None, self.hop :].copy(),
                                              *dsp_state[2:])
