"""Training checkpoints: model + optimizer + RNG state in one safetensors file, no pickle.

Tensors (module state, optimizer moment buffers, torch RNG state) go into the safetensors
payload; everything else (step counters, optimizer hyperparameters, Python/numpy RNG state,
the run config) into the verified JSON metadata block of ``qsa.safefile``. Written atomically,
so a ``kill -9`` mid-write leaves the previous checkpoint intact.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from qsa import safefile
from qsa.errors import FormatError

FORMAT = "qsa.checkpoint"
VERSION = 1


def _flatten_optimizer(prefix: str, sd: dict, tensors: dict, meta: dict) -> None:
    groups = []
    for g in sd["param_groups"]:
        groups.append({k: v for k, v in g.items()})
    state_meta = {}
    for pid, st in sd["state"].items():
        entry = {}
        for k, v in st.items():
            if torch.is_tensor(v):
                tensors[f"{prefix}.state.{pid}.{k}"] = v.detach().to("cpu", copy=True)
                entry[k] = {"tensor": True}
            else:
                entry[k] = {"value": v}
        state_meta[str(pid)] = entry
    meta[prefix] = {"param_groups": groups, "state": state_meta}


def _unflatten_optimizer(prefix: str, tensors: dict, meta: dict) -> dict:
    m = meta[prefix]
    state = {}
    for pid, entry in m["state"].items():
        st = {}
        for k, spec in entry.items():
            st[k] = tensors[f"{prefix}.state.{pid}.{k}"] if spec.get("tensor") else spec["value"]
        state[int(pid)] = st
    return {"state": state, "param_groups": m["param_groups"]}


def rng_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    py = random.getstate()
    np_state = np.random.get_state()
    t = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        t["rng.cuda"] = torch.cuda.get_rng_state()  # this process's current device
    return (
        t,
        {
            "python": [py[0], list(py[1]), py[2]],
            "numpy": [np_state[0], np_state[1].tolist(), *[int(x) for x in np_state[2:4]],
                      float(np_state[4])],
        },
    )


def set_rng_state(tensors: dict, meta: dict) -> None:
    torch.set_rng_state(tensors["rng.torch"])
    if "rng.cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["rng.cuda"])
    py = meta["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = meta["numpy"]
    np.random.set_state((n[0], np.array(n[1], dtype=np.uint32), n[2], n[3], n[4]))


def save_checkpoint(
    path: str | os.PathLike,
    modules: dict[str, nn.Module],
    optimizers: dict[str, torch.optim.Optimizer] | None = None,
    extra: dict[str, Any] | None = None,
    schedulers: dict[str, Any] | None = None,
) -> Path:
    """Write a checkpoint with each module's state_dict, optimizer and RNG state."""
    tensors = {f"module.{name}.{k}": v.detach().to("cpu", copy=True)
               for name, m in modules.items() for k, v in m.state_dict().items()}
    return _write(path, tensors, sorted(modules), extra, optimizers, schedulers)


def _write(path, tensors: dict[str, torch.Tensor], module_names: list[str],
           extra: dict[str, Any] | None, optimizers=None, schedulers=None) -> Path:
    """The checkpoint layout: module tensors (``module.NAME.KEY``) + optimiser moments +
    RNG state in the payload, the rest in the metadata."""
    meta: dict[str, Any] = {"format": FORMAT, "format_version": VERSION,
                            "extra": extra or {}, "modules": module_names}
    meta["optimizers"] = sorted(optimizers or {})
    for name, opt in (optimizers or {}).items():
        _flatten_optimizer(f"optim.{name}", opt.state_dict(), tensors, meta)
    meta["schedulers"] = {n: s.state_dict() for n, s in (schedulers or {}).items()}
    rt, rm = rng_state()
    tensors.update(rt)
    meta["rng"] = rm
    return safefile.save(path, tensors, meta)


