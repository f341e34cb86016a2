"""MetricGAN training of the QC-GAN speech enhancers (``qsa train``).

Per step, on a batch of (noisy, clean) crops:

1. the generator enhances the noisy crops;
2. batch PESQ of (clean, enhanced) is submitted to a pool of worker processes;
3. generator update: magnitude + complex + time losses + the metric loss (D(clean, enh) -> 1);
4. discriminator update, when the PESQ results are back: D(clean, clean) -> 1,
   D(clean, enhanced) -> normalised PESQ, D(clean, noisy) -> normalised PESQ of the noisy
   input; samples whose PESQ failed are masked, not the batch.

Runs data-parallel under ``torchrun`` (gloo on CPU, nccl on GPU, DistributedSampler).
Checkpoints (safetensors + JSON: weights, optimizer moments, schedulers, RNG, position in the
epoch) are written atomically every ``ckpt_every`` steps and at each epoch's end; ``--resume``
continues exactly where a killed run stopped. Validation PESQ-WB and STOI every epoch; the
epoch that scores best on ``select`` (PESQ, or PESQ and STOI together) is kept as
``RUN/MODEL.best.qsa``; the final model is written as packed model files (fp32 and int8)
with a model card.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from qsa.errors import ConfigError, QsaError
from qsa.fileio import atomic_write_text, ensure_dir
from qsa.layers import set_quaternion_path

from ..models.discriminator import complex_loss, magnitude_loss
from ..models.pesq_loss import MIN_SAMPLES as _PESQ_MIN_SAMPLES
from ..models.pesq_loss import SR as _PESQ_SR
from .checkpoint import checkpoint_file, load_checkpoint, save_checkpoint
from .pesq_pool import PesqPool, normalise_pesq


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    model: str = "qcgan-35k"
    data: str = "synth:data/synth"
    out: str = "runs/qcgan-35k"
    epochs: int = 10
    max_steps: int = 0  # 0: no limit beyond epochs
    batch_size: int = 8
    segment_seconds: float = 2.0
    lr_g: float = 1e-3
    lr_d: float = 5e-4
    weight_decay: float = 0.0
    grad_clip: float = 5.0
    seed: int = 0
    pesq_workers: int = 2
    metric_gan: bool = True
    metric_start: int = 0  # global step from which the MetricGAN loss and D updates run
    d_warmup: int = 0  # first N steps update only D (G fixed): a fresh critic for a warm start
    val_items: int = 32
    ckpt_every: int = 100
    threads: int = 0  # 0: torch default
    init: str = ""  # start from these weights (a packed model file or a shipped model name)
    device: str = "auto"  # auto (cuda when available) | cpu | cuda
    mag_weight: float = 0.9  # compressed-magnitude MSE weight (LossConfig.magnitude_weight)
    complex_weight: float = 0.1  # compressed complex MSE weight (LossConfig.complex_weight)
    stoi_weight: float = 0.0  # differentiable-STOI loss weight (LossConfig.stoi_weight)
    sisdr_weight: float = 0.0  # -SI-SDR/10 loss weight (LossConfig.sisdr_weight)
    pesq_weight: float = 0.0  # differentiable PESQ-WB proxy loss weight (LossConfig)
    balance_weight: float = 0.0  # spectral-balance loss weight (LossConfig.balance_weight)
    # distillation: compressed magnitude + complex MSE (0.9 / 0.1, CMGAN's blend) against a
    # teacher's enhanced crop (scripts/make_teacher.py); items without a teacher skip it
    distill_weight: float = 0.0
    max_balance_db: float = 0.0  # >0: MODEL.best.qsa skips epochs whose validation balance
    #                              leaves +-this many dB in some band (0: no gate)
    band_limit: float = 0.0  # share of crops band-limited like a capture chain (CropDataset)
    clean_share: float = 0.0  # share of crops served without noise: clean in, clean target
    select: str = "pesq"  # which validation epoch MODEL.best.qsa keeps (SELECT_METRICS)
    model_set: tuple[str, ...] = ()  # KEY=VALUE changes to the preset's config (qsa.config)
    version: int = 1

    def __post_init__(self):
        if self.batch_size < 1 or self.epochs < 1:
            raise ConfigError("batch_size and epochs must be >= 1")
        if not 0.25 <= self.segment_seconds <= 30:
            raise ConfigError(f"segment_seconds={self.segment_seconds}; use 0.25..30 s")
        if self.lr_g <= 0 or self.lr_d <= 0:
            raise ConfigError("learning rates must be > 0")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"device={self.device!r}; expected auto, cpu or cuda")
        if self.d_warmup < 0:
            raise ConfigError(f"d_warmup={self.d_warmup}; expected a step count >= 0")
        if self.d_warmup > 0 and not self.metric_gan:
            raise ConfigError(f"d_warmup={self.d_warmup} trains only the discriminator, which "
                              "metric_gan=False turns off; drop one of them")
        for name in ("mag_weight", "complex_weight", "stoi_weight", "sisdr_weight",
                     "pesq_weight", "balance_weight", "distill_weight"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name}={getattr(self, name)}; loss weights must be >= 0 "
                                  "(0 turns the term off)")
        if self.pesq_weight > 0 and self.segment_seconds < PESQ_PROXY_MIN_SECONDS:
            raise ConfigError(
                f"pesq_weight={self.pesq_weight} with segment_seconds={self.segment_seconds}: "
                f"the PESQ proxy needs crops of at least {PESQ_PROXY_MIN_SECONDS:.2f} s "
                "(20 of its 16 ms frames); use --segment 0.5 or more, or --pesq-weight 0")
        if not 0.0 <= self.band_limit <= 1.0:
            raise ConfigError(f"band_limit={self.band_limit}; expected a share in 0..1 "
                              "(0: off; 0.5 band-limits half of the crops)")
        if not 0.0 <= self.clean_share < 1.0:
            raise ConfigError(f"clean_share={self.clean_share}; expected a share in 0..1 "
                              "(0: off; 0.1 serves one crop in ten without its noise)")
        if self.max_balance_db < 0:
            raise ConfigError(f"max_balance_db={self.max_balance_db}; expected dB > 0 "
                              "(6 keeps only epochs within +-6 dB per band) or 0 for no gate")
        if self.select not in SELECT_METRICS:
            raise ConfigError(f"select={self.select!r}; expected one of "
                              f"{', '.join(SELECT_METRICS)}")


# the PESQ proxy's shortest input (one 20-frame window of qsa.models.pesq_loss)
PESQ_PROXY_MIN_SECONDS = _PESQ_MIN_SAMPLES / _PESQ_SR


# how the best validation epoch is chosen: PESQ-WB alone, or PESQ-WB normalised to [0, 1]
# the way the discriminator sees it ((PESQ - 1) / 3.5) plus STOI, so that 0.035 PESQ counts
# as much as 0.01 STOI
SELECT_METRICS = ("pesq", "pesq+stoi")


def selection_score(select: str, rec: dict[str, Any]) -> float | None:
    """The validation record's score under ``select`` (None when a metric is missing)."""
    pesq = rec.get("val_pesq")
    if pesq is None or not math.isfinite(pesq):
        return None
    if select == "pesq":
        return float(pesq)
    stoi = rec.get("val_stoi")
    if stoi is None or not math.isfinite(stoi):
        return None
    return float(normalise_pesq(np.array([pesq]))[0] + stoi)


