"""The streaming step contract every exporter works on.

A step module maps ``forward(frame (B, hop), *state) -> (out (B, hop), *new_state)`` with
``init_state(batch)`` returning a flat tuple of fixed-shape tensors and a ``hop`` attribute.
``as_step_module`` accepts such a module, or a model that offers one (``step_module()``,
``streaming()``), or a model with ``step(frame, *state)`` + ``init_state`` (wrapped here).
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

from .errors import ExportError


class _StepWrapper(nn.Module):
    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.hop = _hop_of(model)

    def init_state(self, batch: int = 1):
        return tuple(self.model.init_state(batch))

    def forward(self, frame, *state):
        return self.model.step(frame, *state)


def _hop_of(model: nn.Module) -> int:
    for obj in (model, getattr(model, "model", None), getattr(model, "config", None)):
        for name in ("hop", "hop_length", "hop_size", "frame_size"):
            v = getattr(obj, name, None) if obj is not None else None
            if isinstance(v, int) and v > 0:
                return v
    cfg = getattr(getattr(model, "model", None), "config", None)
    v = getattr(cfg, "hop", None)
    if isinstance(v, int):
        return v
    raise ExportError(
        f"{type(model).__name__} has no integer `hop` (samples per streaming step); give the "
        "step module a `hop` attribute"
    )


def as_step_module(model: nn.Module) -> nn.Module:
    """The step module of ``model`` (eval mode), checked against the contract above."""
    step = model
    for name in ("step_module", "streaming", "stream"):
        f = getattr(model, name, None)
        if callable(f) and not isinstance(f, nn.Module):
            try:
                if not inspect.signature(f).parameters:
                    step = f()
                    break
            except (TypeError, ValueError):
                continue
    if step is model and not hasattr(model, "init_state"):
        raise ExportError(
            f"{type(model).__name__} is not a streaming model: it needs init_state(batch) and "
            "forward(frame, *state) -> (out, *state) (or step(frame, *state), or step_module())"
        )
    if step is model and hasattr(model, "step") and _forward_takes_wave(model):
        step = _StepWrapper(model)
    if not hasattr(step, "hop"):
        step.hop = _hop_of(step)
    step.eval()
    state = tuple(step.init_state(1))
    if not all(isinstance(s, torch.Tensor) for s in state):
        raise ExportError("init_state(batch) must return a flat tuple of tensors")
    with torch.no_grad():
        out = step(torch.zeros(1, step.hop), *state)
    if not isinstance(out, tuple | list) or len(out) != 1 + len(state):
        raise ExportError(
            f"the step module returned {type(out).__name__} of length "
            f"{len(out) if isinstance(out, tuple | list) else 1}; expected (out, *new_state) with "
            f"{1 + len(state)} tensors"
        )
    for s_in, s_out in zip(state, out[1:], strict=True):
        if s_in.shape != s_out.shape:
            raise ExportError(
                f"state shape changes across a step ({tuple(s_in.shape)} -> "
                f"{tuple(s_out.shape)}); streaming state must have a fixed shape"
            )
    return step


def _forward_takes_wave(model: nn.Module) -> bool:
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return True
    return len([p for p in params.values() if p.kind != p.VAR_KEYWORD]) == 1


def example_inputs(step: nn.Module, batch: int = 1) -> tuple[torch.Tensor, ...]:
    return (torch.zeros(batch, step.hop), *step.init_state(batch))


@torch.no_grad()
def stream_torch(step: nn.Module, wave: torch.Tensor) -> tuple[torch.Tensor, list]:
    """Run ``step`` frame by frame over ``wave`` (T,) -> (output (T',), [(frame, state)])."""
    hop = step.hop
    n = wave.shape[-1] // hop
    state = tuple(step.init_state(1))
    outs, trace = [], []
    for t in range(n):
        frame = wave[t * hop : (t + 1) * hop].reshape(1, hop).float()  # (1, hop)
        trace.append((frame, state))
        y, *state = step(frame, *state)
        state = tuple(state)
        outs.append(y.reshape(hop))
    return torch.cat(outs) if outs else wave[:0], trace


def count_params(step: nn.Module) -> int:
    """Trainable parameters (quaternion layers counted as their 4 components)."""
    from qsa.quantize import Int8QuaternionLayer

    n = 0
    for m in step.modules():
        if isinstance(m, Int8QuaternionLayer):
            n += m.qweight.numel() + (m.layer.bias.numel() if m.layer.bias is not None else 0)
    seen = {
        id(p) for m in step.modules() if isinstance(m, Int8QuaternionLayer) for p in m.parameters()
    }
    return n + sum(p.numel() for p in step.parameters() if id(p) not in seen)
