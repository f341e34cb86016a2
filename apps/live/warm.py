"""What a warm start of ``qsa live`` runs without torch: cached artifacts, checked once.

**ONNX.** ``OnnxRuntime`` checks an artifact before onnxruntime sees it, with the ``onnx``
package (protobuf parse, ``onnx.checker``: ~0.7 s of imports). A cache entry's bytes passed
that check when the entry was made; live.json records their sha256, and
:class:`VerifiedOnnxRuntime` loads bytes with that hash without checking them again.

**The host DSP of an int8 (DSP / network split) artifact.**

An int8 export holds only the network; the STFT analysis / synthesis around it runs on the
host (``qsa.export.split``). ``load_runtime`` builds that DSP from the torch model
(``StepModule.host_dsp()``), which costs ``qsa live`` a torch import (~3 s of CPU) on every
start. The DSP (``qsa.audio.host_dsp.HostDSP``, torch-free) has no trained parameters: its
numbers (FFT size, hop, the two windows, the compression exponent, the floor) are all it
needs. So when the live app exports an artifact it records them in the cache entry
(``spec_of``, in ``live.json``) and a warm start runs :class:`HostSplitRuntime`: the network
runtime (``load_runtime(..., host_dsp=False)``) between the same ``HostDSP``'s analysis and
synthesis, rebuilt from those numbers.

``spec_of`` records a spec only after checking, on random frames, that the numpy DSP built
from it gives bit-identical results to the model's own host DSP; otherwise (another model's
DSP, a changed ``HostDSP``) it returns None and the entry keeps loading through torch.
"""

from __future__ import annotations

import numpy as np

from qsa.audio.host_dsp import HostDSP
from qsa.errors import ConfigError
from qsa.export.errors import ExportError
from qsa.export.runtimes import OnnxRuntime, Runtime

SPEC_VERSION = 1
_SOURCE = ("qsa.audio.host_dsp", "HostDSP")  # the host DSP class a spec rebuilds


def dsp_from_spec(spec: dict) -> HostDSP:
    """The host DSP from the numbers a cache entry recorded (``spec_of``)."""
    try:
        if spec["version"] != SPEC_VERSION:
            raise ValueError(f"version {spec['version']!r}, expected {SPEC_VERSION}")
        return HostDSP(spec["n_fft"], spec["hop"], spec["window"], spec["synthesis_window"],
                       spec["compress"], spec["eps"], spec.get("df_taps", 0),
                       spec.get("gain_exponent", 1.0))  # fmt: skip
    except (KeyError, TypeError, ValueError, ConfigError) as e:
        raise ExportError(f"host DSP spec unreadable ({type(e).__name__}: {e}); delete the "
                          "cache entry") from None


class HostSplitRuntime(Runtime):
    """``qsa.audio.host_dsp.HostDSP`` around a runtime of an exported split network: streams
    audio like ``qsa.export.split.SplitRuntime`` with a numpy host DSP (same state layout: the DSP
    state first, then the network's), without the torch model."""

    def __init__(self, network_runtime: Runtime, spec: dict):
        self.network_runtime = network_runtime
        self.kind = network_runtime.kind
        self.source = network_runtime.source
        self.host_dsp = dsp_from_spec(spec)
        try:
            self.n_dsp, self.n_outputs = int(spec["n_dsp_state"]), int(spec["n_outputs"])
            dsp_shapes = [tuple(int(d) for d in s) for s in spec["dsp_state_shapes"]]
        except (KeyError, TypeError, ValueError) as e:
            raise ExportError(f"host DSP spec unreadable ({type(e).__name__}: {e})") from None
        if len(dsp_shapes) != self.n_dsp:
            raise ExportError(f"host DSP spec: {len(dsp_shapes)} state shapes for "
                              f"{self.n_dsp} DSP state tensors")  # fmt: skip
        # the hop is the DSP's: a network runtime's "hop" is its input's last dim (F)
        super().__init__(self.host_dsp.hop, dsp_shapes + list(network_runtime.state_shapes))

    def _run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        k = self.n_dsp
        frame, dsp, net_state = inputs[0], inputs[1 : 1 + k], inputs[1 + k :]
        x, aux, dsp = self.host_dsp.analysis(frame, *dsp)
        outs = self.network_runtime._run([x, *net_state])
        net_out = [np.asarray(o, np.float32) for o in outs[: self.n_outputs]]
        y, dsp = self.host_dsp.synthesis(net_out, aux, dsp)
        return [y, *dsp, *outs[self.n_outputs :]]


