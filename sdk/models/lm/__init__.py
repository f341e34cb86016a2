"""Byte-level causal LMs with swappable token mixers (transformer, kuramoto, circuits,
quaternion) on one block skeleton; presets ``lm-<mixer>-<size>`` for sizes 1m and 5m, plus
``lm-kuramoto-<size>-lagged`` (the earlier Kuramoto form, drifted phases as values)."""

from ..registry import register_model, register_preset
from .block import (
    KURAMOTO_LAGGED,
    MIXERS,
    SIZES,
    CausalLM,
    LMConfig,
    lm_config,
    upgrade_config_dict,
)

register_model(LMConfig, CausalLM)
for _m in MIXERS:
    for _s in SIZES:
        register_preset(f"lm-{_m}-{_s}", lambda m=_m, s=_s: lm_config(m, s))
for _s in SIZES:  # the earlier Kuramoto form: drifted phases as values (a lagged coupling)
    register_preset(f"lm-kuramoto-{_s}-lagged", lambda s=_s: lm_config("kuramoto", s,
                                                                        **KURAMOTO_LAGGED))

__all__ = ["KURAMOTO_LAGGED", "MIXERS", "SIZES", "CausalLM", "LMConfig", "lm_config",
           "upgrade_config_dict"]
