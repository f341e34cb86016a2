"""MetricGAN training: a real (tiny) run through `qsa train`, exact resume after kill -9,
and data-parallel replicas under torchrun ending with identical weights."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

QSA = str(Path(sys.executable).with_name("qsa"))
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from qsa.data.synth import make_corpus

    out = tmp_path_factory.mktemp("synth") / "c"
    make_corpus(out, 0.01, seed=3, reverb=False, workers=0, progress=False)
    return out


def train_args(corpus, out, *extra):
    return [QSA, "train", "qcgan-35k", "--data", f"synth:{corpus}", "--out", str(out),
            "--epochs", "1", "--batch-size", "2", "--segment", "0.5", "--val-items", "2",
            "--pesq-workers", "0", "--threads", "1", "--no-progress", *extra]


def final_weights(out: Path):
    from qsa.quantize import read_packed

    tensors, meta = read_packed(out / "qcgan-35k.fp32.qsa")
    return tensors, meta


@pytest.mark.slow
def test_train_writes_packed_models_with_card(corpus, tmp_path):
    out = tmp_path / "run"
    r = subprocess.run(train_args(corpus, out, "--max-steps", "3", "--ckpt-every", "2"),
                       capture_output=True, text=True, env=ENV, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    tensors, meta = final_weights(out)
    assert meta["card"]["steps"] == 3 and meta["card"]["model"] == "qcgan-35k"
    import qsa

    m = qsa.load(out / "qcgan-35k.int8.qsa")
    y = m(torch.zeros(1, 1600))
    assert y.shape == (1, 1600) and torch.isfinite(y).all()
    # a second start without --resume/--force is refused with a clear message
    r2 = subprocess.run(train_args(corpus, out, "--max-steps", "3"), capture_output=True,
                        text=True, env=ENV, timeout=600)
    assert r2.returncode == 2 and "--resume" in r2.stderr
    # --init from the run (its checkpoint): a warm start takes the generator AND the trained
    # discriminator, not a fresh one that pulls the generator off for its first epochs
    from qsa.models.discriminator import MetricDiscriminator
    from qsa.models.registry import build_model, preset_config
    from qsa.train.checkpoint import load_checkpoint
    from qsa.train.se import init_weights

    g, d = build_model(preset_config("qcgan-35k")), MetricDiscriminator()
    assert init_weights(g, str(out), d) == "generator+discriminator"
    g2, d2 = build_model(preset_config("qcgan-35k")), MetricDiscriminator()
    load_checkpoint(out / "checkpoint.safetensors", {"generator": g2, "discriminator": d2},
                    restore_rng=False)
    for a, b in ((g, g2), (d, d2)):
        for (k, v), w in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
            assert torch.equal(v, w), k
    assert any(not torch.equal(v, w) for v, w in zip(
        d.state_dict().values(), MetricDiscriminator().state_dict().values(), strict=True))
    # the run folder or its checkpoint loads as the generator trained so far (what `qsa eval
    # RUN` and `qsa enhance --model RUN` score before the run has finished)
    for src in (out, out / "checkpoint.safetensors"):
        g3 = qsa.load(src)
        assert not g3.training
        for (k, v), w in zip(g3.state_dict().items(), g2.state_dict().values(), strict=True):
            assert torch.equal(v, w), k


@pytest.mark.slow
def test_resume_after_kill_matches_uninterrupted_run(corpus, tmp_path):
    steps = ["--max-steps", "4", "--ckpt-every", "1", "--metric-start", "1"]
    ref = tmp_path / "ref"
    subprocess.run(train_args(corpus, ref, *steps), check=True, env=ENV, timeout=600,
                   capture_output=True)
    killed = tmp_path / "killed"
    p = subprocess.Popen(train_args(corpus, killed, *steps), env=ENV,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ck = killed / "checkpoint.safetensors"
    t0 = time.time()
    while not ck.exists() and time.time() - t0 < 300:
        time.sleep(0.05)
    time.sleep(0.3)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert ck.exists()  # the last complete checkpoint (a kill mid-write leaves only a .tmp)
    from qsa import safefile
    from qsa.train.checkpoint import load_checkpoint  # noqa: F401  (it must stay loadable)

    safefile.load(ck, kind="qsa.checkpoint")
    r = subprocess.run(train_args(corpus, killed, *steps, "--resume"), env=ENV, timeout=600,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not list(killed.glob(".*.tmp"))  # resume cleared any temp file of the killed write
    a, ma = final_weights(ref)
    b, mb = final_weights(killed)
    assert ma["card"]["steps"] == mb["card"]["steps"] == 4
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.slow
def test_ddp_two_processes_end_with_identical_replicas(corpus, tmp_path):
    out = tmp_path / "ddp"
    cmd = [TORCHRUN, "--nproc-per-node", "2", "--master-port", "29517", "-m", "qsa.cli",
           *train_args(corpus, out, "--max-steps", "2")[1:]]
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    d0 = (out / "replica-0.sha256").read_text()
    d1 = (out / "replica-1.sha256").read_text()
    assert len(d0) == 64 and d0 == d1


def test_init_copies_shipped_weights_and_refuses_other_models(tmp_path):
    """--init (fine-tuning): the generator starts from the given weights exactly; weights of
    another model, or a file that is not a model, are refused with the reason."""
    import qsa
    from qsa.errors import ConfigError
    from qsa.models.registry import build_model, preset_config
    from qsa.train.se import init_weights

    gen = build_model(preset_config("qcgan-35k"))
    init_weights(gen, "qcgan-35k")
    shipped = qsa.load("qcgan-35k", dequantize=True)
    ref = shipped.state_dict()
    for k, v in gen.state_dict().items():
        assert torch.equal(v, ref[k]), k
    # a DSP-only field (the post-filter exponent) may differ; the run keeps its own value
    assert shipped.config.gain_exponent != 1.0 and gen.config.gain_exponent == 1.0
    with pytest.raises(ConfigError, match="differs from the model's"):
        init_weights(build_model(preset_config("qcgan-0.89m-causal")), "qcgan-35k")
    bad = tmp_path / "not-a-model.qsa"
    bad.write_bytes(b"nonsense")
    with pytest.raises(Exception, match="not-a-model.qsa"):
        init_weights(gen, str(bad))


def test_set_changes_the_config_and_init_keeps_the_weights():
    """--set KEY=VALUE: the preset's config with typed changes; --init may load weights into
    a config changed only in fields that keep every tensor's shape (a longer attention
    window), and refuses a change that is not named or that reshapes the weights."""
    import qsa
    from qsa.config import config_with
    from qsa.errors import ConfigError
    from qsa.models.registry import build_model, preset_config
    from qsa.train.se import TrainConfig, init_weights, model_config

    base = preset_config("qcgan-35k")
    cfg = model_config(TrainConfig(model="qcgan-35k", data="synth:x",
                                   model_set=("window=64", "enc_channels=8,8,16")))
    assert (cfg.window, cfg.enc_channels, cfg.n_fft) == (64, (8, 8, 16), base.n_fft)
    assert config_with(base, ["window=none", "causal=false"]).window is None
    for bad, said in ((["windows=3"], "no field 'windows'"), (["window=x"], "'x' is not"),
                      (["window"], "KEY=VALUE"), (["n_fft=100"], "n_fft=100")):
        with pytest.raises(ConfigError, match=said):
            config_with(base, bad)
    gen = build_model(config_with(base, ["window=64"]))
    init_weights(gen, "qcgan-35k", changed=frozenset({"window"}))
    ref = qsa.load("qcgan-35k", dequantize=True).state_dict()
    assert all(torch.equal(v, ref[k]) for k, v in gen.state_dict().items())
    with pytest.raises(ConfigError, match=r"in \['window'\]"):
        init_weights(build_model(config_with(base, ["window=64"])), "qcgan-35k")
    with pytest.raises(ConfigError, match="from scratch"):
        init_weights(build_model(config_with(base, ["enc_channels=8,8,16"])), "qcgan-35k",
                     changed=frozenset({"enc_channels"}))


def test_set_df_taps_init_adds_zero_taps_and_keeps_the_output(tmp_path):
    """--set df_taps=2 --init <a model without taps> (a shipped model or a run's checkpoint):
    the complex decoder's head keeps its old 2 channels, the 4 new (deep-filter tap) channels
    start at zero, so the new model computes exactly what the old one did; no other shape
    change is accepted, nor fewer taps."""
    import qsa
    from qsa.config import config_with
    from qsa.errors import ConfigError
    from qsa.models.discriminator import MetricDiscriminator
    from qsa.models.registry import build_model, preset_config
    from qsa.train.checkpoint import save_checkpoint
    from qsa.train.se import init_weights

    base = preset_config("qcgan-35k")
    torch.manual_seed(0)
    x = torch.randn(1, 20 * base.hop) * 0.1
    old = qsa.load("qcgan-35k", dequantize=True).eval()
    torch.manual_seed(1)
    # the shipped post-filter exponent too, so the outputs compare (a DSP-only field)
    gen = build_model(config_with(base, ["df_taps=2",
                                         f"gain_exponent={old.config.gain_exponent}"]))
    with torch.no_grad():  # not a fresh model's zero taps: the load must zero them
        gen.complex_decoder.head.weight.normal_()
    assert init_weights(gen, "qcgan-35k", changed=frozenset({"df_taps"})) == "generator"
    head = gen.complex_decoder.head
    assert head.weight.shape[0] == 6 and head.weight[2:].abs().max() == 0
    assert torch.equal(head.weight[:2], old.complex_decoder.head.weight)
    with torch.no_grad():
        y_old, y_new = old(x), gen.eval()(x)
    # the same function: a 1x1 conv with 6 outputs rounds its first 2 like the one with 2 up
    # to float32 summation order
    assert (y_new - y_old).abs().max() < 1e-6
    # from a run's checkpoint: the generator fitted, the discriminator as saved
    d0 = MetricDiscriminator()
    save_checkpoint(tmp_path / "checkpoint.safetensors", {"generator": old, "discriminator": d0})
    g2, d2 = build_model(gen.config), MetricDiscriminator()
    assert init_weights(g2, str(tmp_path), d2, changed=frozenset({"df_taps"})) == (
        "generator+discriminator")
    assert all(torch.equal(v, d0.state_dict()[k]) for k, v in d2.state_dict().items())
    with torch.no_grad():
        assert torch.equal(g2.eval()(x), y_new)
    # not named, fewer taps, or another reshaping change: refused with the reason
    with pytest.raises(ConfigError, match=r"in \['df_taps'\]"):
        init_weights(build_model(config_with(base, ["df_taps=2"])), "qcgan-35k")
    with pytest.raises(ConfigError, match="from scratch"):
        init_weights(build_model(config_with(base, ["df_taps=2", "enc_channels=8,8,16"])),
                     "qcgan-35k", changed=frozenset({"df_taps", "enc_channels"}))
    save_checkpoint(tmp_path / "t2" / "checkpoint.safetensors", {"generator": g2})
    with pytest.raises(ConfigError, match="complex_decoder.head"):
        init_weights(build_model(config_with(base, ["df_taps=1"])), str(tmp_path / "t2"),
                     changed=frozenset({"df_taps"}))


def test_differentiable_stoi_and_si_sdr_track_the_metrics(corpus):
    """The optional STOI and SI-SDR training losses compute the metrics they stand for: 1 -
    stoi_loss is pystoi's STOI within 0.02 on real synthetic-corpus pairs, -10 * si_sdr_loss
    is qsa.metrics' SI-SDR, and both give finite gradients to the enhanced wave."""
    import numpy as np

    from qsa.data.readers import read_synth
    from qsa.metrics.scores import si_sdr, stoi_score
    from qsa.models.discriminator import si_sdr_loss, stoi_loss

    pairs = [p.load() for p in read_synth(corpus, split="train")[:4]]
    checked = 0
    for noisy, clean in pairs:
        n = min(len(clean), 3 * 16000)
        noisy, clean = noisy[:n], clean[:n]
        try:
            ref = stoi_score(clean, noisy)
        except ValueError:
            continue  # too little speech for pystoi
        c, e = torch.from_numpy(clean)[None].double(), torch.from_numpy(noisy)[None].double()
        assert abs((1 - stoi_loss(c, e).item()) - ref) < 0.02, (ref, 1 - stoi_loss(c, e).item())
        assert np.isclose(-10 * si_sdr_loss(c, e).item(), si_sdr(clean, noisy), atol=1e-3)
        e.requires_grad_(True)
        (stoi_loss(c, e) + si_sdr_loss(c, e)).backward()
        assert torch.isfinite(e.grad).all() and e.grad.abs().sum() > 0
        checked += 1
    assert checked >= 2
    # identical waves: STOI 1 (loss 0); a silent clean item gives a zero, finite loss
    c = torch.from_numpy(pairs[0][1][: 2 * 16000])[None]
    assert stoi_loss(c, c.clone()).item() < 1e-4
    assert stoi_loss(torch.zeros(1, 16000), torch.randn(1, 16000)).item() == 0.0


def test_stoi_and_sisdr_weights_are_validated_and_reach_the_loss(corpus, tmp_path):
    """Negative weights are refused naming the flag's value; a positive weight adds the term
    to the generator loss (the parts dict reports it)."""
    from qsa.errors import ConfigError
    from qsa.models.discriminator import GeneratorLosses, LossConfig
    from qsa.train.se import TrainConfig

    with pytest.raises(ConfigError, match="stoi_weight=-0.1"):
        LossConfig(stoi_weight=-0.1)
    with pytest.raises(ConfigError, match="sisdr_weight"):
        TrainConfig(model="qcgan-35k", data=f"synth:{corpus}", out=str(tmp_path),
                    sisdr_weight=-1.0)
    clean, enh = torch.randn(2, 16000), torch.randn(2, 16000)
    base = GeneratorLosses(LossConfig())
    extra = GeneratorLosses(LossConfig(stoi_weight=0.2, sisdr_weight=0.01))
    _, parts0 = base.generator_loss(clean, enh)
    _, parts1 = extra.generator_loss(clean, enh)
    assert "stoi" not in parts0 and "sisdr" not in parts0
    assert parts1["stoi"] > 0.5 and parts1["sisdr"] > 0  # unrelated noise: low STOI, SDR < 0
    r = subprocess.run([QSA, "train", "qcgan-35k", "--data", f"synth:{corpus}", "--out",
                        str(tmp_path / "r"), "--stoi-weight", "-2"],
                       capture_output=True, text=True, env=ENV, timeout=300)
    assert r.returncode != 0 and "stoi_weight=-2" in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr


def test_d_warmup_trains_the_critic_only(corpus, tmp_path):
    """--d-warmup N: the first N steps update the discriminator while the generator stays
    exactly at its --init weights; the generator trains from step N on. The flag is refused
    without the MetricGAN it warms up."""
    from safetensors.torch import load_file

    from qsa.errors import ConfigError
    from qsa.models.registry import build_model, preset_config
    from qsa.train.se import TrainConfig, init_weights

    def run(steps):
        out = tmp_path / f"s{steps}"
        r = subprocess.run(train_args(corpus, out, "--init", "qcgan-35k", "--d-warmup", "2",
                                      "--max-steps", str(steps), "--pesq-workers", "0"),
                           capture_output=True, text=True, env=ENV, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        return load_file(str(out / "checkpoint.safetensors"))

    one, two, three = run(1), run(2), run(3)
    gen = build_model(preset_config("qcgan-35k"))
    init_weights(gen, "qcgan-35k")
    ref = gen.state_dict()
    g_keys = [k for k in two if k.startswith("module.generator.")]
    d_keys = [k for k in two if k.startswith("module.discriminator.")]
    assert g_keys and d_keys
    for k in g_keys:
        name = k.removeprefix("module.generator.")
        assert torch.equal(one[k], ref[name]) and torch.equal(two[k], ref[name]), k
    assert any(not torch.equal(one[k], two[k]) for k in d_keys)  # the critic learns
    assert any(not torch.equal(three[k], two[k]) for k in g_keys)  # step 3 trains G
    with pytest.raises(ConfigError, match="d_warmup=5"):
        TrainConfig(model="qcgan-35k", data=f"synth:{corpus}", out=str(tmp_path),
                    d_warmup=5, metric_gan=False)


@pytest.mark.slow
def test_best_validation_epoch_is_kept(corpus, tmp_path):
    """Each epoch's validation PESQ is compared with the best so far; the generator of the
    best epoch is written as MODEL.best.qsa (packed fp32, loadable, its card naming the epoch
    and score), and the checkpoint records which epoch that was, so --resume keeps it."""
    import json

    import qsa
    from qsa.quantize import read_packed
    from qsa.train.se import selection_score

    out = tmp_path / "run"
    r = subprocess.run(train_args(corpus, out, "--max-steps", "0")
                       + ["--epochs", "3", "--select", "pesq+stoi"],
                       capture_output=True, text=True, env=ENV, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    history = json.loads((out / "history.json").read_text())
    assert len(history) == 3
    for h in history:  # validation scores both metrics, for the model and the noisy input
        assert all(0 < h[k] < 1 for k in ("val_stoi", "val_stoi_noisy")), h
        assert all(1 <= h[k] <= 4.65 for k in ("val_pesq", "val_pesq_noisy")), h
        mean, lo, hi = h["val_clean_level_db"]  # clean speech in: the level change out
        assert lo <= mean <= hi and abs(mean) < 40, h
    best = max(history, key=lambda h: (h["val_pesq"] - 1) / 3.5 + h["val_stoi"])
    _, meta = read_packed(out / "qcgan-35k.best.qsa")
    card = meta["card"]
    assert card["best_of_run"] and card["val_pesq_wb"] == best["val_pesq"]
    assert card["val_stoi"] == best["val_stoi"]
    assert card["train_config"]["select"] == "pesq+stoi"
    assert card["steps"] == best["global_step"] and card["epochs"] == best["epoch"] + 1
    assert card["batch_size"] == 2 and card["segment_seconds"] == 0.5  # the final card's keys
    state = json.loads(_checkpoint_meta(out)["qsa"])["extra"]["state"]
    assert state["best_val"]["epoch"] == best["epoch"]
    assert state["best_val"]["score"] == pytest.approx(selection_score("pesq+stoi", best))
    m = qsa.load(out / "qcgan-35k.best.qsa")
    assert torch.isfinite(m(torch.zeros(1, 1600))).all()


def test_best_epoch_selection_rules(tmp_path):
    """--select pesq ranks epochs by validation PESQ-WB, pesq+stoi by (PESQ - 1) / 3.5 + STOI
    (so +0.01 STOI outweighs -0.03 PESQ); a best epoch recorded by a checkpoint from before
    the score existed still counts for pesq; an epoch without scores is never kept."""
    from qsa.errors import ConfigError
    from qsa.models.registry import build_model, preset_config
    from qsa.train.se import TrainConfig, Trainer, selection_score

    a = {"epoch": 0, "global_step": 10, "val_pesq": 1.80, "val_stoi": 0.840}
    b = {"epoch": 1, "global_step": 20, "val_pesq": 1.77, "val_stoi": 0.850}
    assert selection_score("pesq", a) > selection_score("pesq", b)
    assert selection_score("pesq+stoi", b) > selection_score("pesq+stoi", a)
    assert selection_score("pesq+stoi", {"val_pesq": 1.8}) is None
    assert selection_score("pesq", {"val_pesq": float("nan")}) is None
    with pytest.raises(ConfigError, match="select='stoi'.*pesq, pesq\\+stoi"):
        TrainConfig(select="stoi")

    def trainer(select, best=None):
        t = Trainer.__new__(Trainer)
        t.out = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        t.out.mkdir()
        t.cfg = TrainConfig(model="qcgan-35k", out=str(t.out), select=select)
        t.rank, t.world = 0, 1
        t.G = build_model(preset_config("qcgan-35k"))
        t.state = {"best_val": best}
        return t

    for select, winner in (("pesq", a), ("pesq+stoi", b)):
        t = trainer(select)
        for rec in (a, b, {"epoch": 2, "global_step": 30}):
            t._keep_best(rec)
        assert t.state["best_val"]["epoch"] == winner["epoch"], select
        assert t.best_path.exists()
    old = {"val_pesq": 1.85, "epoch": 5, "global_step": 50}  # written by the earlier trainer
    t = trainer("pesq", dict(old))
    t._keep_best(a)
    assert t.state["best_val"] == old and not t.best_path.exists()
    t = trainer("pesq+stoi", dict(old))  # no STOI recorded: the new rule starts afresh
    t._keep_best(a)
    assert t.state["best_val"]["epoch"] == 0


def _checkpoint_meta(out: Path) -> dict:
    from safetensors import safe_open

    with safe_open(str(out / "checkpoint.safetensors"), "pt") as f:
        return f.metadata()


def test_balance_loss_sees_a_muffled_output_and_gates_the_best_epoch(tmp_path):
    """--balance-weight: 0 for an output with the target's long-term spectrum (whatever its
    gain per frame), large for a low-passed one, refused when negative; --max-balance-db keeps
    a tilted epoch out of MODEL.best.qsa however good its PESQ."""
    import scipy.signal as ss

    from qsa.errors import ConfigError
    from qsa.models.discriminator import GeneratorLosses, LossConfig, balance_loss, band_balance_db
    from qsa.train.se import TrainConfig, Trainer

    g = torch.Generator().manual_seed(0)
    clean = torch.randn(2, 24000, generator=g, dtype=torch.float64)
    assert balance_loss(clean, clean.clone()).item() < 1e-12
    muffled = torch.from_numpy(ss.sosfilt(ss.butter(2, 1000, fs=16000, output="sos"),
                                          clean.numpy()))
    b = band_balance_db(clean, muffled)[0]
    assert b[0] > -1.5 and b[-1] < -20  # 200-400 Hz kept, 5-7 kHz down by > 20 dB
    assert balance_loss(clean, muffled).item() > 1.0
    assert abs(balance_loss(clean, 0.5 * clean).item() - (6.02 / 10) ** 2) < 1e-3
    with pytest.raises(ConfigError, match="balance_weight=-1"):
        LossConfig(balance_weight=-1)
    with pytest.raises(ConfigError, match="max_balance_db=-2"):
        TrainConfig(max_balance_db=-2)
    _, parts = GeneratorLosses(LossConfig(balance_weight=0.1)).generator_loss(
        clean.float(), muffled.float())
    assert parts["balance"] > 1.0

    class _T:  # the gate alone, on a bare Trainer
        cfg = TrainConfig(out=str(tmp_path), max_balance_db=6, select="pesq")
        rank, state = 0, {"best_val": None}
        best_path = tmp_path / "best.qsa"
    Trainer._keep_best(_T, {"val_pesq": 3.0, "epoch": 0, "global_step": 1,
                            "val_balance_db": [0.0, 7.5, -1.0]})
    assert _T.state["best_val"] is None and not _T.best_path.exists()


def test_a_mixture_of_corpora_alternates_and_trains(corpus, tmp_path):
    """--data A+B (kinded specs joined by '+'): one set holding every item of both, alternating,
    each named after its corpus; a folder whose name holds '+' stays a folder."""
    import os

    from qsa.data.readers import parse_data_spec

    one = parse_data_spec(f"synth:{corpus}", split="train")
    both = parse_data_spec(f"synth:{corpus}+real:{corpus}", split="train")
    assert len(both) == 2 * len(one)
    assert [p.name for p in both[:4]] == [f"synth:{one[0].name}", f"real:{one[0].name}",
                                          f"synth:{one[1].name}", f"real:{one[1].name}"]
    plus = tmp_path / "a+b"
    os.symlink(corpus / "test" / "noisy", plus)
    assert len(parse_data_spec(str(plus))) == len(parse_data_spec(f"synth:{corpus}"))
    r = subprocess.run(train_args(corpus, tmp_path / "run", "--max-steps", "2")[:4]
                       + [f"synth:{corpus}+synth:{corpus}"]
                       + train_args(corpus, tmp_path / "run", "--max-steps", "2")[5:],
                       capture_output=True, text=True, env=ENV, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]


def test_clean_share_serves_clean_crops_and_is_validated(corpus):
    """--clean-share P: about P of the crops come without their noise (input == target), the
    same crops on a re-run (drawn from seed, epoch, item), others as before; P outside 0..1 is
    refused with the option's name."""
    from qsa.data.readers import CropDataset, parse_data_spec
    from qsa.errors import ConfigError, QsaError
    from qsa.train.se import TrainConfig

    pairs = parse_data_spec(f"synth:{corpus}", split="train")
    plain = CropDataset(pairs, 0.5, seed=1)
    mixed = CropDataset(pairs, 0.5, seed=1, clean_share=0.5)
    again = CropDataset(pairs, 0.5, seed=1, clean_share=0.5)
    clean_items = []
    for i in range(len(pairs)):
        (xn, xc), (yn, yc) = plain[i], mixed[i]
        assert torch.equal(xc, yc)  # the target never changes
        if torch.equal(yn, yc):
            clean_items.append(i)
        else:
            assert torch.equal(xn, yn)  # a noisy crop is the plain one
        assert torch.equal(again[i][0], yn)
    assert clean_items and len(clean_items) < len(pairs), clean_items
    assert not any(torch.equal(plain[i][0], plain[i][1]) for i in range(len(pairs)))
    with pytest.raises(QsaError, match="clean_share=1.5"):
        CropDataset(pairs, 0.5, clean_share=1.5)
    with pytest.raises(ConfigError, match="clean_share=-0.1"):
        TrainConfig(model="qcgan-35k", data="x", clean_share=-0.1)