def load_checkpoint(
    path: str | os.PathLike,
    modules: dict[str, nn.Module],
    optimizers: dict[str, torch.optim.Optimizer] | None = None,
    schedulers: dict[str, Any] | None = None,
    restore_rng: bool = True,
) -> dict[str, Any]:
    """Restore into ``modules`` / ``optimizers`` in place; returns the ``extra`` dict."""
    tensors, meta = safefile.load(path, kind=FORMAT)
    if meta.get("format_version") != VERSION:
        raise FormatError(f"{path}: checkpoint version {meta.get('format_version')!r}, "
                          f"this qsa reads {VERSION}")
    try:
        for name, m in modules.items():
            pre = f"module.{name}."
            sd = {k[len(pre):]: v for k, v in tensors.items() if k.startswith(pre)}
            m.load_state_dict(sd, strict=True)
        for name, opt in (optimizers or {}).items():
            opt.load_state_dict(_unflatten_optimizer(f"optim.{name}", tensors, meta))
        for name, s in (schedulers or {}).items():
            s.load_state_dict(meta["schedulers"][name])
    except (KeyError, RuntimeError, ValueError) as e:
        raise FormatError(f"{path}: checkpoint does not fit this model/run: {e}") from None
    if restore_rng:
        set_rng_state(tensors, meta["rng"])
    return meta["extra"]


def checkpoint_file(path: str | os.PathLike) -> Path | None:
    """The ``qsa train`` checkpoint that ``path`` names (a run folder or the checkpoint file
    itself), or None: a packed model file is a qsa safe file too, so the header's format tells
    them apart (read from the header only; the load that follows verifies the file)."""
    path = Path(path)
    if path.is_dir():
        path = path / "checkpoint.safetensors"
    if not path.is_file():
        return None
    meta = safefile.peek_meta(path)
    return path if meta is not None and meta.get("format") == FORMAT else None


def generator_from_checkpoint(path: str | os.PathLike) -> nn.Module:
    """The generator of a ``qsa train`` checkpoint (eval mode), built from the preset its
    run config names: what ``qsa eval`` / ``qsa.load`` score before a run has finished."""
    from qsa.models.registry import build_model, preset_config

    meta = safefile.peek_meta(path) or {}  # the one verified read is load_checkpoint's
    model = ((meta.get("extra") or {}).get("config") or {}).get("model")
    if not model:
        raise FormatError(f"{path}: this checkpoint names no model preset; load it with "
                          "qsa.train.checkpoint.load_checkpoint into the model it was made for")
    g = build_model(preset_config(model))
    load_checkpoint(path, {"generator": g}, restore_rng=False)
    return g.eval()


def average_checkpoints(
    paths: list[str | os.PathLike], out: str | os.PathLike
) -> Path:
    """Write ``out``: the element-wise mean of the module weights of ``paths`` (checkpoints of
    one run's trajectory, or of runs fine-tuned from one start), Polyak / SWA-style
    checkpoint averaging. Integer buffers are taken from the last checkpoint; optimiser
    state is not carried (the result is for ``--init``, ``qsa eval`` and packing). ``extra``
    (run config, state, history) is the last checkpoint's, with ``averaged_from`` added.
    Checkpoints that hold different modules, tensors or shapes are refused."""
    paths = [Path(p) for p in paths]
    if not paths:
        raise FormatError("average_checkpoints: no checkpoint given; pass two or more "
                          "checkpoint files of one model")
    acc: dict[str, torch.Tensor] = {}
    ref_path, ref = None, None
    for given in paths:
        p = checkpoint_file(given)
        if p is None:
            raise FormatError(f"{given}: not a qsa train checkpoint (a run folder or its "
                              "checkpoint.safetensors)")
        tensors, meta = safefile.load(p, kind=FORMAT)
        mods = {k: v for k, v in tensors.items() if k.startswith("module.")}
        if ref is None:
            ref_path, ref = p, {k: (v.shape, v.dtype) for k, v in mods.items()}
        elif {k: (v.shape, v.dtype) for k, v in mods.items()} != ref:
            diff = sorted(set(ref) ^ set(mods)) or sorted(
                k for k in mods if (mods[k].shape, mods[k].dtype) != ref[k])
            raise FormatError(f"{p} does not match {ref_path}: tensor {diff[0]!r} differs "
                              f"({len(diff)} in all); average checkpoints of one model only")
        for k, v in mods.items():
            if v.is_floating_point():
                acc[k] = acc.get(k, 0) + v.double()
            else:
                acc[k] = v.clone()
        last_meta = meta
    avg = {k: (v / len(paths)).to(ref[k][1]) if ref[k][1].is_floating_point else v
           for k, v in acc.items()}
    extra = dict(last_meta.get("extra") or {})
    extra["averaged_from"] = [str(p) for p in paths]
    return _write(out, avg, last_meta["modules"], extra)
