"""qsa: quaternion attention models from PyTorch training to phones and microcontrollers.

Importing ``qsa`` is cheap; torch and the runtimes load when first used.
"""

from ._version import __version__
from .errors import AudioError, ConfigError, FormatError, QsaError

__all__ = [
    "AudioError",
    "ConfigError",
    "FormatError",
    "QsaError",
    "__version__",
    "enhance",
    "load",
]


def load(name_or_path, dequantize: bool = False):
    """Load a shipped model by name (e.g. ``"qcgan-35k"``) or a packed model file."""
    from .hub import load as _load

    return _load(name_or_path, dequantize=dequantize)


def enhance(audio, sr: int, model="qcgan-35k", atten_lim_db=None):
    """Enhance a mono (N,) or multichannel (N, C) float array sampled at ``sr`` Hz with a
    shipped model name, a packed model file or a loaded model; returns mono float32 at
    ``sr``, as long as the input (see :mod:`qsa.enhancement`). ``atten_lim_db``: the most
    the model may attenuate (0: the input unchanged; None: no limit)."""
    from .enhancement import enhance as _enhance

    return _enhance(audio, sr, model=model, atten_lim_db=atten_lim_db)