def _dist_info() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def resolve_device(name: str) -> torch.device:
    """``auto``: CUDA when available, else the CPU. Under torchrun each rank takes the GPU
    of its LOCAL_RANK."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError("--device cuda: this torch sees no CUDA device "
                          f"(torch {torch.__version__}); use --device cpu or auto")
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(dev)
    return dev


def _init_distributed(device: torch.device) -> bool:
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        return True
    return False


class _Batches:
    """Deterministic batches for (epoch, step): a seeded permutation, sharded per rank."""

    def __init__(self, dataset, batch_size: int, seed: int, rank: int, world: int):
        self.ds, self.bs, self.seed, self.rank, self.world = dataset, batch_size, seed, rank, world

    def steps_per_epoch(self) -> int:
        return max(1, len(self.ds) // (self.bs * self.world))

    def batch(self, epoch: int, step: int):
        g = torch.Generator().manual_seed(self.seed * 100003 + epoch)
        perm = torch.randperm(len(self.ds), generator=g).tolist()
        start = (step * self.world + self.rank) * self.bs
        idx = [perm[(start + i) % len(perm)] for i in range(self.bs)]
        self.ds.set_epoch(epoch)
        items = [self.ds[i] for i in idx]  # (noisy (N,), clean (N,)[, teacher, has]) crops
        noisy = torch.stack([it[0] for it in items])  # (B, N)
        clean = torch.stack([it[1] for it in items])
        if len(items[0]) == 2:
            return noisy, clean
        teacher = torch.stack([it[2] for it in items])
        has = torch.tensor([bool(it[3]) for it in items])
        return noisy, clean, teacher, has


def weights_digest(model: nn.Module) -> str:
    """sha256 over every parameter and buffer, in state-dict order."""
    import hashlib

    h = hashlib.sha256()
    for k, v in model.state_dict().items():
        h.update(k.encode())
        h.update(v.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class Trainer:
    def __init__(self, cfg: TrainConfig, dataset, val_pairs, generator: nn.Module,
                 discriminator: nn.Module, losses, progress: bool = True):
        self.cfg = cfg
        self.rank, self.world = _dist_info()
        self.out = Path(cfg.out)
        self.ds, self.val = dataset, val_pairs
        self.device = next(generator.parameters()).device
        self.G, self.D, self.losses = generator, discriminator.to(self.device), losses
        if self.world > 1:
            from torch.nn.parallel import DistributedDataParallel as DDP

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.G_ddp = DDP(self.G, device_ids=ids)
            self.D_ddp = DDP(self.D, device_ids=ids)
        else:
            self.G_ddp, self.D_ddp = self.G, self.D
        self.opt_g = torch.optim.AdamW(self.G.parameters(), cfg.lr_g, betas=(0.8, 0.99),
                                       weight_decay=cfg.weight_decay)
        self.opt_d = torch.optim.AdamW(self.D.parameters(), cfg.lr_d, betas=(0.8, 0.99))
        self.batches = _Batches(dataset, cfg.batch_size, cfg.seed, self.rank, self.world)
        total = cfg.epochs * self.batches.steps_per_epoch()
        if cfg.max_steps:
            total = min(total, cfg.max_steps)
        self.total_steps = total
        self.sched_g = torch.optim.lr_scheduler.LambdaLR(
            self.opt_g, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total) / total)) * 0.95
            + 0.05)
        self.pool = PesqPool(cfg.pesq_workers if cfg.metric_gan else 0)
        self.progress = progress and self.rank == 0
        self.history: list[dict[str, Any]] = []
        self.state = {"epoch": 0, "step_in_epoch": 0, "global_step": 0, "best_val": None}

    # -- checkpoints ---------------------------------------------------------------------
    @property
    def ckpt_path(self) -> Path:
        return self.out / "checkpoint.safetensors"

    def save(self) -> None:
        if self.rank != 0:
            return
        save_checkpoint(
            self.ckpt_path, {"generator": self.G, "discriminator": self.D},
            {"generator": self.opt_g, "discriminator": self.opt_d},
            extra={"state": self.state, "history": self.history,
                   "config": dataclasses.asdict(self.cfg)},
            schedulers={"generator": self.sched_g},
        )

    def remove_stale_temporaries(self) -> None:
        """A run killed mid-write leaves its temp file (never a partial checkpoint): drop it."""
        if self.rank == 0 and self.out.is_dir():
            for p in self.out.glob(".*.tmp"):
                p.unlink(missing_ok=True)

    def resume(self) -> bool:
        self.remove_stale_temporaries()
        if not self.ckpt_path.exists():
            return False
        extra = load_checkpoint(
            self.ckpt_path, {"generator": self.G, "discriminator": self.D},
            {"generator": self.opt_g, "discriminator": self.opt_d},
            schedulers={"generator": self.sched_g},
        )
        self.state, self.history = extra["state"], extra["history"]
        return True

    # -- one step ------------------------------------------------------------------------
    def _seed_step(self) -> None:
        # every step's randomness derives from (seed, global step, rank): exact resume
        torch.manual_seed(self.cfg.seed * 1_000_003 + self.state["global_step"] * 31 + self.rank)

    def step(self, noisy: torch.Tensor, clean: torch.Tensor, teacher: torch.Tensor | None = None,
             has_teacher: torch.Tensor | None = None) -> dict[str, float]:
        self._seed_step()
        L = self.losses
        noisy_np, clean_np = noisy.numpy(), clean.numpy()  # the batch arrives on the CPU
        noisy, clean = noisy.to(self.device), clean.to(self.device)
        g_on = self.state["global_step"] >= self.cfg.d_warmup
        with torch.set_grad_enabled(g_on):
            enh = self.G_ddp(noisy)  # (B, N)
        fut = None
        metric_on = self.cfg.metric_gan and self.state["global_step"] >= self.cfg.metric_start
        if metric_on:
            fut = self.pool.submit(clean_np, enh.detach().cpu().numpy())
            fut_noisy = self.pool.submit(clean_np, noisy_np)
        c_spec, e_spec = L.spec(clean), L.spec(enh)  # complex (B, F, T)
        if g_on:
            loss_g, parts = L.generator_loss(clean, enh, c_spec, e_spec)
            if self.cfg.distill_weight > 0 and has_teacher is not None and has_teacher.any():
                sel = has_teacher.to(self.device)
                t_spec = L.spec(teacher.to(self.device)[sel])
                distill = 0.9 * magnitude_loss(t_spec, e_spec[sel]) + 0.1 * complex_loss(
                    t_spec, e_spec[sel])
                loss_g = loss_g + self.cfg.distill_weight * distill
                parts["distill"] = float(distill.detach())
            if metric_on:
                self.D.requires_grad_(False)  # D is a fixed critic in the generator step
                d_fake = self.D(L.mag(c_spec), L.mag(e_spec))
                self.D.requires_grad_(True)
                metric = torch.mean((d_fake - 1.0) ** 2)
                loss_g = loss_g + L.cfg.metric_weight * metric
                parts["metric"] = float(metric.detach())
            self.opt_g.zero_grad(set_to_none=True)
            loss_g.backward()
            torch.nn.utils.clip_grad_norm_(self.G.parameters(), self.cfg.grad_clip)
            self.opt_g.step()
            self.sched_g.step()
            out = {"loss_g": float(loss_g.detach()), **parts}
        else:  # discriminator warm-up: the generator (and its schedule) wait
            out = {"d_warmup": 1.0}
        if metric_on:
            p_enh = np.array(fut if isinstance(fut, list) else fut.result())
            p_noisy = np.array(fut_noisy if isinstance(fut_noisy, list) else fut_noisy.result())
            cm, em = L.mag(c_spec).detach(), L.mag(e_spec).detach()
            nm = L.mag(L.spec(noisy)).detach()
            tgt_e = torch.from_numpy(normalise_pesq(p_enh)).float().to(self.device)
            tgt_n = torch.from_numpy(normalise_pesq(p_noisy)).float().to(self.device)
            b = cm.shape[0]
            d_all = self.D_ddp(torch.cat([cm, cm, cm]), torch.cat([cm, em, nm]))  # one forward
            d_real, d_enh, d_noisy = d_all[:b], d_all[b : 2 * b], d_all[2 * b :]
            loss_d = torch.mean((d_real - 1.0) ** 2)
            for pred, tgt in ((d_enh, tgt_e), (d_noisy, tgt_n)):
                ok = torch.isfinite(tgt)  # failed PESQ samples are masked out
                if ok.any():
                    loss_d = loss_d + torch.mean((pred[ok] - tgt[ok]) ** 2)
                else:  # keep every rank's graph identical for DDP
                    loss_d = loss_d + 0.0 * pred.sum()
            self.opt_d.zero_grad(set_to_none=True)
            loss_d.backward()
            self.opt_d.step()
            out["loss_d"] = float(loss_d.detach())
            ok = np.isfinite(p_enh)
            out["pesq"] = float(np.mean(p_enh[ok])) if ok.any() else float("nan")
            out["pesq_masked"] = int((~ok).sum())
        return out

    # -- validation ----------------------------------------------------------------------
    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        self.G.eval()
        refs, degs, noisy_list = [], [], []
        for noisy, clean in self.val[: self.cfg.val_items]:
            y = self.G(torch.from_numpy(noisy)[None].to(self.device))[0].cpu().numpy()
            refs.append(clean)
            degs.append(y)
            noisy_list.append(noisy)
        level = self._clean_level_change(refs[:8])
        self.G.train()
        pool = self.pool if self.cfg.metric_gan else PesqPool(0)
        p = pool(refs, degs)
        p0 = pool(refs, noisy_list)
        s, s0 = _stoi_all(refs, degs), _stoi_all(refs, noisy_list)
        ok = np.isfinite(p) & np.isfinite(p0)
        ok_s = np.isfinite(s) & np.isfinite(s0)
        nan = float("nan")
        bal = validation_balance_db(refs, degs)
        return {"val_pesq": float(np.mean(p[ok])), "val_pesq_noisy": float(np.mean(p0[ok])),
                "val_items": int(ok.sum()),
                "val_balance_db": [round(float(v), 2) for v in bal],
                "val_clean_level_db": level,
                "val_stoi": float(np.mean(s[ok_s])) if ok_s.any() else nan,
                "val_stoi_noisy": float(np.mean(s0[ok_s])) if ok_s.any() else nan}

    def _clean_level_change(self, cleans) -> list[float]:
        """dB level change of the generator's output on clean validation speech (input ==
        target, no noise): [mean, most negative, most positive]; 0 is a model that leaves
        clean speech alone (``--clean-share`` trains for it)."""
        if not cleans:
            return []
        ch = []
        for x in cleans:
            y = self.G(torch.from_numpy(x)[None].to(self.device))[0].cpu().numpy()
            px = float(np.mean(np.asarray(x, np.float64) ** 2)) + 1e-12
            py = float(np.mean(np.asarray(y, np.float64) ** 2)) + 1e-12
            ch.append(10 * math.log10(py / px))
        return [round(float(np.mean(ch)), 2), round(min(ch), 2), round(max(ch), 2)]

    # -- the loop ------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        from tqdm import tqdm

        cfg = self.cfg
        ensure_dir(self.out, "--out folder")
        spe = self.batches.steps_per_epoch()
        bar = tqdm(total=self.total_steps, initial=self.state["global_step"],
                   disable=not self.progress, desc=f"train {cfg.model}", unit="step")
        self.G.train()
        self.D.train()
        t0 = time.time()
        while self.state["epoch"] < cfg.epochs and self.state["global_step"] < self.total_steps:
            ep = self.state["epoch"]
            while (self.state["step_in_epoch"] < spe
                   and self.state["global_step"] < self.total_steps):
                m = self.step(*self.batches.batch(ep, self.state["step_in_epoch"]))
                self.state["step_in_epoch"] += 1
                self.state["global_step"] += 1
                bar.update(1)
                bar.set_postfix({k: f"{v:.3f}" for k, v in m.items()
                                 if k in ("loss_g", "loss_d", "pesq")})
                if self.state["global_step"] % cfg.ckpt_every == 0:
                    self.save()
            if self.state["step_in_epoch"] >= spe:
                v = self.validate() if self.rank == 0 and self.val else {}
                rec = {"epoch": ep, "global_step": self.state["global_step"],
                       "seconds": round(time.time() - t0, 1), **v}
                self.history.append(rec)
                if self.progress:
                    tqdm.write(json.dumps(rec))
                self._keep_best(rec)
                self.state["epoch"] += 1
                self.state["step_in_epoch"] = 0
                self.save()
        bar.close()
        self.save()
        if self.world > 1:  # replicas must agree: each rank records a digest of its weights
            atomic_write_text(self.out / f"replica-{self.rank}.sha256", weights_digest(self.G))
        if self.rank == 0:
            atomic_write_text(self.out / "history.json", json.dumps(self.history, indent=1))
        return {"state": self.state, "history": self.history}

    @property
    def best_path(self) -> Path:
        return self.out / f"{self.cfg.model}.best.qsa"

    def _keep_best(self, rec: dict[str, Any]) -> None:
        """The generator of the epoch with the best validation score so far (``select``), as
        a packed fp32 file next to the checkpoint (a GAN's last epoch is not always its
        best)."""
        sel = self.cfg.select
        score = selection_score(sel, rec)
        if self.rank != 0 or score is None:
            return
        bal = rec.get("val_balance_db")
        if self.cfg.max_balance_db > 0 and bal and max(abs(v) for v in bal) > \
                self.cfg.max_balance_db:
            return  # a tilted epoch is never kept, whatever its PESQ
        best = self.state.get("best_val")
        if best is not None:
            # a checkpoint written before "score" existed ranked by PESQ alone
            prev = best.get("score", best["val_pesq"] if sel == "pesq" else None)
            if prev is not None and score <= prev:
                return
        from qsa.quantize import save_packed

        self.state["best_val"] = {"select": sel, "score": score, "val_pesq": rec["val_pesq"],
                                  "val_stoi": rec.get("val_stoi"), "epoch": rec["epoch"],
                                  "global_step": rec["global_step"]}
        gen = copy.deepcopy(self.G).cpu().eval()
        card = model_card(self.cfg, rec["global_step"], rec["epoch"] + 1, rec, self.world)
        card["best_of_run"] = True
        save_packed(gen, self.best_path, precision="fp32", card=card)

    def close(self):
        self.pool.close()


def model_card(cfg: TrainConfig, steps: int, epochs: int, val: dict, world: int) -> dict:
    """The card a packed model file of this run carries (qsa.quantize.save_packed)."""
    card = {
        "model": cfg.model, "data": cfg.data, "steps": steps, "epochs": epochs,
        "batch_size": cfg.batch_size * world, "segment_seconds": cfg.segment_seconds,
        "seed": cfg.seed, "val_pesq_wb": val.get("val_pesq"),
        "val_pesq_wb_noisy": val.get("val_pesq_noisy"), "val_stoi": val.get("val_stoi"),
        "val_stoi_noisy": val.get("val_stoi_noisy"), "train_config": dataclasses.asdict(cfg),
    }
    if cfg.init:
        card["init"] = cfg.init
    return card


def validation_balance_db(refs, degs) -> np.ndarray:
    """Mean over items of the band balance (dB per band, qsa.models.discriminator)."""
    from ..models.discriminator import band_balance_db

    rows = [band_balance_db(torch.from_numpy(np.asarray(r, np.float64))[None],
                            torch.from_numpy(np.asarray(d, np.float64))[None])[0].numpy()
            for r, d in zip(refs, degs, strict=True)]
    return np.mean(rows, axis=0)


def _stoi_all(refs, degs) -> np.ndarray:
    """STOI of each (reference, degraded) pair; NaN where pystoi finds too little speech."""
    from qsa.metrics.scores import compute_metrics

    return np.asarray([compute_metrics(r, d, metrics=("stoi",))["stoi"]
                       for r, d in zip(refs, degs, strict=True)], dtype=np.float64)


def _val_pairs(pairs, n: int):
    out = []
    for p in list(pairs)[:n]:
        noisy, clean = p.load()
        out.append((noisy, clean))
    return out


def model_config(cfg: TrainConfig):
    """The generator's config: the preset's, with ``cfg.model_set``'s changes."""
    from qsa.config import config_with
    from qsa.models.registry import preset_config

    return config_with(preset_config(cfg.model), cfg.model_set)


