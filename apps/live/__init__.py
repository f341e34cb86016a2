"""qsa.apps.live: live microphone enhancement (``qsa live``).

A sounddevice input stream and output stream whose callbacks only move samples through
preallocated lock-free rings; a worker thread resamples to the model rate and runs the
model's streaming step hop by hop (``Processor``), on torch or any qsa.export runtime.

Importing it loads no torch: the reference model (``QuaternionLowpass``, a torch module)
loads on first use, so that ``qsa live`` on a cached exported runtime starts without torch.
"""

from typing import TYPE_CHECKING

from .engine import LiveOptions, LiveSession, list_devices, pipeline_deficit
from .processors import (
    REFERENCE_NAME,
    AttenLimited,
    PassThrough,
    Processor,
    RuntimeProcessor,
    TorchStepProcessor,
    load_processor,
)
from .ring import SpscRing
from .view import render, run_session

if TYPE_CHECKING:
    from .reference import QuaternionLowpass, lowpass_taps


def __getattr__(name: str):
    if name in ("QuaternionLowpass", "lowpass_taps"):  # torch: loaded on first use
        from . import reference

        return getattr(reference, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
