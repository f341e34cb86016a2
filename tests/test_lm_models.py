"""LM mixers: parameter matching, causality, shapes and gradients, cache decode == forward."""

import dataclasses

import pytest
import torch

from qsa.config import config_from_dict, config_to_dict
from qsa.errors import ConfigError
from qsa.models.lm import MIXERS, CausalLM, LMConfig, lm_config
from qsa.models.registry import build_model, preset_config

VARIANTS = [(m, {}) for m in MIXERS] + [
    ("quaternion", {"score": "hamilton"}),
    ("circuits", {"qk": "factorised", "ov": "collapsed"}),
    ("circuits", {"qk": "collapsed", "ov": "factorised"}),
    ("circuits", {"qk": "factorised", "ov": "factorised", "num_heads": 4}),
    ("kuramoto", {"kuramoto_steps": 3}),
    ("kuramoto", {"kuramoto_values": "drifted"}),  # the lagged form (lm-kuramoto-*-lagged)
    ("kuramoto", {"kuramoto_drift": "none", "kuramoto_gate": "positive"}),
    ("kuramoto", {"kuramoto_drift": "none", "kuramoto_values": "drifted", "kuramoto_steps": 1}),
]
IDS = [m + "".join(f"-{v}" for v in kw.values()) for m, kw in VARIANTS]


def tiny(mixer, **kw):
    base = dict(dim=32, num_layers=2, num_heads=2, ff_hidden=48, max_seq_len=24)
    return lm_config(mixer, "1m", **{**base, **kw})


@pytest.mark.parametrize("size", ["1m", "5m"])
def test_presets_parameter_matched_within_3_percent(size):
    counts = {}
    for mixer, kw in VARIANTS:
        if "num_heads" in kw:
            continue
        counts[mixer + str(kw)] = CausalLM(lm_config(mixer, size, **kw)).num_params()
    ref = counts["transformer{}"]
    target = 1e6 if size == "1m" else 5e6
    assert abs(ref - target) / target < 0.05
    for name, n in counts.items():
        assert abs(n - ref) / ref < 0.03, (name, n, ref)


def test_registry_presets_and_config_roundtrip():
    cfg = preset_config("lm-kuramoto-1m")
    assert cfg == lm_config("kuramoto", "1m")
    assert config_from_dict(config_to_dict(cfg)) == cfg
    assert isinstance(build_model(cfg), CausalLM)


@pytest.mark.parametrize("bad", [{"mixer": "rnn"}, {"dim": 30}, {"qk": "low-rank"},
                                 {"mixer": "quaternion", "dim": 36, "num_heads": 3},
                                 {"score": "four"}])
def test_config_rejects_bad_values(bad):
    with pytest.raises(ConfigError):
        LMConfig(**bad)
    with pytest.raises(dataclasses.FrozenInstanceError):
        LMConfig().dim = 3


@pytest.mark.parametrize(("mixer", "kw"), VARIANTS, ids=IDS)
def test_forward_backward_shapes(mixer, kw):
    torch.manual_seed(0)
    model = CausalLM(tiny(mixer, **kw))
    x = torch.randint(0, 256, (3, 17))
    logits = model(x)
    assert logits.shape == (3, 17, 256)
    logits.logsumexp(-1).mean().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    groups = [blk.mixer.circuit_groups() for blk in model.blocks]
    assert all(g["qk"] and g["ov"] for g in groups)


@pytest.mark.parametrize(("mixer", "kw"), VARIANTS, ids=IDS)
def test_causal(mixer, kw):
    torch.manual_seed(0)
    model = CausalLM(tiny(mixer, **kw)).eval()
    a = torch.randint(0, 256, (2, 20))
    b = a.clone()
    b[:, 12:] = torch.randint(0, 256, (2, 8))
    with torch.no_grad():
        la, lb = model(a), model(b)
    torch.testing.assert_close(la[:, :12], lb[:, :12], atol=1e-5, rtol=0)
    assert (la[:, 12:] - lb[:, 12:]).abs().max() > 1e-3


@pytest.mark.parametrize(("mixer", "kw"), VARIANTS, ids=IDS)
def test_cache_prefill_and_decode_equal_full_forward(mixer, kw):
    torch.manual_seed(0)
    model = CausalLM(tiny(mixer, **kw)).eval()
    x = torch.randint(0, 256, (2, 20))
    with torch.no_grad():
        full = model(x)
        cache = model.init_cache(2, 24)
        shapes = [c.shape for c in cache]
        out, cache = model.forward_cached(x[:, :7], torch.tensor(0), cache)
        outs = [out]
        for i in range(7, 20):
            out, cache = model.forward_cached(x[:, i:i + 1], torch.tensor(i), cache)
            outs.append(out)
            assert [c.shape for c in cache] == shapes  # static shapes
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=2e-5, rtol=1e-5)


def test_attention_recording_gives_distributions():
    model = CausalLM(tiny("kuramoto"))
    model.set_record_attention(True)
    model(torch.randint(0, 256, (1, 10)))
    for a in model.attention_maps():
        assert a.shape[-2:] == (10, 10)
        torch.testing.assert_close(a.sum(-1), torch.ones(a.shape[:-1]))
        assert a.triu(1).abs().max() < 1e-6  # causal


def test_quaternion_shared_path_equals_the_layer_attention():
    from qsa.models.lm.block import causal_mask

    torch.manual_seed(0)
    mixer = CausalLM(tiny("quaternion")).blocks[0].mixer
    q, k, v = (torch.randn(2, 2, 9, 4, 4) for _ in range(3))
    mask = causal_mask(9)
    ref = mixer.attn.out_proj(mixer.attn._merge(mixer.attn.attend(q, k, v, mask)))
    torch.testing.assert_close(mixer._attend(q, k, v, mask), ref, atol=1e-6, rtol=1e-5)
