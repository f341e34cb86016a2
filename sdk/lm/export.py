"""Export of the byte LMs for on-device decoding: prefill + single-token decode with a
static-shape cache, to ExecuTorch (XNNPACK) or LiteRT, fp32 or int8, verified against eager.

int8: ExecuTorch takes PT2E static int8 (XNNPACK quantizer, per-channel weights, calibrated on
corpus prompts; verified against the converted PT2E model). LiteRT takes its dynamic-range
recipe for LMs (int8 per-channel weights of every FULLY_CONNECTED and the embedding, activations
quantised inside those kernels; verified against the fp32 model).

Stages (each a function): ``prepare`` (a frozen, export-friendly copy: Kuramoto step sizes
folded to constants, quaternion projections expanded to their equal dense Linear) ->
``export_programs`` (torch.export of the two methods, PT2E int8 when asked) -> ``lower`` (to a
.pte with methods "prefill" and "decode", or a .tflite with those two signatures) ->
``verify`` (runs the artifact along eager PyTorch's 64-step greedy path, each runtime on its
own cache: every logit within the tolerance of the precision and the same greedy token at
every step, or it raises; int8 may pick another token only where eager's top two logits are
closer than the logit error, a tie that rounding decides).

Method signatures (inputs int32 tokens / position, float32 caches; ``cache`` = the tuple of
``model.init_cache(1, cache_len)``, per layer: transformer/circuits/quaternion K and V,
Kuramoto one [cos, sin] phase tensor per coupling step):

    prefill(tokens (1, P) int32, *cache) -> (logits (1, P, 256), *cache)      positions 0..P-1
    decode(token (1, 1) int32, pos (1,) int32, *cache) -> (logits (1, 1, 256), *cache)

A prompt shorter than P is right-padded: the padding's cache slots are never read (the mask
hides slots after the current position) and decode overwrites them. The cache is written by
one-hot masks (multiply + add), never in place.
"""

from __future__ import annotations

import copy
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..errors import QsaError
from ..fileio import atomic_path, atomic_write_bytes, atomic_write_text, ensure_dir
from ..models.lm import CausalLM

TOLERANCE = {"fp32": 1e-3, "int8": 5e-2}  # max |logit diff| / max |logit|, artifact vs eager


class ExportError(QsaError):
    """The exported artifact does not reproduce the eager model."""


class Prefill(nn.Module):
    def __init__(self, model: CausalLM):
        super().__init__()
        self.model = model

    def forward(self, tokens, *cache):
        logits, new = self.model.forward_cached(tokens.to(torch.long),
                                                torch.zeros((), dtype=torch.long), cache)
        return (logits, *new)


class Decode(nn.Module):
    def __init__(self, model: CausalLM):
        super().__init__()
        self.model = model

    def forward(self, token, pos, *cache):
        logits, new = self.model.forward_cached(token.to(torch.long), pos.to(torch.long), cache)
        return (logits, *new)


def _dense_linear(layer) -> nn.Linear:
    lin = nn.Linear(layer.in_channels, layer.out_channels, bias=layer.bias is not None)
    with torch.no_grad():
        lin.weight.copy_(layer.dense_weight())
        if layer.bias is not None:
            lin.bias.copy_(layer.bias)
    return lin


def prepare(model: CausalLM) -> CausalLM:
    """An eval-mode copy whose graph lowers whole: folded Kuramoto step sizes, quaternion
    projections as their (mathematically equal) dense Linear layers."""
    from ..layers import QuaternionLinear
    from ..models.lm.kuramoto import KuramotoMixer

    m = copy.deepcopy(model).eval()
    for mod in list(m.modules()):
        if isinstance(mod, KuramotoMixer):
            mod.fold()
        for name, child in list(mod.named_children()):
            if isinstance(child, QuaternionLinear):
                setattr(mod, name, _dense_linear(child))
    for p in m.parameters():
        p.requires_grad_(False)
    return m


def example_inputs(model: CausalLM, prefill_len: int, cache_len: int):
    cache = model.init_cache(1, cache_len)
    pre = (torch.zeros(1, prefill_len, dtype=torch.int32), *cache)
    dec = (torch.zeros(1, 1, dtype=torch.int32), torch.tensor([prefill_len], dtype=torch.int32),
           *cache)
    return pre, dec


