"""Training of the byte LMs: fixed token budget, AdamW with per-circuit groups, cosine schedule,
validation / test BPC, atomic safetensors checkpoints with exact resume, torchrun DDP.

Exactness: the batch of step s on rank r is drawn by ``numpy.random.default_rng([seed, s, r])``
and nothing else consumes randomness after the seeded init, so N steps in one go and N/2 steps +
resume + N/2 steps give bit-identical weights (tests/test_lm_train.py).

Checkpoint folder (each file written atomically; trainer.json last, naming the sha256 of the
other two so a half-written checkpoint is detected):
    model.safetensors      weights + {"format": "qsa-lm", "config": ...}
    optimizer.safetensors  AdamW state tensors state.<i>.<name> (i = parameter order)
    trainer.json           step, tokens seen, train config, history, file hashes

BPC (bits per byte) = mean next-byte cross-entropy in nats / ln 2, over non-overlapping windows
of ``ctx`` bytes (each window starts without context). Validation during training scores the
first ``VAL_BYTES`` (1 MiB) of the val split, or the whole split where it is smaller; the
slice is named in every record ("val_slice"), and a finished run also scores the whole val
split ("val_bpc_whole_split") and the whole test split ("test_bpc", "test_slice").
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .. import safefile
from ..config import config_from_dict, config_to_dict
from ..errors import ConfigError, FormatError, QsaError
from ..fileio import atomic_write_text, ensure_dir
from ..models.lm import CausalLM, LMConfig, lm_config, upgrade_config_dict
from .data import Corpus, load_corpus

MODEL_FORMAT = "qsa-lm"
OPTIM_FORMAT = "qsa-lm-optimizer"
TRAINER_VERSION = 1
VAL_BYTES = 1_048_576  # 1 MiB: the documented validation slice (the whole split if smaller)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    mixer: str = "transformer"
    size: str = "1m"
    data: str = "text"
    tokens: int = 1_000_000
    seed: int = 0
    batch: int = 16
    ctx: int = 256
    lr: float = 3e-3
    min_lr_frac: float = 0.1
    warmup: int = 100
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    qk_lr_mult: float = 1.0
    ov_lr_mult: float = 1.0
    eval_every: int = 200
    # validation during training: the first eval_bytes of the val split (0: all of it), named
    # in every record by ``eval_slice_name``; the final record also has the whole val split
    eval_bytes: int = VAL_BYTES
    test_bytes: int = 0  # 0: the whole test split
    model_overrides: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self):
        if self.eval_bytes < 0 or self.test_bytes < 0:
            raise ConfigError("eval_bytes and test_bytes must be >= 0 (0: the whole split)")
        for name in ("tokens", "batch", "ctx", "eval_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 1")
        if self.lr <= 0 or self.qk_lr_mult <= 0 or self.ov_lr_mult <= 0:
            raise ConfigError("lr and the circuit multipliers must be > 0")
        if not 0 <= self.min_lr_frac <= 1:
            raise ConfigError(f"min_lr_frac={self.min_lr_frac} must be in [0, 1]")

    @property
    def steps(self) -> int:
        return max(1, math.ceil(self.tokens / (self.batch * self.ctx)))

    def model_config(self) -> LMConfig:
        kw = dict(self.model_overrides)
        kw.setdefault("max_seq_len", self.ctx)
        return lm_config(self.mixer, self.size, **kw)

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["model_overrides"] = [list(kv) for kv in self.model_overrides]
        return d

    @classmethod
    def from_json(cls, d: dict) -> TrainConfig:
        d = dict(d)
        d["model_overrides"] = tuple(tuple(kv) for kv in d.get("model_overrides", ()))
        return cls(**d)


# -- pieces ------------------------------------------------------------------------------------


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up to lr, then cosine decay to min_lr_frac * lr at the last step."""
    total = cfg.steps
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = (step - cfg.warmup) / max(1, total - cfg.warmup)
    return cfg.lr * (cfg.min_lr_frac + (1 - cfg.min_lr_frac) * 0.5 * (1 + math.cos(math.pi *
                                                                                 frac)))