def _set_keys(assignments) -> frozenset[str]:
    return frozenset(str(a).partition("=")[0].strip() for a in assignments)


# weights that may change shape under a named config change (``--set``), and how: the
# deep filter (``QCGANConfig.df_taps``) adds complex-decoder head channels after the old ones
_GROWING = {"df_taps": ("complex_decoder.head.weight", "complex_decoder.head.bias")}


def fit_state_dict(theirs: dict, ours: dict, changed: frozenset[str], source: str) -> dict:
    """``theirs`` for a model whose state dict is ``ours``: the same tensors with the same
    shapes, except that with ``df_taps`` in ``changed`` the complex decoder's head may grow
    (more deep-filter taps): its old output channels are copied (the residual and any old
    taps) and the new ones start at zero, so the model computes exactly what the old one did
    (zero taps). Anything else raises ConfigError."""
    growable = {k for name in changed for k in _GROWING.get(name, ())}
    bad = sorted(k for k in ours if k in theirs and theirs[k].shape != ours[k].shape)
    grown = [k for k in bad if k in growable and theirs[k].ndim == ours[k].ndim
             and theirs[k].shape[1:] == ours[k].shape[1:]
             and theirs[k].shape[0] < ours[k].shape[0]]  # fmt: skip
    if set(bad) - set(grown) or set(theirs) != set(ours):
        rest = sorted(set(bad) - set(grown))
        raise ConfigError(f"--init {source}: --set {sorted(changed)} changes the weights "
                          f"({', '.join(rest[:3]) or 'other tensors'}); fine-tuning needs the "
                          "same tensors (only a larger df_taps may add deep-filter taps): train "
                          "that config from scratch (no --init)")  # fmt: skip
    out = dict(theirs)
    for k in grown:
        new = torch.zeros_like(ours[k])
        new[: theirs[k].shape[0]] = theirs[k]
        out[k] = new
    return out


