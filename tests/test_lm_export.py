"""LM export: prefill + decode with a static cache to ExecuTorch / LiteRT, run on the real
runtime and compared with eager PyTorch (greedy tokens and logits), then profiled."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from qsa.lm.export import ExportError, Runner, export_lm, prepare
from qsa.models.lm import CausalLM, lm_config

QSA = str(Path(sys.executable).with_name("qsa"))
TINY = dict(dim=32, num_layers=2, num_heads=2, ff_hidden=48, max_seq_len=48)


def tiny(mixer, **kw):
    torch.manual_seed(0)
    return CausalLM(lm_config(mixer, "1m", **{**TINY, **kw}))


@pytest.mark.parametrize("mixer", ["transformer", "kuramoto", "circuits", "quaternion"])
def test_prepare_keeps_the_function(mixer):
    model = tiny(mixer).eval()
    x = torch.randint(0, 256, (1, 20))
    with torch.no_grad():
        torch.testing.assert_close(prepare(model)(x), model(x), atol=1e-5, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("mixer", ["transformer", "kuramoto", "circuits", "quaternion"])
def test_executorch_fp32_matches_eager(tmp_path, mixer):
    meta = export_lm(tiny(mixer), "executorch", tmp_path, "fp32", prefill_len=16,
                     cache_len=48, verify_steps=32)
    v = meta["verification"]
    assert v["greedy_tokens_equal"] and v["max_rel_logit_error"] < 1e-3
    assert (tmp_path / meta["artifact"]).stat().st_size == meta["bytes"]
    saved = json.loads((tmp_path / f"lm-{mixer}-fp32.json").read_text())
    assert saved["cache_shapes"] == [list(c.shape) for c in tiny(mixer).init_cache(1, 48)]


@pytest.mark.slow
def test_executorch_int8_and_litert_fp32(tmp_path):
    meta = export_lm(tiny("transformer"), "executorch", tmp_path / "q", "int8", prefill_len=16,
                     cache_len=48, verify_steps=32)
    fp = export_lm(tiny("transformer"), "executorch", tmp_path / "f", "fp32", prefill_len=16,
                   cache_len=48, verify_steps=8)
    assert meta["bytes"] < fp["bytes"]
    lt = export_lm(tiny("kuramoto"), "litert", tmp_path / "l", "fp32", prefill_len=16,
                   cache_len=48, verify_steps=32)
    assert lt["verification"]["greedy_tokens_equal"]
    r = Runner(tmp_path / "l" / lt["artifact"])
    assert r.backend == "litert"


@pytest.mark.slow
def test_litert_fp32_and_int8_for_collapsed_circuits(tmp_path):
    """The collapsed QK circuit (one key head shared by all query heads) converts to LiteRT
    (its scores used to become a rank-4 BATCH_MATMUL the converter rejected), and LiteRT int8
    (dynamic-range int8 weights) is smaller than fp32 and verified against the fp32 model."""
    fp = export_lm(tiny("circuits"), "litert", tmp_path / "f", "fp32", prefill_len=16,
                   cache_len=48, verify_steps=32)
    q = export_lm(tiny("circuits"), "litert", tmp_path / "q", "int8", prefill_len=16,
                  cache_len=48, verify_steps=32)
    assert fp["verification"]["greedy_tokens_equal"]
    v = q["verification"]
    assert v["tokens_matching"] + v["near_tie_flips"] == 32 and v["max_rel_logit_error"] <= 0.05
    assert q["bytes"] < 0.8 * fp["bytes"]


@pytest.mark.slow
def test_verification_fails_loudly_on_a_wrong_artifact(tmp_path):
    from qsa.lm import export as ex

    a = export_lm(tiny("circuits"), "executorch", tmp_path, "fp32", prefill_len=16,
                  cache_len=48, verify_steps=4)
    other = prepare(tiny("circuits", rope_base=500.0))  # a different model than the artifact
    pre, dec = ex.Prefill(other), ex.Decode(other)
    with pytest.raises(ExportError, match="differs from eager"):
        ex.verify(Runner(tmp_path / a["artifact"]), pre, dec, other, 16, 48, 16, "fp32")


@pytest.mark.slow
def test_cli_export_and_profile(tmp_path):
    sets = [a for k, v in TINY.items() for a in ("--set", f"{k}={v}")]
    r = subprocess.run([QSA, "lm", "export", "transformer", "--target", "executorch", "--out",
                        str(tmp_path), "--prefill", "16", "--cache-len", "48",
                        "--verify-steps", "16", *sets], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    assert "16/16 greedy tokens equal" in r.stdout
    for runtime, art in (("executorch", str(tmp_path)), ("torch", "transformer")):
        r = subprocess.run([QSA, "lm", "profile", art, "--runtime", runtime, "--pp", "16",
                            "--tg", "16", "--reps", "5", "--out", str(tmp_path / runtime),
                            *sets], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        prof = json.loads((tmp_path / runtime / "profile.json").read_text())
        assert [row["test"] for row in prof["rows"]] == ["pp16", "tg16"]
        assert all(row["tokens_per_s"] > 0 and len(row["samples"]) == 5 for row in prof["rows"])
        for key in ("load_ms", "ttft_ms", "peak_rss_mb", "bytes", "params", "threads"):
            assert prof[key] > 0
        assert prof["stats"]["num_generated_tokens"] == 16
        ops = prof["op_breakdown"]
        assert ops and all(o["calls"] > 0 and o["self_ms"] >= 0 for o in ops)
        if runtime == "executorch":  # the runtime's own ETDump, XNNPACK's operators inside
            assert prof["op_breakdown_source"] == "ETDump"
            assert any("Fully Connected" in o["op"] for o in ops), ops
        assert "| tg16 |" in (tmp_path / runtime / "profile.md").read_text()
    assert prof["op_breakdown"]  # torch profiler rows on the torch runtime


@pytest.mark.slow
def test_an_artifact_that_fails_verification_is_marked_and_not_profiled(tmp_path, monkeypatch):
    """The real runtime runs the real artifact; only the tolerance is made impossible. Like
    `qsa export`, the artifact stays for inspection, its JSON says verified: false, and
    `qsa lm profile` refuses it."""
    from qsa.errors import QsaError
    from qsa.lm import export as ex
    from qsa.lm.profile import profile

    monkeypatch.setitem(ex.TOLERANCE, "fp32", -1.0)
    with pytest.raises(ExportError, match="kept for inspection.*do not deploy"):
        export_lm(tiny("transformer"), "executorch", tmp_path, "fp32", prefill_len=16,
                  cache_len=48, verify_steps=4)
    meta = json.loads((tmp_path / "lm-transformer-fp32.json").read_text())
    assert meta["verified"] is False and "differs from eager" in meta["error"]
    assert (tmp_path / "lm-transformer-fp32.pte").exists()
    with pytest.raises(QsaError, match="failed its verification"):
        profile(str(tmp_path), runtime="executorch", pp=16, tg=4, reps=1)


def test_verification_follows_eager_path_and_excuses_only_near_ties():
    """verify() feeds the artifact eager's greedy tokens (each side on its own cache). Here
    the 'artifact' is a real second model on the torch runtime: the same weights with 1%
    noise (int8-like rounding) passes the int8 check but not fp32's; a different model fails
    both."""
    import copy

    from qsa.lm import export as ex
    from qsa.lm.profile import TorchRunner

    model = prepare(tiny("transformer")).eval()
    pre, dec = ex.Prefill(model).eval(), ex.Decode(model).eval()
    noisy = copy.deepcopy(model)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in noisy.parameters():
            p.add_(0.01 * p.std() * torch.randn(p.shape, generator=g))
    runner = TorchRunner(noisy, threads=1)
    runner.path = "noisy-model"
    rep = ex.verify(runner, pre, dec, model, 16, 48, 32, "int8")
    assert rep["tokens_matching"] + rep["near_tie_flips"] == 32
    assert 1e-3 < rep["max_rel_logit_error"] <= 0.05
    with pytest.raises(ExportError, match="differs from eager"):
        ex.verify(runner, pre, dec, model, 16, 48, 32, "fp32")
    torch.manual_seed(1)  # other weights altogether
    other = TorchRunner(prepare(CausalLM(lm_config("transformer", "1m", **TINY))).eval(), 1)
    other.path = "other-model"
    with pytest.raises(ExportError, match="differs from eager"):
        ex.verify(other, pre, dec, model, 16, 48, 32, "int8")
