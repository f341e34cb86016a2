"""qsa.export: streaming quaternion models to ONNX, ExecuTorch, LiteRT and TFLite-Micro.

Staged exporters (prepare -> export -> quantize -> lower -> serialize -> verify -> measure)
that run every artifact in its real runtime and compare it with PyTorch; one runtime
interface over torch / onnxruntime / executorch / litert / tflm; an export-time rewrite that
keeps the quaternion components stored once and fully int8; the DSP / network split of int8
artifacts (the network in the int8 graph, the STFT on the host DSP); target profiles with
budgets.
Heavy toolchains are imported inside the functions that use them.
"""

from .errors import ExportError
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
