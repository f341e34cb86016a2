"""Audio I/O and resampling: any file in, 16 kHz mono float32 out; atomic writes.

``read_audio`` / ``write_audio`` live in ``qsa.audio.io``; ``resample`` and the streaming
``StreamResampler`` (for the live app) in ``qsa.audio.resample``.
"""

from .io import AudioInfo, read_audio, write_audio
from .resample import StreamResampler, resample

__all__ = ["AudioInfo", "StreamResampler", "read_audio", "resample", "write_audio"]
