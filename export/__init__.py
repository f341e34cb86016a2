"""qsa.export: streaming quaternion models to ONNX, ExecuTorch, LiteRT and TFLite-Micro.

Staged exporters (prepare -> export -> quantize -> lower -> serialize -> verify -> measure)
that run every artifact in its real runtime and compare it with PyTorch; one runtime
interface over torch / onnxruntime / executorch / litert / tflm; an export-time rewrite that
keeps the quaternion components stored once and fully int8; the DSP / network split of int8
artifacts (the network in the int8 graph, the STFT on the host DSP); target profiles with
budgets.
Heavy toolchains are imported inside the functions that use them, and the public names below
load their submodule on first use (PEP 562): running a cached artifact (``qsa live`` with an
exported runtime) imports ``qsa.export.runtimes`` without torch and the exporters.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING

from .errors import ExportError

# public name -> the submodule that defines it
_LAZY = {
    "EXPORTERS": "exporters",
    "FP32_STEP_RMS_TOL": "exporters",
    "INT8_SQNR_FLOOR_DB": "exporters",
    "PRECISIONS": "exporters",
    "TARGETS": "exporters",
    "ExportResult": "exporters",
    "export_model": "exporters",
    "sqnr_db": "exporters",
    "PROFILES": "profiles",
    "TargetProfile": "profiles",
    "check_budget": "profiles",
    "get_profile": "profiles",
    "ExportPReLU": "rewrite",
    "ExportQuaternionLayer": "rewrite",
    "mixing_matrix": "rewrite",
    "prepare_for_export": "rewrite",
    "KINDS": "runtimes",
    "Runtime": "runtimes",
    "load_runtime": "runtimes",
    "as_step_module": "step",
    "stream_torch": "step",
}

if TYPE_CHECKING:  # for type checkers and IDEs; at run time __getattr__ loads them
    from .exporters import (
        EXPORTERS,
        FP32_STEP_RMS_TOL,
        INT8_SQNR_FLOOR_DB,
        PRECISIONS,
        TARGETS,
        ExportResult,
        export_model,
        sqnr_db,
    )
    from .profiles import PROFILES, TargetProfile, check_budget, get_profile
    from .rewrite import ExportPReLU, ExportQuaternionLayer, mixing_matrix, prepare_for_export
    from .runtimes import KINDS, Runtime, load_runtime
    from .step import as_step_module, stream_torch


def __getattr__(name: str):
    sub = _LAZY.get(name)
    if sub is None:  # a submodule (``qsa.export.validate``), as when all were imported eagerly
        if name.startswith("_") or importlib.util.find_spec(f"{__name__}.{name}") is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return importlib.import_module(f".{name}", __name__)
    value = getattr(importlib.import_module(f".{sub}", __name__), name)
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "EXPORTERS",
    "FP32_STEP_RMS_TOL",
    "INT8_SQNR_FLOOR_DB",
    "KINDS",
    "PRECISIONS",
    "PROFILES",
    "TARGETS",
    "ExportError",
    "ExportPReLU",
    "ExportQuaternionLayer",
    "ExportResult",
    "Runtime",
    "TargetProfile",
    "as_step_module",
    "check_budget",
    "export_model",
    "get_profile",
    "load_runtime",
    "mixing_matrix",
    "prepare_for_export",
    "sqnr_db",
    "stream_torch",
]