def decayed_parameters(model: torch.nn.Module) -> set[int]:
    """ids of the parameters weight decay applies to, chosen by role: the weight of a map
    (Linear, Embedding, QuaternionLinear). Norm gains, biases and scalar-like parameters such
    as the Kuramoto step sizes (step_rho, (S, H, 1, 1)) are not decayed: pulling them toward 0
    changes what the layer computes (softplus(0) for a step size), not just its scale."""
    from ..layers import QuaternionLinear

    maps = (torch.nn.Linear, torch.nn.Embedding, QuaternionLinear)
    return {id(m.weight) for m in model.modules() if isinstance(m, maps)}


def build_optimizer(model: CausalLM, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW groups: qk circuit, ov circuit, other maps (decayed), the rest (not decayed; see
    ``decayed_parameters``). A circuit's LR multiplier scales its learning rate only: its group's
    weight decay is divided by the multiplier, so the decoupled decay per step (AdamW applies
    lr * weight_decay) is lr * cfg.weight_decay in every group."""
    circuits: dict[int, str] = {}
    for blk in model.blocks:
        for group, params in blk.mixer.circuit_groups().items():
            for p in params:
                circuits[id(p)] = group
    decayed = decayed_parameters(model)
    buckets: dict[str, list] = {"qk": [], "ov": [], "decay": [], "no_decay": []}
    for p in model.parameters():
        if id(p) not in decayed:
            buckets["no_decay"].append(p)
        else:
            buckets[circuits.get(id(p), "decay")].append(p)
    mult = {"qk": cfg.qk_lr_mult, "ov": cfg.ov_lr_mult, "decay": 1.0, "no_decay": 1.0}
    return grouped_adamw(buckets, mult, lr=cfg.lr, weight_decay=cfg.weight_decay,
                         betas=(cfg.beta1, cfg.beta2), no_decay="no_decay")


def grouped_adamw(buckets: dict[str, list], lr_mult: dict[str, float], *, lr: float,
                  weight_decay: float, betas: tuple[float, float],
                  no_decay: str) -> torch.optim.AdamW:
    """AdamW with one group per non-empty bucket, named by its key and carrying its
    ``lr_mult`` (the schedule multiplies the group's LR by it). A group's weight decay is
    ``weight_decay / lr_mult``, so the decoupled decay per step (lr * weight_decay) is the same
    in every group; the ``no_decay`` bucket has none. Shared with ``qsa.lm.circuits_study``."""
    groups = [
        {"params": ps, "name": g, "lr_mult": lr_mult[g],
         "weight_decay": 0.0 if g == no_decay else weight_decay / lr_mult[g]}
        for g, ps in buckets.items() if ps
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=betas)


def get_batch(data: np.ndarray, step: int, rank: int, batch: int, ctx: int, seed: int):
    """(batch, ctx + 1) int64 windows at positions drawn from rng([seed, step, rank])."""
    if data.size < ctx + 2:
        raise QsaError(f"training split has {data.size} bytes, fewer than ctx + 2 = {ctx + 2}")
    rng = np.random.default_rng([seed, step, rank])
    starts = rng.integers(0, data.size - ctx - 1, size=batch)
    idx = starts[:, None] + np.arange(ctx + 1)[None, :]  # (B, ctx + 1)
    return torch.from_numpy(data[idx].astype(np.int64))


def eval_slice_name(split: str, data: np.ndarray, ctx: int, max_bytes: int = 0) -> str:
    """The bytes ``evaluate_bpc`` scores, e.g. "val[0:1048576] of 1413120 bytes, ctx 256"."""
    n = data.size if not max_bytes else min(data.size, max_bytes)
    used = ((n - 1) // ctx) * ctx + 1
    whole = " (whole split)" if used >= data.size - ctx else ""
    return f"{split}[0:{used}] of {data.size} bytes, ctx {ctx}{whole}"


@torch.no_grad()
def evaluate_bpc(model: CausalLM, data: np.ndarray, ctx: int, max_bytes: int = 0,
                 batch: int = 16) -> float:
    """Bits per byte over non-overlapping ctx-byte windows of the first max_bytes (0: all)."""
    dev = next(model.parameters()).device
    n = data.size if not max_bytes else min(data.size, max_bytes)
    n_win = (n - 1) // ctx
    if n_win < 1:
        raise QsaError(f"evaluation split has {data.size} bytes, fewer than ctx + 1 = {ctx + 1}")
    was = model.training
    model.eval()
    total, count = 0.0, 0
    arr = torch.from_numpy(data[: n_win * ctx + 1].astype(np.int64))
    for i in range(0, n_win, batch):
        j = min(n_win, i + batch)
        idx = torch.arange(i, j).view(-1, 1) * ctx + torch.arange(ctx + 1).view(1, -1)
        w = arr[idx].to(dev)  # (b, ctx + 1)
        logits = model(w[:, :-1])
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1),
                                 reduction="sum").item()
        count += w[:, 1:].numel()
    model.train(was)
    return total / count / math.log(2)


# -- model files and checkpoints ----------------------------------------------------------------


def save_model(model: CausalLM, path: str | os.PathLike, extra: dict | None = None) -> Path:
    meta = {"format": MODEL_FORMAT, "config": config_to_dict(model.config), **(extra or {})}
    return safefile.save(path, dict(model.state_dict()), meta)


def load_model(path: str | os.PathLike) -> tuple[CausalLM, dict]:
    """A trained LM from a model.safetensors file or a checkpoint folder."""
    path = Path(path)
    if path.is_dir():
        path = path / "model.safetensors"
    tensors, meta = safefile.load(path, kind=MODEL_FORMAT)
    cfg = config_from_dict(upgrade_config_dict(meta["config"]))
    if not isinstance(cfg, LMConfig):
        raise FormatError(f"{path} holds a {type(cfg).__name__}, not an LM")
    model = CausalLM(cfg)
    missing = set(model.state_dict()) ^ set(tensors)
    if missing:
        raise FormatError(f"{path}: tensors do not match the model ({sorted(missing)[:4]} ...)")
    model.load_state_dict(tensors)
    return model, meta


def _file_sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def save_checkpoint(folder: Path, model: CausalLM, opt: torch.optim.Optimizer, state: dict):
    ensure_dir(folder, "checkpoint folder")
    save_model(model, folder / "model.safetensors")
    params = [p for g in opt.param_groups for p in g["params"]]
    tensors = {}
    for i, p in enumerate(params):
        for k, v in opt.state.get(p, {}).items():
            tensors[f"state.{i}.{k}"] = v if torch.is_tensor(v) else torch.tensor(v)
    safefile.save(folder / "optimizer.safetensors", tensors,
                  {"format": OPTIM_FORMAT, "groups": [g["name"] for g in opt.param_groups],
                   "num_params": len(params)})
    state = dict(state, version=TRAINER_VERSION,
                 files={n: _file_sha(folder / n) for n in ("model.safetensors",
                                                           "optimizer.safetensors")})
    atomic_write_text(folder / "trainer.json", json.dumps(state, indent=1) + "\n")


def load_checkpoint(folder: Path, model: CausalLM, opt: torch.optim.Optimizer) -> dict:
    tj = folder / "trainer.json"
    if not tj.exists():
        raise QsaError(f"no checkpoint in {folder} (trainer.json missing); train without "
                       "--resume first")
    state = json.loads(tj.read_text())
    for name, sha in state.get("files", {}).items():
        if _file_sha(folder / name) != sha:
            raise FormatError(f"{folder / name} does not match trainer.json; the checkpoint is "
                              "incomplete or altered")
    tensors, _ = safefile.load(folder / "model.safetensors", kind=MODEL_FORMAT)
    model.load_state_dict(tensors)
    st, meta = safefile.load(folder / "optimizer.safetensors", kind=OPTIM_FORMAT)
    params = [p for g in opt.param_groups for p in g["params"]]
    if meta["num_params"] != len(params) or meta["groups"] != [g["name"] for g in
                                                               opt.param_groups]:
        raise FormatError(f"{folder}: optimizer state does not fit this model / config")
    for key, v in st.items():
        _, i, k = key.split(".", 2)
        p = params[int(i)]
        opt.state[p][k] = v if k == "step" else v.to(p.device)
    return state


# -- the loop ---------------------------------------------------------------------------------


def _dist():
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 1, 0
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo")
    return dist.get_world_size(), dist.get_rank()


def weights_sha(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def train(cfg: TrainConfig, out: str | os.PathLike | None = None, resume: bool = False,
          progress: bool = True, corpus: Corpus | None = None, max_steps: int | None = None,
          log=None, device: str = "cpu") -> dict:
    """Train to cfg.tokens (or stop after ``max_steps`` steps of that schedule); returns the
    result record (also written to OUT/result.json). Checkpoints go to OUT/checkpoint."""
    world, rank = _dist()
    if cfg.batch % world:
        raise ConfigError(f"batch={cfg.batch} must be divisible by the {world} DDP processes")
    corpus = corpus or load_corpus(cfg.data)
    torch.manual_seed(cfg.seed)
    model = CausalLM(cfg.model_config()).to(device)
    opt = build_optimizer(model, cfg)
    out_dir = Path(out) if out else None
    ckpt = out_dir / "checkpoint" if out_dir else None
    state = {"step": 0, "tokens": 0, "history": [], "train_config": cfg.to_json()}
    if resume:
        if ckpt is None:
            raise QsaError("--resume needs --out (the folder holding checkpoint/)")
        state = load_checkpoint(ckpt, model, opt)
        if TrainConfig.from_json(state["train_config"]) != cfg:
            raise ConfigError(f"{ckpt} was trained with a different config; resume with the "
                              "same arguments or start a new --out folder")
    ddp = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        ddp = DistributedDataParallel(model)
    total = cfg.steps
    stop = min(total, max_steps) if max_steps else total
    per_rank = cfg.batch // world
    bar = None
    if progress and rank == 0:
        from tqdm import tqdm

        bar = tqdm(total=total * cfg.batch * cfg.ctx, initial=state["tokens"], unit="tok",
                   unit_scale=True, desc=f"{cfg.mixer}-{cfg.size} s{cfg.seed}", smoothing=0.1)
    model.train()
    t_start, tok_start = time.perf_counter(), state["tokens"]
    loss_v = float("nan")
    for step in range(state["step"], stop):
        lr = lr_at(step, cfg)
        for g in opt.param_groups:
            g["lr"] = lr * g["lr_mult"]
        xb = get_batch(corpus.train, step, rank, per_rank, cfg.ctx, cfg.seed).to(device)
        logits = ddp(xb[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), xb[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        loss_v = loss.item()
        state["step"] = step + 1
        state["tokens"] += cfg.batch * cfg.ctx
        done = state["step"] == stop
        if bar is not None:
            el = time.perf_counter() - t_start
            bar.update(cfg.batch * cfg.ctx)
            bar.set_postfix(loss=f"{loss_v / math.log(2):.3f}bpc",
                            tok_s=f"{(state['tokens'] - tok_start) / max(el, 1e-9):.0f}")
        if state["step"] % cfg.eval_every == 0 or done:
            val = evaluate_bpc(model, corpus.val, cfg.ctx, cfg.eval_bytes)
            rec = {"step": state["step"], "tokens": state["tokens"], "lr": lr,
                   "train_bpc": loss_v / math.log(2), "val_bpc": val,
                   "val_slice": eval_slice_name("val", corpus.val, cfg.ctx, cfg.eval_bytes)}
            state["history"].append(rec)
            if bar is not None:
                bar.write(f"step {rec['step']} tokens {rec['tokens']} val_bpc {val:.4f}")
            if log:
                log(rec)
            if ckpt is not None and rank == 0:
                save_checkpoint(ckpt, model, opt, state)
    if bar is not None:
        bar.close()
    elapsed = time.perf_counter() - t_start
    result = {
        "mixer": cfg.mixer, "size": cfg.size, "seed": cfg.seed, "data": cfg.data,
        "params": model.num_params(), "steps": state["step"], "tokens": state["tokens"],
        "train_seconds": elapsed,
        "tokens_per_s": (state["tokens"] - tok_start) / max(elapsed, 1e-9),
        "val_bpc": state["history"][-1]["val_bpc"] if state["history"] else None,
        "val_slice": eval_slice_name("val", corpus.val, cfg.ctx, cfg.eval_bytes),
        "history": state["history"], "world_size": world,
        "corpus_manifest": corpus.manifest, "weights_sha256": weights_sha(model),
    }
    if state["step"] == total:
        result["val_bpc_whole_split"] = evaluate_bpc(model, corpus.val, cfg.ctx)
        result["test_bpc"] = evaluate_bpc(model, corpus.test, cfg.ctx, cfg.test_bytes)
        result["test_slice"] = eval_slice_name("test", corpus.test, cfg.ctx, cfg.test_bytes)
    if world > 1:
        import torch.distributed as dist

        shas: list = [None] * world
        dist.all_gather_object(shas, result["weights_sha256"])
        result["replica_weights_identical"] = len(set(shas)) == 1
        result["replica_weights_sha256"] = shas
    if out_dir is not None and rank == 0:
        atomic_write_text(out_dir / "result.json", json.dumps(result, indent=1) + "\n")
    result["model"] = model
    return result
