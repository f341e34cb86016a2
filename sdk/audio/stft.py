"""STFT / iSTFT with weighted overlap-add (WOLA), offline and one hop at a time.

Two implementations of one transform, equal within float rounding:

* offline: ``torch.stft`` / ``torch.fft.irfft`` + ``F.fold`` (fast, used for training);
* streaming: matmuls against fixed real DFT basis buffers (cos / sin tables, after one
  radix-2 even/odd split that halves the MACs: 2 x (N/2 x N/2) instead of N x N). Real
  arithmetic only, no complex dtype, no ``torch.stft``: the streaming step exports to
  ExecuTorch / LiteRT / TFLite-Micro / ONNX with static shapes. The analysis buffer and the
  overlap-add accumulator are explicit state tensors updated with ``cat`` and
  slicing (no in-place writes).

Framing convention (shared by both paths, so that streaming equals offline): the signal is
preceded by ``n_fft - hop`` zeros, frame t covers padded samples [t*hop, t*hop + n_fft), and
the streaming step t emits padded samples [t*hop, t*hop + hop), i.e. the input delayed by
``n_fft - hop`` samples. Algorithmic latency = one hop of buffering + that delay = ``n_fft``.

Windows: periodic sqrt-Hann analysis and synthesis windows (or Hann analysis with a flat
synthesis window); the synthesis window is divided
by the WOLA envelope sum_k w_a w_s [n + k hop], which is constant for hop = n_fft/2, n_fft/4,
... (checked at construction), so analysis followed by synthesis reconstructs the input
exactly (up to float rounding) after the delay.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError

WINDOWS = ("sqrt_hann", "hann")


def make_window(n_fft: int, kind: str = "sqrt_hann") -> torch.Tensor:
    """Periodic analysis window of length ``n_fft`` (float64)."""
    hann = torch.hann_window(n_fft, periodic=True, dtype=torch.float64)
    if kind == "sqrt_hann":
        return hann.sqrt()
    if kind == "hann":
        return hann
    raise ConfigError(f"window={kind!r}; expected one of {WINDOWS}")


def wola_synthesis_window(analysis: torch.Tensor, hop: int, kind: str) -> torch.Tensor:
    """Synthesis window that makes analysis -> synthesis -> overlap-add the identity.

    For sqrt-Hann the synthesis window is the analysis window; for Hann analysis it is the
    rectangular window. Either is divided by the (constant) WOLA envelope.
    """
    n = analysis.numel()
    synth = analysis.clone() if kind == "sqrt_hann" else torch.ones_like(analysis)
    prod = analysis * synth
    env = torch.zeros(hop, dtype=prod.dtype)
    for start in range(0, n, hop):
        seg = prod[start : start + hop]
        env[: seg.numel()] += seg
    if not torch.allclose(env, env.mean().expand_as(env), rtol=1e-9, atol=1e-12):
        raise ConfigError(
            f"hop={hop} does not give a constant WOLA envelope for a {kind} window of n_fft={n} "
            f"(envelope ranges {float(env.min()):.4f}..{float(env.max()):.4f}); use a hop that "
            "divides n_fft into 2, 4, 8, ... overlapping frames"
        )
    return synth / env.mean()


class Stft(nn.Module):
    """STFT of hop ``hop`` and frame ``n_fft`` with WOLA resynthesis (see module docstring).

    Spectra are returned as real/imaginary pairs ``(re, im)`` of shape (B, T, F),
    F = n_fft // 2 + 1; the streaming form works on one frame (B, 1, F).
    """

    def __init__(self, n_fft: int, hop: int, window: str = "sqrt_hann"):
        super().__init__()
        if n_fft < 8 or n_fft % 4:
            raise ConfigError(
                f"n_fft={n_fft}; expected a frame length >= 8 that is a multiple of 4 (256, 320)"
            )
        if hop < 1 or n_fft % hop:
            raise ConfigError(f"hop={hop} must divide n_fft={n_fft} (e.g. hop = n_fft // 2)")
        self.n_fft = n_fft
        self.hop = hop
        self.n_freq = n_fft // 2 + 1
        self.window_kind = window
        w = make_window(n_fft, window)
        s = wola_synthesis_window(w, hop, window)
        h, q = n_fft // 2, n_fft // 4
        n = torch.arange(h, dtype=torch.float64).view(-1, 1)  # (N/2, 1)
        f_even = 2.0 * torch.arange(q + 1, dtype=torch.float64).view(1, -1)  # 0, 2, .., N/2
        f_odd = 2.0 * torch.arange(q, dtype=torch.float64).view(1, -1) + 1.0  # 1, 3, .., N/2-1
        ang_e = 2.0 * math.pi * n * f_even / n_fft  # (N/2, N/4 + 1)
        ang_o = 2.0 * math.pi * n * f_odd / n_fft  # (N/2, N/4)
        # analysis, one radix-2 split: with a = (w x)[:N/2], b = (w x)[N/2:], the even bins are
        # the DFT of a + b and the odd bins that of a - b (half the MACs of a full DFT matmul):
        # re = sum s cos, im = -sum s sin  -> bases (N/2, 2 x bins) = [cos | -sin]
        ana_e = torch.cat([torch.cos(ang_e), -torch.sin(ang_e)], 1)
        ana_o = torch.cat([torch.cos(ang_o), -torch.sin(ang_o)], 1)
        # synthesis (irfft): x[n] = 1/N sum_f c_f (re cos - im sin), c_f = 1 at DC / Nyquist;
        # E (even bins) and O (odd bins) on n < N/2 give x[n] = E + O, x[n + N/2] = E - O
        c_e = torch.full((q + 1, 1), 2.0, dtype=torch.float64)
        c_e[0] = 1.0
        c_e[-1] = 1.0
        syn_e = torch.cat([c_e * torch.cos(ang_e.T), -c_e * torch.sin(ang_e.T)], 0) / n_fft
        syn_o = torch.cat([2.0 * torch.cos(ang_o.T), -2.0 * torch.sin(ang_o.T)], 0) / n_fft
        self.register_buffer("window", w.float(), persistent=False)
        self.register_buffer("synthesis_window", s.float(), persistent=False)
        self.register_buffer("analysis_even", ana_e.float(), persistent=False)  # (N/2, 2(N/4+1))
        self.register_buffer("analysis_odd", ana_o.float(), persistent=False)  # (N/2, 2 N/4)
        self.register_buffer("synthesis_even", syn_e.float(), persistent=False)  # (2(N/4+1), N/2)
        self.register_buffer("synthesis_odd", syn_o.float(), persistent=False)  # (2 N/4, N/2)

    # -- the DFT-basis transform of whole frames (real arithmetic, exportable) ------------
    def dft(self, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Frames (..., N), unwindowed -> (re, im), each (..., F), by basis matmuls."""
        h, q = self.n_fft // 2, self.n_fft // 4
        xw = frames * self.window
        a, b = xw[..., :h], xw[..., h:]  # (..., N/2) each
        even = (a + b) @ self.analysis_even  # (..., 2 (N/4 + 1)): [re | im] of bins 0, 2, ..
        odd = (a - b) @ self.analysis_odd  # (..., 2 N/4): [re | im] of bins 1, 3, ..
        lead = frames.shape[:-1]

        def interleave(e: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
            # e (..., N/4 + 1), o (..., N/4) -> (..., F) in bin order 0, 1, 2, ..
            pairs = torch.stack([e[..., :q], o], dim=-1).reshape(*lead, h)  # (..., N/2)
            return torch.cat([pairs, e[..., q:]], dim=-1)  # (..., N/2 + 1)

        re = interleave(even[..., : q + 1], odd[..., :q])
        im = interleave(even[..., q + 1 :], odd[..., q:])
        return re, im

    def idft(self, re: torch.Tensor, im: torch.Tensor) -> torch.Tensor:
        """(re, im) (..., F) -> synthesis-windowed frames (..., N), by basis matmuls."""
        h, q = self.n_fft // 2, self.n_fft // 4
        lead = re.shape[:-1]

        def split(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            pairs = z[..., :h].reshape(*lead, q, 2)  # (..., N/4, 2): (even, odd) bin pairs
            return torch.cat([pairs[..., 0], z[..., h:]], dim=-1), pairs[..., 1]

        re_e, re_o = split(re)
        im_e, im_o = split(im)
        e = torch.cat([re_e, im_e], dim=-1) @ self.synthesis_even  # (..., N/2)
        o = torch.cat([re_o, im_o], dim=-1) @ self.synthesis_odd  # (..., N/2)
        return torch.cat([e + o, e - o], dim=-1) * self.synthesis_window  # (..., N)

    @property
    def delay(self) -> int:
        """Samples by which the streaming output lags its input (n_fft - hop)."""
        return self.n_fft - self.hop

    # -- offline -------------------------------------------------------------------------
    def num_frames(self, length: int) -> int:
        """Frames whose overlap-add completes every one of ``length`` input samples."""
        return (length + self.delay - 1) // self.hop + 1

    def _pad(self, wave: torch.Tensor) -> torch.Tensor:
        b, n = wave.shape
        t = self.num_frames(n)
        right = (t - 1) * self.hop + self.n_fft - n - self.delay
        return F.pad(wave, (self.delay, right))  # (B, (T-1) hop + N)

    def frames(self, wave: torch.Tensor) -> torch.Tensor:
        """(B, L) -> (B, T, n_fft) frames in the streaming convention (no window)."""
        return self._pad(wave).unfold(-1, self.n_fft, self.hop)  # (B, T, N)

    def stft(self, wave: torch.Tensor, basis: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, L) -> (re, im), each (B, T, F); ``basis=True`` uses the DFT-matmul path."""
        if wave.ndim != 2:
            raise ValueError(f"stft expects a (B, L) waveform, got shape {tuple(wave.shape)}")
        if basis:
            return self.dft(self.frames(wave))  # (B, T, F) each
        z = torch.stft(
            self._pad(wave),
            self.n_fft,
            self.hop,
            window=self.window,
            center=False,
            return_complex=True,
        )  # (B, F, T) complex
        z = z.transpose(1, 2)  # (B, T, F)
        return z.real, z.imag

    def istft(
        self, re: torch.Tensor, im: torch.Tensor, length: int, basis: bool = False
    ) -> torch.Tensor:
        """(re, im) (B, T, F) -> (B, length) waveform aligned with the ``stft`` input."""
        b, t, _ = re.shape
        if basis:
            frames = self.idft(re, im)  # (B, T, N)
        else:
            frames = torch.fft.irfft(torch.complex(re, im), n=self.n_fft, dim=-1)  # (B, T, N)
            frames = frames * self.synthesis_window
        total = (t - 1) * self.hop + self.n_fft
        y = F.fold(
            frames.transpose(1, 2), (1, total), (1, self.n_fft), stride=(1, self.hop)
        )  # (B, 1, 1, total)
        y = y.reshape(b, total)  # (B, total)
        end = min(total, self.delay + length)
        y = y[:, self.delay : end]
        return F.pad(y, (0, length - y.shape[1]))  # (B, length)

    # -- streaming -----------------------------------------------------------------------
    def init_state(self, batch: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        """(analysis buffer, overlap-add accumulator), each (B, n_fft - hop) zeros."""
        z = torch.zeros(batch, self.delay)
        return z, z.clone()

    def analysis_step(
        self, hop_samples: torch.Tensor, in_buf: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One hop (B, hop) -> (re, im) each (B, 1, F), new analysis buffer."""
        frame = torch.cat([in_buf, hop_samples], dim=-1)  # (B, N)
        re, im = self.dft(frame.unsqueeze(1))  # (B, 1, F) each
        return re, im, frame[:, self.hop :]

    def synthesis_step(
        self, re: torch.Tensor, im: torch.Tensor, ola: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(re, im) (B, 1, F) -> one finished hop (B, hop), new accumulator (B, N - hop)."""
        frame = self.idft(re, im).squeeze(1)  # (B, N)
        acc = frame + F.pad(ola, (0, self.hop))  # (B, N)
        return acc[:, : self.hop], acc[:, self.hop :]
