"""Property tests (hypothesis) for the audio reader, resampling and STFT framing / overlap-add.

Each draws the inputs a user can give (formats, sample types, rates, channel counts, lengths,
block sizes) and checks an invariant that must hold for all of them.
"""

import numpy as np
import pytest
import soundfile as sf
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qsa.audio.io import read_audio
from qsa.audio.resample import StreamResampler, resample
from qsa.audio.stft import Stft
from qsa.errors import AudioError

RATES = [8000, 11025, 16000, 22050, 24000, 32000, 44100, 48000]
# (format, subtype, worst error of a read-back vs the float written)
CODECS = [
    ("WAV", "PCM_16", 1.0 / 32768),
    ("WAV", "PCM_24", 1.0 / 2**23),
    ("WAV", "PCM_32", 1e-7),
    ("WAV", "FLOAT", 0.0),
    ("WAV", "PCM_U8", 1.0 / 128),
    ("FLAC", "PCM_16", 1.0 / 32768),
    ("FLAC", "PCM_24", 1.0 / 2**23),
]
_TMP = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@_TMP
@given(
    codec=st.sampled_from(CODECS),
    sr=st.sampled_from(RATES),
    channels=st.integers(1, 4),
    frames=st.integers(1, 3000),
    seed=st.integers(0, 2**31 - 1),
)
def test_reader_returns_the_mono_mix_at_the_file_rate(tmp_path, codec, sr, channels, frames,
                                                      seed):  # fmt: skip
    """Any codec / rate / channel count / length: read_audio(target_sr=None) gives the file's
    samples mixed to mono (within the codec's step), the right rate and length, and notices
    that say what it did."""
    fmt, subtype, step = codec
    rng = np.random.default_rng(seed)
    x = (rng.uniform(-0.9, 0.9, (frames, channels))).astype(np.float32)
    path = tmp_path / f"x_{seed}.{'flac' if fmt == 'FLAC' else 'wav'}"
    sf.write(path, x, sr, format=fmt, subtype=subtype)
    y, info = read_audio(path, target_sr=None)
    assert y.dtype == np.float32 and y.shape == (frames,)
    assert info.sr == info.sr_in == sr and info.channels == channels
    assert info.mixed_to_mono == (channels > 1)
    assert (f"mixed {channels} channels to mono" in info.notices) == (channels > 1)
    np.testing.assert_allclose(y, x.mean(axis=1), atol=step + 1e-6)


@_TMP
@given(sr=st.sampled_from(RATES), target=st.sampled_from(RATES), frames=st.integers(1, 4000))
def test_reader_resamples_to_the_asked_rate(tmp_path, sr, target, frames):
    """Any file rate to any target rate: the length scales with the rate ratio (soxr rounds
    to the nearest sample) and the notice names both rates."""
    x = np.zeros((frames, 1), np.float32)
    x[:, 0] = 0.1 * np.sin(2 * np.pi * 200 * np.arange(frames) / sr)
    path = tmp_path / f"r_{sr}_{target}_{frames}.wav"
    sf.write(path, x, sr, subtype="FLOAT")
    y, info = read_audio(path, target_sr=target)
    assert info.sr == target and info.resampled == (sr != target)
    assert abs(len(y) - frames * target / sr) <= 1
    if sr != target:
        assert f"resampled {sr} Hz -> {target} Hz" in info.notices


@_TMP
@given(
    bad=st.sampled_from([np.nan, np.inf, -np.inf]),
    frames=st.integers(1, 500),
    where=st.floats(0, 1, exclude_max=True),
)
def test_reader_rejects_any_non_finite_sample_naming_it(tmp_path, bad, frames, where):
    x = np.zeros(frames, np.float32)
    k = int(where * frames)
    x[k] = bad
    path = tmp_path / f"nan_{frames}_{k}.wav"
    sf.write(path, x, 16000, subtype="FLOAT")
    with pytest.raises(AudioError, match=rf"NaN or Inf \(first at sample {k},"):
        read_audio(path)


@settings(max_examples=40, deadline=None)
@given(
    sr_in=st.sampled_from(RATES),
    sr_out=st.sampled_from(RATES),
    n=st.integers(0, 5000),
    blocks=st.lists(st.integers(1, 700), min_size=1, max_size=12),
    seed=st.integers(0, 2**31 - 1),
)
def test_streaming_resampler_equals_whole_signal(sr_in, sr_out, n, blocks, seed):
    """Any block split: the streamed output (process + flush) is the one-shot resample of the
    whole signal, and its length is n * sr_out / sr_in rounded."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32) * 0.1
    whole = resample(x, sr_in, sr_out)
    r = StreamResampler(sr_in, sr_out)
    parts, i, k = [], 0, 0
    while i < n:
        b = blocks[k % len(blocks)]
        parts.append(r.process(x[i : i + b]))
        i, k = i + b, k + 1
    parts.append(r.flush())
    got = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    assert got.shape == whole.shape
    assert abs(len(got) - n * sr_out / sr_in) <= 1
    np.testing.assert_allclose(got, whole, atol=2e-5)


@settings(max_examples=40, deadline=None)
@given(
    shape=st.sampled_from([(256, 128, "sqrt_hann"), (320, 160, "sqrt_hann"),
                           (400, 100, "hann"), (512, 128, "hann"), (64, 16, "sqrt_hann")]),
    length=st.integers(1, 3000),
    batch=st.integers(1, 3),
    basis=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)  # fmt: skip
def test_framing_and_overlap_add_reconstruct_any_length(shape, length, batch, basis, seed):
    """Analysis then WOLA synthesis is the identity for any length (a partial last frame
    too), in both the torch.stft and the DFT-basis paths, with the frame count the module
    promises."""
    n_fft, hop, window = shape
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, generator=g)
    s = Stft(n_fft, hop, window)
    re, im = s.stft(x, basis=basis)
    assert re.shape == im.shape == (batch, s.num_frames(length), n_fft // 2 + 1)
    y = s.istft(re, im, length, basis=basis)
    assert y.shape == x.shape
    assert float((y - x).abs().max()) < 2e-5


@settings(max_examples=25, deadline=None)
@given(
    shape=st.sampled_from([(256, 128, "sqrt_hann"), (400, 100, "hann"), (64, 16, "sqrt_hann")]),
    steps=st.integers(1, 40),
    seed=st.integers(0, 2**31 - 1),
)
def test_streaming_framing_is_the_input_delayed(shape, steps, seed):
    """One hop at a time: the output is exactly the input delayed by n_fft - hop samples,
    starting from silence, for any number of steps."""
    n_fft, hop, window = shape
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, steps * hop, generator=g)
    s = Stft(n_fft, hop, window)
    in_buf, ola = s.init_state(1)
    outs = []
    for t in range(steps):
        re, im, in_buf = s.analysis_step(x[:, t * hop : (t + 1) * hop], in_buf)
        out, ola = s.synthesis_step(re, im, ola)
        outs.append(out)
    y = torch.cat(outs, 1)
    d = s.delay
    assert float(y[:, :d].abs().max()) < 1e-6  # the delay line starts silent
    if steps * hop > d:
        assert float((y[:, d:] - x[:, : x.shape[1] - d]).abs().max()) < 2e-5
