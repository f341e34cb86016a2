"""qsa.quantize: packed int8 quaternion weights, a torchao-shaped API, the packed model file."""

from .api import (
    AOBaseConfig,
    Int8Config,
    Int8QuaternionLayer,
    int8_layers,
    quantize_,
    register_quantize_module_handler,
)
from .format import FORMAT_VERSION, load_packed, read_packed, save_packed
from .packing import (
    PackedQuaternionWeight,
    expand_packed,
    pack_quaternion_weights,
    pack_weight,
    quantize_per_channel,
    unpack,
    unpack_quaternion_weights,
)

__all__ = [
    "AOBaseConfig",
    "FORMAT_VERSION",
    "Int8Config",
    "Int8QuaternionLayer",
    "PackedQuaternionWeight",
    "expand_packed",
    "int8_layers",
    "load_packed",
    "pack_quaternion_weights",
    "pack_weight",
    "quantize_",
    "quantize_per_channel",
    "read_packed",
    "register_quantize_module_handler",
    "save_packed",
    "unpack",
    "unpack_quaternion_weights",
]
