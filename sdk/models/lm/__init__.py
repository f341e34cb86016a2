"""Byte-level causal LMs with swappable token mixers (transformer, kuramoto, circuits,
quaternion) on one block skeleton; presets ``lm-<mixer>-<size>`` for sizes 1m and 5m."""

from ..registry import register_model, register_preset
from .block import MIXERS, SIZES, CausalLM, LMConfig, lm_config

register_model(LMConfig, CausalLM)
for _m in MIXERS:
    for _s in SIZES:
        register_preset(f"lm-{_m}-{_s}", lambda m=_m, s=_s: lm_config(m, s))

__all__ = ["MIXERS", "SIZES", "CausalLM", "LMConfig", "lm_config"]