# config fields no weight depends on (the DSP's post-filter exponent): --init weights whose
# config differs only there are the same model; the run keeps its own (preset / --set) value,
# since the exponent is chosen after training (scripts/ship_weights.py --gain-exponent)
_DSP_ONLY = frozenset({"gain_exponent"})


def init_weights(gen: nn.Module, source: str, disc: nn.Module | None = None,
                 changed: frozenset[str] = frozenset()) -> str:
    """Start from ``source``: fine-tuning. A packed model file or a shipped model name gives
    the generator's weights; a training checkpoint (``RUN/checkpoint.safetensors`` or the
    ``RUN`` folder) gives the generator's *and* the discriminator's, so a new run (fresh
    optimisers, a new schedule) warm-starts without an untrained discriminator pulling the
    generator off for its first epochs. The configs must agree except in the fields named in
    ``changed`` (``qsa train --set``: e.g. a longer attention window over the same weights),
    and every tensor must keep its shape, except that ``--set df_taps=K`` (more deep-filter
    taps) loads the old complex-decoder head into its first channels and zeros the new taps
    (``fit_state_dict``). DSP-only fields (``gain_exponent``) may differ: the run keeps its
    own. Returns what was loaded ("generator" or
    "generator+discriminator")."""
    from qsa.hub import load

    ckpt = checkpoint_file(source)
    if ckpt is not None:
        modules = {"generator": gen}
        if disc is not None:
            modules["discriminator"] = disc
        grows = any(name in _GROWING for name in changed)
        try:
            if grows:  # the generator's tensors fitted here, the discriminator's as saved
                from qsa import safefile

                from .checkpoint import FORMAT

                tensors, _ = safefile.load(ckpt, kind=FORMAT)
                pre = "module.generator."
                theirs = {k[len(pre):]: v for k, v in tensors.items() if k.startswith(pre)}
                gen.load_state_dict(fit_state_dict(theirs, gen.state_dict(), changed, source))
                if disc is not None:
                    load_checkpoint(ckpt, {"discriminator": disc}, restore_rng=False)
            else:
                load_checkpoint(ckpt, modules, restore_rng=False)
        except QsaError as e:
            if isinstance(e, ConfigError):
                raise
            raise ConfigError(f"--init {source}: {e}; pass a checkpoint of a run of the same "
                              "model") from None
        return "+".join(modules)
    try:
        src = load(source, dequantize=True, allow_untrained=False)
    except (OSError, ValueError) as e:
        raise ConfigError(f"--init {source}: cannot be loaded ({e}); pass a packed model "
                          "file (.qsa), a shipped model name or a run's checkpoint") from None
    a, b = getattr(src, "config", None), getattr(gen, "config", None)
    differ = ({f.name for f in dataclasses.fields(a) if getattr(a, f.name) != getattr(b, f.name)}
              - _DSP_ONLY if type(a) is type(b) and a is not None else None)
    if differ is None or not differ <= changed:
        raise ConfigError(f"--init {source}: its config {a} differs from the model's {b}"
                          + (f" in {sorted(differ - changed)}" if differ else "")
                          + "; pass weights of the same model (--set may change only fields "
                          "that keep every weight's shape, or df_taps)")
    gen.load_state_dict(fit_state_dict(src.state_dict(), gen.state_dict(), changed, source))
    return "generator"


