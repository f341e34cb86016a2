"""Kuramoto attention as written in the paper: the update is sum_u A_tu sin(theta_u - theta_t),
each ablation switch changes only its component, parameter matching, version-1 files load as
the lagged form, phase diagnostics, and export of the paper form (slow)."""

import itertools
import json
import math

import pytest
import torch

from qsa.config import config_from_dict, config_to_dict
from qsa.errors import ConfigError
from qsa.lm.diagnostics import order_parameter, phase_stats, phase_table
from qsa.models.lm import KURAMOTO_LAGGED, CausalLM, LMConfig, lm_config, upgrade_config_dict
from qsa.models.lm.block import rope_angles
from qsa.models.registry import preset_config

TINY = dict(dim=32, num_layers=2, num_heads=2, ff_hidden=48, max_seq_len=24)
SWITCHES = {"kuramoto_values": "drifted", "kuramoto_drift": "none",
            "kuramoto_gate": "positive"}


def mixer_and_input(seed=0, t=13, **kw):
    torch.manual_seed(seed)
    model = CausalLM(lm_config("kuramoto", "1m", **{**TINY, **kw})).eval()
    with torch.no_grad():  # spread the step sizes so a wrong eta per head would show
        for blk in model.blocks:
            blk.mixer.step_rho.copy_(torch.randn_like(blk.mixer.step_rho))
    x = torch.randn(3, t, TINY["dim"])
    return model, model.blocks[0].mixer, x


def reference_step(theta, g, omega, eta, values="raw", drift="score"):
    """The layer's step written out term by term with loops over (t, u): attention weights from
    the gated cosine of the score phases, update from the value phases."""
    b, h, t, n = theta.shape
    pos = torch.arange(t, dtype=torch.float32)
    psi = theta + omega.view(1, 1, 1, n) * pos.view(1, 1, t, 1)  # theta + omega t
    sc = psi if drift == "score" else theta
    va = psi if values == "drifted" else theta
    scores = torch.full((b, h, t, t), -math.inf)
    for ti in range(t):
        for u in range(ti + 1):
            scores[:, :, ti, u] = (g[:, :, ti] * torch.cos(sc[:, :, u] - sc[:, :, ti])).sum(-1)
    a = torch.softmax(scores / math.sqrt(2 * n), dim=-1)  # (B, H, T, T)
    k = torch.zeros_like(theta)
    for ti in range(t):
        for u in range(ti + 1):
            k[:, :, ti] += a[:, :, ti, u, None] * torch.sin(va[:, :, u] - va[:, :, ti])
    return a, theta + eta * k


def run_mixer(model, mixer, x):
    """The mixer's first step: (A, theta^0, theta^1, g) recorded from a real forward."""
    t = x.shape[1]
    cos, sin = rope_angles(torch.arange(t), model.rope_dim, model.config.rope_base)
    mixer.record_attention, mixer.record_phases = True, True
    mixer.last_phases = mixer.last_local_order = None
    with torch.no_grad():
        mixer(x, cos, sin)
        g = mixer._gain(x)
    th = mixer.last_phases
    return mixer.last_attention, th[0], th[1], g


def omega(model):
    n = model.config.num_oscillators
    return model.config.rope_base ** (-torch.arange(n, dtype=torch.float32) * 2.0 / (2 * n))


@pytest.mark.parametrize("values,drift,gate", list(itertools.product(
    ["raw", "drifted"], ["score", "none"], ["signed", "positive", "off"])))
