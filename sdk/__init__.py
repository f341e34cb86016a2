"""qsa: quaternion attention models from PyTorch training to phones and microcontrollers.

Importing ``qsa`` is cheap; torch and the runtimes load when first used.
"""

from ._version import __version__
from .errors import AudioError, ConfigError, FormatError, QsaError

__all__ = ["AudioError", "ConfigError", "FormatError", "QsaError", "__version__", "load"]


def load(name_or_path, dequantize: bool = False):
    """Load a shipped model by name (e.g. ``"qcgan-35k"``) or a packed model file."""
    from .hub import load as _load

    return _load(name_or_path, dequantize=dequantize)
