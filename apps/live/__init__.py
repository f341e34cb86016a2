"""qsa.apps.live: live microphone enhancement (``qsa live``).

A sounddevice duplex stream whose callback only moves samples through preallocated
lock-free rings; a worker thread resamples to the model rate and runs the model's
streaming step hop by hop (``Processor``), on torch or any qsa.export runtime.
"""

from .engine import LiveOptions, LiveSession, list_devices, pipeline_deficit
from .processors import (
    AttenLimited,
    PassThrough,
    Processor,
    RuntimeProcessor,
    TorchStepProcessor,
    load_processor,
)
from .reference import REFERENCE_NAME, QuaternionLowpass, lowpass_taps
from .ring import SpscRing
from .view import render, run_session

__all__ = [
    "REFERENCE_NAME",
    "AttenLimited",
    "LiveOptions",
    "LiveSession",
    "PassThrough",
    "Processor",
    "QuaternionLowpass",
    "RuntimeProcessor",
    "SpscRing",
    "TorchStepProcessor",
    "list_devices",
    "load_processor",
    "lowpass_taps",
    "pipeline_deficit",
    "render",
    "run_session",
]