def calibration_prompts(n: int, length: int, seed: int = 0) -> list[torch.Tensor]:
    """Byte windows of the default English corpus (random bytes if it cannot be built)."""
    try:
        from .data import load_corpus

        data = load_corpus("text").val
    except Exception:  # noqa: BLE001 - calibration must not depend on the corpus being there
        data = np.random.default_rng(seed).integers(32, 127, 100_000).astype(np.uint8)
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, data.size - length - 1, n)
    return [torch.from_numpy(data[s:s + length].astype(np.int32)).view(1, -1) for s in starts]


def greedy(prefill_fn, decode_fn, prompt: torch.Tensor, cache, steps: int,
           feed: list[int] | None = None):
    """Run prefill then ``steps - 1`` decode steps; returns (the argmax token of every step,
    logits list). Each step is fed its own argmax, or with ``feed`` (teacher forcing along a
    given path) ``feed[i]``; the runtime keeps its own cache either way."""
    out = prefill_fn(prompt, *cache)
    logits, cache = out[0], tuple(out[1:])
    n = prompt.shape[1]
    tokens, all_logits = [int(logits[:, -1].argmax(-1))], [logits[:, -1]]
    for i in range(steps - 1):
        tok = tokens[i] if feed is None else feed[i]
        out = decode_fn(torch.tensor([[tok]], dtype=torch.int32),
                        torch.tensor([n + i], dtype=torch.int32), *cache)
        logits, cache = out[0], tuple(out[1:])
        tokens.append(int(logits[:, -1].argmax(-1)))
        all_logits.append(logits[:, -1])
    return tokens, all_logits


def export_programs(model: CausalLM, precision: str, prefill_len: int, cache_len: int,
                    target: str):
    """(prefill module, decode module, reference callables) ready for the lowering step."""
    pre_args, dec_args = example_inputs(model, prefill_len, cache_len)
    pre, dec = Prefill(model).eval(), Decode(model).eval()
    if precision == "fp32" or target == "litert":
        # LiteRT int8 is quantised after conversion (``lower_litert``): the reference stays
        # the fp32 model
        return pre, dec, pre_args, dec_args
    # ExecuTorch: PT2E static int8 with the XNNPACK quantizer, calibrated on corpus prompts
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True))
    pp = prepare_pt2e(torch.export.export(pre, pre_args).module(), quantizer)
    dp = prepare_pt2e(torch.export.export(dec, dec_args).module(), quantizer)
    for prompt in calibration_prompts(4, prefill_len):
        greedy(pp, dp, prompt, model.init_cache(1, cache_len), 16)
    return convert_pt2e(pp), convert_pt2e(dp), pre_args, dec_args


