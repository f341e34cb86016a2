"""``qsa.enhance(audio, sr)``: the Python entry point of the QC-GAN issue, on real speech with
the shipped qcgan-35k, and every kind of bad array a user can hand it."""

import numpy as np
import pytest

import qsa
from qsa.errors import AudioError


@pytest.fixture(scope="module")
def speech():
    from qsa.export.calib import verification_utterance

    return verification_utterance(seconds=1.0).astype(np.float32)  # noisy espeak-ng speech


@pytest.fixture(scope="module")
def model():
    return qsa.load("qcgan-35k").eval()


def test_enhance_is_the_function_and_matches_the_module(speech, model):
    from qsa import enhancement

    y = qsa.enhance(speech, 16000, model=model)
    assert y.dtype == np.float32 and y.shape == speech.shape and np.all(np.isfinite(y))
    np.testing.assert_array_equal(y, enhancement.enhance(speech, 16000, model=model))
    assert callable(qsa.enhance)  # importing qsa.enhancement does not shadow it
    # the shipped model removes noise: the output differs from the input and is not silence
    assert 0.05 < np.sqrt(np.mean(y**2)) / np.sqrt(np.mean(speech**2)) < 1.5
    assert np.max(np.abs(y - speech)) > 1e-3


def test_integer_pcm_stereo_and_other_rates_are_converted(speech, model):
    y = qsa.enhance(speech, 16000, model=model)
    pcm = np.round(speech * 32767).astype(np.int16)
    np.testing.assert_allclose(qsa.enhance(pcm, 16000, model=model),
                               qsa.enhance(pcm / np.float32(32768), 16000, model=model),
                               atol=1e-6)
    np.testing.assert_allclose(qsa.enhance(np.stack([speech, speech], 1), 16000, model=model), y,
                               atol=1e-6)
    import soxr

    x48 = soxr.resample(speech, 16000, 48000)
    y48 = qsa.enhance(x48, 48000, model=model)
    assert y48.shape == x48.shape and np.all(np.isfinite(y48))


R = np.random.default_rng(0).standard_normal(1600).astype(np.float32) * 0.1
BAD = {
    "rate 0": (R, 0, "sample rate 0"),
    "fractional rate": (R, 16000.5, "sample rate 16000.5"),
    "rate as text": (R, "16000", "sample rate '16000'"),
    "empty": (np.zeros(0, np.float32), 16000, "shape (0,)"),
    "3-D": (np.zeros((2, 2, 100), np.float32), 16000, "shape (2, 2, 100)"),
    "channel-first": (np.stack([R, R]), 16000, "channel-first"),
    "NaN": (np.where(np.arange(1600) == 7, np.nan, R).astype(np.float32), 16000, "NaN"),
    "complex": (R.astype(np.complex64), 16000, "complex"),
    "bool": (R > 0, 16000, "dtype bool"),
    "text": ("abc", 16000, "dtype <U3"),
    "PCM values as float": (R * 32768, 16000, "above full scale"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_arrays_are_clean_errors(case, model):
    audio, sr, words = BAD[case]
    with pytest.raises(AudioError, match="expected|divide by"):
        try:
            qsa.enhance(audio, sr, model=model)
        except AudioError as e:
            assert words in str(e), (words, str(e))
            raise


def test_a_preset_without_weights_is_refused_not_run_untrained():
    """qsa.enhance never enhances with random weights; qsa.load returns them (for training)
    only with a warning that says so."""
    from qsa.errors import ConfigError
    from qsa.hub import shipped_weights
    from qsa.models import qcgan
    from qsa.models.registry import _PRESETS, register_preset

    name = "qcgan-test-unshipped"  # a registered preset that has no weights in the package
    register_preset(name, lambda: qcgan.qcgan_089m(causal=True))
    try:
        assert shipped_weights(name) is None
        with pytest.raises(ConfigError, match="no shipped weights"):
            qsa.enhance(R, 16000, model=name)
        with pytest.warns(UserWarning, match="freshly initialised"):
            m = qsa.load(name)
        assert sum(p.numel() for p in m.parameters()) > 800_000
    finally:
        del _PRESETS[name]
