"""Quaternion building blocks: Hamilton-product layers and quaternion self-attention."""

from .attention import QuaternionSelfAttention
from .hamilton import BASIS_PRODUCT, BLOCK, COMPONENTS, RECOMBINE, conjugate, hamilton_product
from .quaternion import (
    QUATERNION_LAYERS,
    QuaternionConv1d,
    QuaternionConv2d,
    QuaternionConvTranspose1d,
    QuaternionConvTranspose2d,
    QuaternionLinear,
    dense_inference_copy,
    inference_cached,
    is_quaternion_layer,
    quaternion_init_,
    set_quaternion_path,
)

__all__ = [
    "BASIS_PRODUCT",
    "BLOCK",
    "COMPONENTS",
    "QUATERNION_LAYERS",
    "RECOMBINE",
    "QuaternionConv1d",
    "QuaternionConv2d",
    "QuaternionConvTranspose1d",
    "QuaternionConvTranspose2d",
    "QuaternionLinear",
    "QuaternionSelfAttention",
    "conjugate",
    "dense_inference_copy",
    "hamilton_product",
    "inference_cached",
    "is_quaternion_layer",
    "quaternion_init_",
    "set_quaternion_path",
]