def lower_executorch(pre, dec, pre_args, dec_args, path: Path) -> None:
    """A .pte with "prefill" and "decode" methods, XNNPACK-delegated. The inputs (token,
    position and the caches) are not memory-planned: the runtime reads the caller's tensors
    in place instead of copying every cache into its arena on every step (Kuramoto 1m decode:
    1251 -> 1426 tokens/s)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes import MemoryPlanningPass

    eps = {"prefill": torch.export.export(pre, pre_args),
           "decode": torch.export.export(dec, dec_args)}
    cfg = ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(
        alloc_graph_input=False))
    prog = to_edge_transform_and_lower(eps, partitioner=[XnnpackPartitioner()]).to_executorch(cfg)
    atomic_write_bytes(path, prog.buffer)


def lower_litert(pre, dec, pre_args, dec_args, path: Path, precision: str = "fp32") -> None:
    """One .tflite with "prefill" and "decode" signatures. int8 is LiteRT's dynamic-range
    recipe for LMs (ai-edge-quantizer ``dynamic_wi8_afp32``): int8 per-channel weights,
    activations quantised on the fly inside the matmul kernels, the rest (RoPE, RMSNorm,
    the additive mask, the cache writes) float. A static int8 graph does not convert here:
    the converter rejects quantised TRANSPOSE / ONE_HOT / BATCH_MATMUL forms of these graphs."""
    import litert_torch

    conv = litert_torch.signature("prefill", pre, pre_args).signature("decode", dec, dec_args)
    edge = conv.convert()
    with atomic_path(path) as tmp:
        edge.export(str(tmp))
        if precision == "int8":
            from ai_edge_quantizer import Quantizer, recipe

            # the weight matmuls only: a BATCH_MATMUL with a constant operand (the cache
            # writes, RMSNorm's mean) would get an int8 lhs, which LiteRT's hybrid kernel
            # does not take (float lhs x int8 rhs only)
            base = recipe.dynamic_wi8_afp32()
            rec = [dict(r, operation=op) for op in ("FULLY_CONNECTED", "EMBEDDING_LOOKUP")
                   for r in base]
            qt = Quantizer(tmp.read_bytes())
            qt.load_quantization_recipe(rec)
            tmp.write_bytes(bytes(qt.quantize().quantized_model))


class Runner:
    """Loads an artifact and exposes ``prefill(*args)`` / ``decode(*args)`` returning tensors."""

    def __init__(self, path: str | os.PathLike, threads: int = 1):
        path = Path(path)
        if path.suffix == ".pte":
            import executorch.extension.pybindings.portable_lib as pl
            from executorch.runtime import Runtime

            if threads:
                pl._unsafe_reset_threadpool(threads)
            t0 = time.perf_counter()  # load time: the program and its methods, not imports
            prog = Runtime.get().load_program(str(path))
            self._pre, self._dec = prog.load_method("prefill"), prog.load_method("decode")
            self.backend = "executorch-xnnpack"
        elif path.suffix == ".tflite":
            from ai_edge_litert.interpreter import Interpreter

            t0 = time.perf_counter()
            self._interp = Interpreter(model_path=str(path), num_threads=threads or 1)
            self._pre = self._interp.get_signature_runner("prefill")
            self._dec = self._interp.get_signature_runner("decode")
            self.backend = "litert"
        else:
            raise QsaError(f"{path}: expected a .pte (ExecuTorch) or .tflite (LiteRT) file")
        self.load_seconds = time.perf_counter() - t0
        self.path = path

    def _call(self, method, args):
        if self.backend.startswith("executorch"):
            return tuple(method.execute(list(args)))
        feeds = {f"args_{i}": np.asarray(a) for i, a in enumerate(args)}
        out = method(**feeds)
        return tuple(torch.from_numpy(np.asarray(out[k])) for k in
                     sorted(out, key=lambda k: int(k.rsplit("_", 1)[-1])))

    def prefill(self, *args):
        return self._call(self._pre, args)

    def decode(self, *args):
        return self._call(self._dec, args)


def verify(runner: Runner, pre, dec, model: CausalLM, prefill_len: int, cache_len: int,
           steps: int, precision: str) -> dict:
    """The artifact along eager's greedy path (each on its own cache): logits within the
    tolerance and the same greedy token at every step; raises otherwise.

    Comparing two free-running greedy decodes instead would fail any int8 model at the first
    near-tie: once one token differs, the two continue different texts. So the artifact is
    fed eager's tokens. A different argmax counts as a mismatch unless eager's top-two margin
    there is within the measured logit error (int8 only: fp32 must agree everywhere). The
    free-running agreement is reported too (``free_running_tokens_matching``)."""
    prompt = calibration_prompts(1, prefill_len, seed=123)[0]
    with torch.no_grad():
        ref_tok, ref_logits = greedy(pre, dec, prompt, model.init_cache(1, cache_len), steps)
    got_tok, got_logits = greedy(runner.prefill, runner.decode, prompt,
                                 model.init_cache(1, cache_len), steps, feed=ref_tok)
    free_tok, _ = greedy(runner.prefill, runner.decode, prompt,
                         model.init_cache(1, cache_len), steps)
    scale = max(float(r.abs().max()) for r in ref_logits)
    diffs = [float((g - r).abs().max()) for g, r in zip(got_logits, ref_logits, strict=True)]
    err = max(diffs) / scale
    same, ties = 0, 0
    for r, pick, d, t in zip(ref_logits, got_tok, diffs, ref_tok, strict=True):
        if pick == t:
            same += 1
        elif precision != "fp32" and float(r[0, t] - r[0, pick]) <= 2 * d:
            ties += 1  # eager's own margin is within the rounding error: a tie
    report = {"steps": steps, "greedy_tokens_equal": same == steps, "tokens_matching": same,
              "near_tie_flips": ties, "max_rel_logit_error": err,
              "tolerance": TOLERANCE[precision],
              "free_running_tokens_matching": sum(
                  a == b for a, b in zip(ref_tok, free_tok, strict=True))}
    if same + ties != steps or err > TOLERANCE[precision]:
        raise ExportError(
            f"{runner.path}: artifact differs from eager PyTorch along its greedy path: "
            f"{same}/{steps} greedy tokens equal ({ties} near-tie flips), max relative logit "
            f"error {err:.3g} (tolerance {TOLERANCE[precision]})"
        )
    return report


def export_lm(model: CausalLM, target: str, out: str | os.PathLike, precision: str = "fp32",
              prefill_len: int = 64, cache_len: int = 256, verify_steps: int = 64,
              name: str | None = None) -> dict:
    if target not in ("executorch", "litert"):
        raise QsaError(f"target={target!r}; expected 'executorch' or 'litert'")
    if precision not in TOLERANCE:
        raise QsaError(f"precision={precision!r}; expected 'fp32' or 'int8'")
    if prefill_len + verify_steps > cache_len or cache_len > model.config.max_seq_len:
        raise QsaError(
            f"cache_len={cache_len} must hold prefill {prefill_len} + {verify_steps} verified "
            f"steps and be <= the model's max_seq_len={model.config.max_seq_len}"
        )
    out = Path(out)
    ensure_dir(out)
    name = name or f"lm-{model.config.mixer}-{precision}"
    m = prepare(model)
    t0 = time.perf_counter()
    pre, dec, pre_args, dec_args = export_programs(m, precision, prefill_len, cache_len, target)
    path = out / f"{name}.{'pte' if target == 'executorch' else 'tflite'}"
    if target == "executorch":
        lower_executorch(pre, dec, pre_args, dec_args, path)
    else:
        lower_litert(pre, dec, pre_args, dec_args, path, precision)
    export_s = time.perf_counter() - t0
    from ..config import config_to_dict

    cache = model.init_cache(1, cache_len)
    try:
        report = verify(Runner(path), pre, dec, m, prefill_len, cache_len, verify_steps,
                        precision)
    except ExportError as e:
        # like `qsa export`: the artifact stays for inspection, and its JSON says it failed
        meta = {"artifact": path.name, "target": target, "precision": precision,
                "verified": False, "error": str(e)}
        atomic_write_text(out / f"{name}.json", json.dumps(meta, indent=1) + "\n")
        raise ExportError(f"{e}; the artifact is kept for inspection ({name}.json says "
                          "verified: false): do not deploy it") from None
    meta = {
        "artifact": path.name, "target": target, "precision": precision, "bytes":
        path.stat().st_size, "params": model.num_params(), "config": config_to_dict(
            model.config), "prefill_len": prefill_len, "cache_len": cache_len,
        "cache_shapes": [list(c.shape) for c in cache], "export_seconds": export_s,
        "methods": {"prefill": "tokens (1,P) int32, *cache -> logits (1,P,256), *cache",
                    "decode": "token (1,1) int32, pos (1,) int32, *cache -> logits, *cache"},
        "verified": True, "verification": report,
    }
    atomic_write_text(out / f"{name}.json", json.dumps(meta, indent=1) + "\n")
    return meta


def export_cli(args) -> int:
    from ..models.lm import MIXERS, lm_config
    from .train import load_model

    if args.mixer in MIXERS:
        torch.manual_seed(0)
        model = CausalLM(lm_config(args.mixer, args.size,
                                   **{"max_seq_len": args.cache_len, **dict(args.overrides)}))
    else:
        model, _ = load_model(args.mixer)
    meta = export_lm(model, args.target, args.out, args.precision, args.prefill,
                     args.cache_len, args.verify_steps)
    v = meta["verification"]
    print(f"wrote {Path(args.out) / meta['artifact']} ({meta['bytes']} bytes); verified: "
          f"{v['tokens_matching']}/{v['steps']} greedy tokens equal along eager's path"
          + (f" ({v['near_tie_flips']} near-tie flips)" if v["near_tie_flips"] else "")
          + f", max rel logit error "
          f"{v['max_rel_logit_error']:.2e}")
    return 0