def test_update_equals_written_out_kuramoto_step(values, drift, gate):
    model, mixer, x = mixer_and_input(kuramoto_values=values, kuramoto_drift=drift,
                                      kuramoto_gate=gate, kuramoto_steps=1)
    a, th0, th1, g = run_mixer(model, mixer, x)
    if gate == "off":
        assert g is None
        g = torch.ones_like(th0)
    eta = torch.nn.functional.softplus(mixer.step_rho[0])  # (H, 1, 1)
    a_ref, th1_ref = reference_step(th0, g, omega(model), eta, values, drift)
    torch.testing.assert_close(a, a_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(th1, th1_ref, atol=1e-5, rtol=1e-5)


def test_paper_form_is_the_default_and_its_update_is_sum_a_sin():
    """The preset's update: theta^1 - theta^0 = eta sum_u A_tu sin(theta_u - theta_t), with no
    position term, on random inputs (a vectorised check besides the written-out one)."""
    assert preset_config("lm-kuramoto-1m").kuramoto_values == "raw"
    assert preset_config("lm-kuramoto-1m").kuramoto_drift == "score"
    model, mixer, x = mixer_and_input(seed=3, t=17, kuramoto_steps=1)  # A of the one step
    a, th0, th1, _ = run_mixer(model, mixer, x)
    diff = th0.unsqueeze(-3) - th0.unsqueeze(-2)  # (B, H, T, T, n): [t, u] = theta_u - theta_t
    k = (a.unsqueeze(-1) * torch.sin(diff)).sum(-2)  # (B, H, T, n)
    eta = torch.nn.functional.softplus(mixer.step_rho[0])
    torch.testing.assert_close(th1 - th0, eta * k, atol=1e-5, rtol=1e-4)
    # the lagged form's update is not this one (its phases wrap with position)
    lag_model, lag, _ = mixer_and_input(seed=3, t=17, kuramoto_steps=1, **KURAMOTO_LAGGED)
    _, l0, l1, _ = run_mixer(lag_model, lag, x)
    torch.testing.assert_close(l0, th0)
    assert (l1 - th1).abs().max() > 1e-3


def _weights_into(model, state):
    """Load the shared weights of ``state`` into ``model`` (switches may drop or add some)."""
    own = model.state_dict()
    model.load_state_dict({k: v for k, v in state.items() if k in own and
                           own[k].shape == v.shape}, strict=False)


@pytest.mark.parametrize("switch", sorted(SWITCHES) + ["gate_off", "steps_1"])
def test_each_switch_changes_only_its_component(switch):
    """Same weights, one switch flipped: the parameters, the attention weights of step 0 and
    the update rule change exactly as that switch says, nothing else."""
    # one coupling step, so the recorded attention is that step's (two for the steps switch)
    base, bm, x = mixer_and_input(seed=1, kuramoto_steps=2 if switch == "steps_1" else 1)
    kw = {"gate_off": {"kuramoto_gate": "off"}, "steps_1": {}}.get(
        switch, {switch: SWITCHES.get(switch)})
    var = CausalLM(lm_config("kuramoto", "1m", **{**TINY, "kuramoto_steps": 1, **kw})).eval()
    _weights_into(var, base.state_dict())
    vm = var.blocks[0].mixer
    with torch.no_grad():
        vm.step_rho.copy_(bm.step_rho[:1])
    a0, th0, th1, g0 = run_mixer(base, bm, x)
    a1, ph0, ph1, g1 = run_mixer(var, vm, x)
    torch.testing.assert_close(ph0, th0)  # the initial phases never depend on a switch
    bkeys, vkeys = set(base.state_dict()), set(var.state_dict())
    if switch == "gate_off":
        assert bkeys - vkeys == {f"blocks.{i}.mixer.qk_gate.weight" for i in range(2)}
        assert g1 is None
    else:
        assert bkeys == vkeys
    eta = torch.nn.functional.softplus(bm.step_rho[0])
    if switch == "kuramoto_values":  # same scores, update on drifted phases
        torch.testing.assert_close(a1, a0)
        _, ref = reference_step(th0, g0, omega(base), eta, values="drifted")
        torch.testing.assert_close(ph1, ref, atol=1e-5, rtol=1e-5)
        assert (ph1 - th1).abs().max() > 1e-3
    elif switch == "kuramoto_drift":  # other scores, same (raw) update rule given them
        assert (a1 - a0).abs().max() > 1e-3
        _, ref = reference_step(th0, g0, omega(base), eta, drift="none")
        torch.testing.assert_close(ph1, ref, atol=1e-5, rtol=1e-5)
    elif switch in ("kuramoto_gate", "gate_off"):  # other gains only
        assert (a1 - a0).abs().max() > 1e-3
        if g1 is not None:
            torch.testing.assert_close(g1, torch.nn.functional.softplus(g0))
        gain = g1 if g1 is not None else torch.ones_like(th0)
        _, ref = reference_step(th0, gain, omega(base), eta)
        torch.testing.assert_close(ph1, ref, atol=1e-5, rtol=1e-5)
    else:  # one coupling step instead of two: the first step is the same, and it is the last
        torch.testing.assert_close(ph1, th1)
        assert len(vm.last_phases) == 2 and len(bm.last_phases) == 3
        assert vm.step_rho.shape[0] == 1 and bm.step_rho.shape[0] == 2


@pytest.mark.parametrize("size", ["1m", "5m"])
def test_kuramoto_presets_parameter_matched_within_0_1_percent(size):
    ref = CausalLM(lm_config("transformer", size)).num_params()
    for kw in ({}, KURAMOTO_LAGGED, {"kuramoto_gate": "off"}, {"kuramoto_drift": "none"},
               {"kuramoto_steps": 1}, {"kuramoto_gate": "positive"}):
        n = CausalLM(lm_config("kuramoto", size, **kw)).num_params()
        assert abs(n - ref) / ref < 1e-3, (kw, n, ref)
    lagged = preset_config(f"lm-kuramoto-{size}-lagged")
    assert lagged == lm_config("kuramoto", size, **KURAMOTO_LAGGED)


def test_config_validates_switches_and_round_trips():
    for bad in ({"kuramoto_values": "projected"}, {"kuramoto_drift": "values"},
                {"kuramoto_gate": "negative"}, {"kuramoto_steps": 0}):
        with pytest.raises(ConfigError):
            LMConfig(mixer="kuramoto", **bad)
    cfg = lm_config("kuramoto", "1m", kuramoto_gate="off", kuramoto_steps=1)
    assert config_from_dict(config_to_dict(cfg)) == cfg


def test_version_1_file_loads_as_the_lagged_form(tmp_path):
    """A model saved before the switches existed (config version 1, no Kuramoto fields)
    loads as lm-kuramoto-*-lagged, the form it was trained as, with identical outputs."""
    from qsa import safefile
    from qsa.lm.train import MODEL_FORMAT, load_model

    torch.manual_seed(0)
    lagged = CausalLM(lm_config("kuramoto", "1m", **TINY, **KURAMOTO_LAGGED)).eval()
    d = config_to_dict(lagged.config)
    v1 = {**d, "version": 1, "fields": {k: v for k, v in d["fields"].items()
                                        if k not in KURAMOTO_LAGGED}}
    with pytest.raises(ConfigError, match="version"):
        config_from_dict(v1)  # the bare reader refuses; the LM loaders upgrade
    assert config_from_dict(upgrade_config_dict(v1)) == lagged.config
    safefile.save(tmp_path / "old.safetensors", dict(lagged.state_dict()),
                  {"format": MODEL_FORMAT, "config": v1})
    model, _ = load_model(tmp_path / "old.safetensors")
    assert model.config == lagged.config and model.config.kuramoto_values == "drifted"
    x = torch.randint(0, 256, (2, 20))
    with torch.no_grad():
        torch.testing.assert_close(model(x), lagged(x))
    # other mixers' version-1 configs simply gain the (unused) fields
    t = config_to_dict(lm_config("transformer", "1m"))
    t1 = {**t, "version": 1, "fields": {k: v for k, v in t["fields"].items()
                                        if not k.startswith("kuramoto_")}}
    assert config_from_dict(upgrade_config_dict(t1)).mixer == "transformer"


def test_phase_diagnostics():
    model, _, _ = mixer_and_input()
    x = torch.randint(0, 256, (4, 20))
    st = phase_stats(model, x)
    assert st["windows"] == 4 and len(st["layers"]) == 2
    for layer in st["layers"]:
        assert len(layer["order_parameter"]) == 3  # theta^0, after step 1, after step 2
        assert len(layer["local_order"]) == 2 and len(layer["circular_variance"]) == 2
        for r in layer["order_parameter"] + layer["local_order"]:
            assert all(0.0 <= v <= 1.0 + 1e-6 for v in r)
        assert layer["circular_variance_mean"] == pytest.approx(
            1 - layer["order_parameter_mean"][-1], abs=1e-6)
    assert all(blk.mixer.last_phases is None for blk in model.blocks)  # recording switched off
    assert "| 1 | 1 |" in phase_table(st, "val[0:80]")
    # identical phases: R = 1; phases spread evenly around the circle: R = 0
    assert order_parameter(torch.full((1, 2, 8, 3), 0.7)).tolist() == pytest.approx([1, 1])
    even = torch.linspace(0, 2 * math.pi, 9)[:-1].view(1, 1, 8, 1).expand(1, 2, 8, 3)
    assert order_parameter(even).tolist() == pytest.approx([0, 0], abs=1e-6)
    assert phase_stats(CausalLM(lm_config("transformer", "1m", **TINY)), x) is None


def test_eval_cli_reports_slice_and_phases(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from qsa.lm.train import save_model

    d = tmp_path / "corpus"
    d.mkdir()
    for i in range(40):
        (d / f"doc{i}.txt").write_text(f"phase {i} oscillators couple and drift " * 30)
    torch.manual_seed(0)
    save_model(CausalLM(lm_config("kuramoto", "1m", **{**TINY, "max_seq_len": 32})),
               tmp_path / "m.safetensors")
    qsa = str(Path(sys.executable).with_name("qsa"))
    r = subprocess.run([qsa, "lm", "eval", str(tmp_path / "m.safetensors"), "--data",
                        f"folder:{d}", "--split", "val", "--phase-windows", "2", "--json",
                        str(tmp_path / "e.json")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads((tmp_path / "e.json").read_text())
    assert out["slice"].startswith("val[0:") and "ctx 32" in out["slice"]
    assert out["slice"] in r.stdout and "circular variance" in r.stdout
    assert len(out["phases"]["layers"]) == 2 and out["phases"]["windows"] == 2
    assert out["phases"]["slice"].startswith("val[0:64]")


# -- export of the paper form (slow: ExecuTorch and LiteRT, fp32 and int8) --------------------


@pytest.mark.slow
@pytest.mark.timeout(1200)  # ExecuTorch int8 (PT2E calibration) took 708 s at load average 8
@pytest.mark.parametrize("target,precision", [("litert", "fp32"), ("litert", "int8"),
                                              ("executorch", "fp32"), ("executorch", "int8")])
def test_paper_form_exports_and_profiles(tmp_path, target, precision):
    """The paper form (keys and values cached per coupling step) exported, run on the real
    runtime against eager PyTorch, and profiled there."""
    from qsa.lm.export import export_lm
    from qsa.lm.profile import profile

    torch.manual_seed(0)
    model = CausalLM(lm_config("kuramoto", "1m", **{**TINY, "max_seq_len": 48}))
    assert model.config.kuramoto_values == "raw"
    assert len(model.init_cache(1, 48)) == 2 * 2 * 2  # keys and values per step and layer
    meta = export_lm(model, target, tmp_path, precision, prefill_len=16, cache_len=48,
                     verify_steps=32)
    v = meta["verification"]
    if precision == "fp32":
        assert v["greedy_tokens_equal"] and v["max_rel_logit_error"] < 1e-3
    else:
        assert v["tokens_matching"] + v["near_tie_flips"] == 32
        assert v["max_rel_logit_error"] <= 0.05
    prof = profile(str(tmp_path), runtime=target, pp=16, tg=8, reps=2)
    assert [row["test"] for row in prof["rows"]] == ["pp16", "tg8"]
    assert all(row["tokens_per_s"] > 0 for row in prof["rows"])
