"""The DSP / network split of a streaming step, for int8 artifacts.

A speech enhancer's step is ``DSP analysis -> neural network -> DSP synthesis``. On a
microcontroller the DSP (windowed real FFT, magnitude, power-law compression and their
inverses) runs in float or fixed point from a DSP library (CMSIS-DSP ``arm_rfft_fast_f32``
on Cortex-M4F/M7/M55, esp-dsp on the ESP32-S3), and only the network is an int8 graph, as in
TFLite-Micro's own audio examples (a separate signal front end feeding the int8 model).
Putting the DSP into the int8 graph would quantise log/exp/sqrt/div to 8 bits and store the
DFT bases (66K values for n_fft 256: more than the whole qcgan-35k) as graph constants.

A step module opts in with (see ``qsa.models.qcgan.StepModule``)::

    network() -> nn.Module       forward(x, *net_state) -> (*net_out, *new_net_state),
                                 with init_state(batch), example_input(batch), n_outputs
    n_dsp_state: int             how many leading step-state tensors the DSP owns
    analysis(frame, *dsp_state) -> (x, aux, dsp_state)
    synthesis(net_out, aux, dsp_state) -> (out, dsp_state)

``SplitRuntime`` wraps a runtime of the exported network with the host DSP (the model's own
modules, float32) so that it streams like any step runtime: ``step(frame, state)`` with the
full step state (DSP state first, then the network's). ``report.json`` records the split
(``io.split``) and the model config, so ``load_runtime`` rebuilds the DSP for a saved
artifact.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .errors import ExportError
from .runtimes import Runtime

if TYPE_CHECKING:
    import torch
    from torch import nn

# torch is imported where a step module is used (calibration, the torch DSP), not at import:
# a runtime wrapping a saved split artifact with a numpy host DSP runs without it

INT8_MASK_VALUE = -16.0  # attention's empty-cache mask in int8 graphs (exp(-16) ~ 1e-7)


def splittable(step: nn.Module) -> bool:
    return all(hasattr(step, a) for a in ("network", "analysis", "synthesis", "n_dsp_state"))


def stream_network_inputs(step: nn.Module, wave: torch.Tensor) -> list[tuple[torch.Tensor, ...]]:
    """Stream ``step`` over ``wave`` (T,) through the split path; the network's inputs
    ``(x, *net_state)`` at every hop (for calibration)."""
    import torch

    with torch.no_grad():
        return _stream_network_inputs(step, wave)


def _stream_network_inputs(step, wave):
    hop, k = step.hop, step.n_dsp_state
    state = tuple(step.init_state(1))
    dsp, net_state = state[:k], state[k:]
    net = step.network()
    inputs = []
    for t in range(wave.shape[-1] // hop):
        frame = wave[t * hop : (t + 1) * hop].reshape(1, hop).float()  # (1, hop)
        x, aux, dsp = step.analysis(frame, *dsp)
        inputs.append((x, *net_state))
        outs = net(x, *net_state)
        net_out, net_state = outs[: net.n_outputs], tuple(outs[net.n_outputs :])
        _, dsp = step.synthesis(net_out, aux, dsp)
    return inputs


class SplitRuntime(Runtime):
    """Host DSP around a runtime that runs the exported network: the step module's numpy
    ``host_dsp()`` when it has one (per hop ~40 us; the eager torch DSP costs ~1 ms of op
    overhead, a third of a live app's budget), else its torch ``analysis`` / ``synthesis``."""

    def __init__(self, network_runtime: Runtime, step: nn.Module):
        if not splittable(step):
            raise ExportError(f"{type(step).__name__} has no DSP / network split")
        self.network_runtime = network_runtime
        self.kind = network_runtime.kind
        self.step_module = step.eval()
        self.n_dsp = step.n_dsp_state
        self.n_outputs = step.network().n_outputs
        self.host_dsp = step.host_dsp() if hasattr(step, "host_dsp") else None
        dsp_shapes = [tuple(s.shape) for s in step.init_state(1)[: self.n_dsp]]
        super().__init__(step.hop, dsp_shapes + list(network_runtime.state_shapes))

    def _run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        k = self.n_dsp
        frame, dsp, net_state = inputs[0], inputs[1 : 1 + k], inputs[1 + k :]
        if self.host_dsp is not None:
            x, aux, dsp = self.host_dsp.analysis(frame, *dsp)
            outs = self.network_runtime._run([x, *net_state])
            net_out = [np.asarray(o, np.float32) for o in outs[: self.n_outputs]]
            y, dsp = self.host_dsp.synthesis(net_out, aux, dsp)
            return [y, *dsp, *outs[self.n_outputs :]]
        import torch

        step = self.step_module
        with torch.no_grad():
            x, aux, dsp_t = step.analysis(
                torch.from_numpy(frame), *(torch.from_numpy(s) for s in dsp)
            )
            outs = self.network_runtime._run(
                [np.ascontiguousarray(x.numpy(), np.float32), *net_state]
            )
            net_out = tuple(
                torch.from_numpy(np.asarray(o, np.float32)) for o in outs[: self.n_outputs]
            )
            y, dsp_t = step.synthesis(net_out, aux, dsp_t)
        return [y.numpy(), *(s.numpy() for s in dsp_t), *outs[self.n_outputs :]]


def step_from_report(report: dict) -> nn.Module:
    """The step module whose DSP an artifact with ``io.split`` in its report needs (the DSP
    has no trained parameters: the model config is enough)."""
    from qsa.config import config_from_dict
    from qsa.models.registry import build_model

    cfg = report.get("model_config")
    if not cfg:
        raise ExportError(
            "this artifact holds only the network of a DSP / network split and its report.json "
            "has no model_config to rebuild the DSP from; re-export it with `qsa export`"
        )
    from .step import as_step_module

    return as_step_module(build_model(config_from_dict(cfg)))