def spec_of(runtime: Runtime) -> dict | None:
    """The numbers of ``runtime``'s host DSP (a ``qsa.export.split.SplitRuntime`` whose step
    module has the qcgan numpy ``HostDSP``) as a JSON-able dict, checked: a
    ``HostDSP`` rebuilt from it equals the original bit for bit on a few hops of random
    input. None for any other runtime, or when they differ."""
    host = getattr(runtime, "host_dsp", None)
    if host is None or (type(host).__module__, type(host).__name__) != _SOURCE:
        return None
    try:
        spec = {
            "version": SPEC_VERSION,
            "source": ".".join(_SOURCE),
            "n_fft": int(host.n_fft),
            "hop": int(host.hop),
            "window": [float(v) for v in np.asarray(host.window, np.float32)],
            "synthesis_window": [float(v) for v in np.asarray(host.synthesis_window, np.float32)],
            "compress": float(host.c),
            "eps": float(host.eps),
            "n_dsp_state": int(runtime.n_dsp),
            "n_outputs": int(runtime.n_outputs),
            "dsp_state_shapes": [list(s) for s in runtime.state_shapes[: runtime.n_dsp]],
        }
        if getattr(host, "df_taps", 0):  # deep filter: the X_c history is a third DSP state
            spec["df_taps"] = int(host.df_taps)
        if getattr(host, "gain_exponent", 1.0) != 1.0:  # the post-filter
            spec["gain_exponent"] = float(host.gain_exponent)
        ours = dsp_from_spec(spec)
    except (AttributeError, TypeError, ValueError, ExportError):
        return None
    return spec if _same(host, ours, spec) else None


def _same(theirs, ours: HostDSP, spec: dict) -> bool:
    """Both DSPs on the same random frames and network outputs: bit-identical results."""
    rng = np.random.default_rng(0)
    hop, f = spec["hop"], ours.n_freq
    states = [[np.zeros(s, np.float32) for s in spec["dsp_state_shapes"]] for _ in range(2)]
    for t in range(4):
        frame = (0.3 * rng.standard_normal((1, hop))).astype(np.float32)
        if t == 0:
            frame[:] = 0.0  # the silent start: the eps floor
        net_out = [rng.uniform(0, 1.2, (1, 1, f)).astype(np.float32),
                   (0.1 * rng.standard_normal((1, 2 + 2 * ours.df_taps, 1, f))
                    ).astype(np.float32)]  # fmt: skip
        results = []
        for k, dsp in enumerate((theirs, ours)):
            x, aux, st = dsp.analysis(frame, *states[k])
            y, st = dsp.synthesis(net_out, aux, st)
            states[k] = list(st)
            results.append([x, *aux, y, *st])
        if not all(np.array_equal(a, b) and np.asarray(a).dtype == np.asarray(b).dtype
                   for a, b in zip(*results, strict=True)):  # fmt: skip
            return False
    return True


class VerifiedOnnxRuntime(OnnxRuntime):
    """``OnnxRuntime`` on a cached artifact whose bytes hash to ``sha256``, recorded in
    live.json after they passed ``check_artifact`` (protobuf parse, ``onnx.checker``, finite
    initialisers) in an earlier start: the same bytes, so the check is not run again and the
    ``onnx`` package is not imported. Other bytes (a damaged entry) are an ExportError."""

    def __init__(self, path, sha256: str, threads: int = 1):
        import hashlib
        from pathlib import Path


        self.source = str(path)
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            raise ExportError(f"{path}: {e}") from None
        if hashlib.sha256(data).hexdigest() != sha256:
            raise ExportError(f"{path}: sha256 differs from the one recorded when its bytes "
                              "were checked (the cache entry was altered)")  # fmt: skip
        self._open(path, data, threads)  # OnnxRuntime's session on the checked bytes