def train_from_config(cfg: TrainConfig, resume: bool = False, progress: bool = True):
    """Build data, models and losses from ``cfg``, train, write the packed model files."""
    from qsa.data.readers import CropDataset, parse_data_spec
    from qsa.models.registry import build_model
    from qsa.quantize import save_packed

    from ..models.discriminator import GeneratorLosses, LossConfig, MetricDiscriminator

    device = resolve_device(cfg.device)
    started = _init_distributed(device)
    rank, world = _dist_info()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    train_pairs = parse_data_spec(cfg.data, split="train")
    try:
        val_set = parse_data_spec(cfg.data, split="val")
    except Exception:
        val_set = parse_data_spec(cfg.data, split="test")
    dataset = CropDataset(train_pairs, cfg.segment_seconds, cfg.seed,
                          band_limit=cfg.band_limit, clean_share=cfg.clean_share,
                          teacher=cfg.distill_weight > 0)
    gen = build_model(model_config(cfg))
    disc = MetricDiscriminator()
    if cfg.init and not resume:
        init_weights(gen, cfg.init, disc, changed=_set_keys(cfg.model_set))
    # same function, 3-4x faster to train on a CPU; the path is not part of the weights, so
    # the files written below load (and export) on the packed path as before
    set_quaternion_path(gen, "dense")
    gen = gen.to(device)
    losses = GeneratorLosses(LossConfig(magnitude_weight=cfg.mag_weight,
                                        complex_weight=cfg.complex_weight,
                                        stoi_weight=cfg.stoi_weight,
                                        sisdr_weight=cfg.sisdr_weight,
                                        pesq_weight=cfg.pesq_weight,
                                        balance_weight=cfg.balance_weight))
    trainer = Trainer(cfg, dataset, _val_pairs(val_set, cfg.val_items) if rank == 0 else [],
                      gen, disc, losses, progress=progress)
    files = []
    try:
        if resume and not trainer.resume():
            raise ConfigError(f"--resume: no checkpoint in {cfg.out}")
        result = trainer.fit()
        if rank == 0:
            out = Path(cfg.out)
            last = trainer.history[-1] if trainer.history else {}
            card = model_card(cfg, trainer.state["global_step"], trainer.state["epoch"], last,
                              world)
            gen = gen.cpu().eval()
            for prec in ("fp32", "int8"):
                f = out / f"{cfg.model}.{prec}.qsa"
                save_packed(gen, f, precision=prec, card=card)
                files.append(str(f))
        result["files"] = files
        return result
    finally:
        trainer.close()
        if started:
            dist.destroy_process_group()
